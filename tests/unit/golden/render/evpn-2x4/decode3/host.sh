#!/bin/sh
# decode3 (lab evpn-2x4) -- rendered by rocelab: its addresses and routes
set -e
ip link set dev eth0 mtu 9000 up
ip address add 10.2.0.7/16 dev eth0
