#!/bin/busybox sh
# /init of an rxe guest (emulator/rxe/guest.py packs it): modules, the host's root
# read-only over virtio-9p, eth0 as the kernel command line says, Soft-RoCE on eth0,
# then the agent (emulator/rxe/agent.py) with the host's own Python, chrooted.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
say() { echo "rocelab-init: $*" > /dev/console; }

for m in $(cat /modules.order); do
    insmod /lib/modules/$m.ko || say "insmod $m failed"
done

for arg in $(cat /proc/cmdline); do
    case "$arg" in
        rocelab.name=*) NAME=${arg#*=} ;;
        rocelab.addr=*) ADDR=${arg#*=} ;;
        rocelab.gw=*) GW=${arg#*=} ;;
        rocelab.mtu=*) MTU=${arg#*=} ;;
        rocelab.python=*) PY=${arg#*=} ;;
        rocelab.agent=*) AGENT=${arg#*=} ;;
        rocelab.keep=*) KEEP=${arg#*=} ;;
    esac
done

R=/newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot $R || {
    say "cannot mount the host root over 9p"; poweroff -f; }
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
# directories under the tmpfs places that the guest needs from the host (a checkout
# in /tmp): held aside by bind mounts, then moved back on top of the tmpfs
n=0; KEPT=""
for k in $(echo "$KEEP" | tr ',' ' '); do
    mkdir -p /keep/$n && mount -o bind "$R$k" /keep/$n && KEPT="$KEPT $n:$k"
    n=$((n + 1))
done
for d in tmp run var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $R/$d; done
for e in $KEPT; do
    mkdir -p "$R${e#*:}" && mount -o move "/keep/${e%%:*}" "$R${e#*:}" || say "cannot keep ${e#*:}"
done
mkdir -p $R/dev/pts $R/dev/shm && mount -t devpts devpts $R/dev/pts && mount -t tmpfs tmpfs $R/dev/shm

hostname "${NAME:-rxe}"
ip link set lo up
echo 1 > /proc/sys/net/ipv6/conf/eth0/disable_ipv6  # the fabric's hosts speak IPv4 only
ip link set eth0 mtu "${MTU:-1500}" up
ip addr add "$ADDR" dev eth0
[ -n "$GW" ] && ip route add default via "$GW" dev eth0
chroot $R /usr/bin/rdma link add rxe0 type rxe netdev eth0 || say "rdma link add failed"

say "starting the agent"
chroot $R /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 "$PY" -I "$AGENT"
say "agent exited ($?)"
poweroff -f
