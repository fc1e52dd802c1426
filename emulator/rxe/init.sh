#!/bin/busybox sh
# /init of an rxe guest (emulator/rxe/guest.py packs it): modules, a tmpfs root with
# only what the host exports (emulator/rxe/guestfs.py: /usr, a minimal /etc, the
# package, its venv and Python, each read-only over virtio-9p), eth0 as the kernel
# command line says, Soft-RoCE on eth0, then the agent (emulator/rxe/agent.py), chrooted.
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
        rocelab.mounts=*) MOUNTS=${arg#*=} ;;
        rocelab.links=*) LINKS=${arg#*=} ;;
    esac
done

R=/newroot
mount -t tmpfs -o mode=0755 root $R
mkdir -p $R/proc $R/sys $R/dev $R/run $R/var/tmp $R/tmp $R/root $R/mnt
chmod 1777 $R/tmp $R/var/tmp
chmod 0700 $R/root
ln -s ../run $R/var/run
for l in $(echo "$LINKS" | tr ',' ' '); do ln -s "${l#*:}" "$R/${l%%:*}"; done
for m in $(echo "$MOUNTS" | tr ',' ' '); do
    mkdir -p "$R${m#*:}" && mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose \
        "${m%%:*}" "$R${m#*:}" || { say "cannot mount ${m#*:} (${m%%:*}) over 9p"; poweroff -f; }
done
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
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
