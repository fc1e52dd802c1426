#!/bin/sh
# decode4 (lab l2-2x4) -- rendered by rocelab: its addresses and routes
set -e
ip link set dev eth0 mtu 9000 up
ip address add 10.2.0.8/16 dev eth0
