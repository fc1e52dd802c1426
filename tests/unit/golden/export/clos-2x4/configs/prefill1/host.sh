#!/bin/sh
# prefill1 (lab clos-2x4) -- rendered by rocelab: its addresses and routes
set -e
ip link set dev eth0 mtu 9000 up
ip address add 10.2.0.1/31 dev eth0
ip route add default via 10.2.0.0 dev eth0
