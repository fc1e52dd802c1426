#!/usr/bin/env bash
# Install the system packages rocelab needs (Debian/Ubuntu, as root).
# Idempotent and quick when everything is present: apt runs only if something is missing.
set -euo pipefail

PACKAGES=(frr iproute2 iputils-ping tcpdump tshark iperf3 nftables procps prometheus
          clang libbpf-dev libc6-dev linux-libc-dev  # clang + headers: the BPF dataplane
          qemu-system-x86 perftest rdma-core ibverbs-utils ibverbs-providers busybox-static  # rxe hosts
          python3-pyverbs)  # rxe hosts in transfer/kv: emulator/rxe/kvpeer.py runs verbs from Python
PACKAGES+=(chromium)  # headless, the tests open report.html in a real browser (tests/browser.py)
python3 -c 'import ensurepip, venv' 2>/dev/null || PACKAGES+=(python3-venv python3-pip)
PACKAGES+=(gcc)  # the engine's compiled data path (setup.py builds emulator/roce/_wire.c at pip install)
python3 -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || PACKAGES+=(python3-dev)  # and the headers it compiles against

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "rocelab setup: need root to install: ${missing[*]}" >&2
    exit 1
fi
echo "rocelab setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
