#!/bin/sh
# decode2 (lab clos-2p-2x4) -- rendered by rocelab: its addresses and routes
set -e
sysctl -qw net.ipv4.conf.all.ignore_routes_with_linkdown=1
sysctl -qw net.ipv4.fib_multipath_hash_policy=1
ip link set dev eth0 mtu 9000 up
ip address add 10.2.1.3/31 dev eth0
ip link set dev eth1 mtu 9000 up
ip address add 10.2.3.3/31 dev eth1
ip route add default via 10.2.1.2 dev eth0
ip route add 10.2.2.0/24 via 10.2.3.2 dev eth1
ip route add 10.2.3.0/24 via 10.2.3.2 dev eth1
