#!/usr/bin/env bash
# `make demo`: the main job on the default topology, start to finish.
# Brings the fabric up, shows it converged with ECMP, moves RoCEv2 KV-cache
# transfers across it, fails a leaf uplink with `rocelab fail` (both ends lose
# carrier, as real optics do) and heals it with `rocelab heal`, each with its
# measured convergence, tears down, then runs the 4:1 incast experiment.
#
# DEMO_LAB=name runs the fabric under another lab name (default: the topology's);
# DEMO_OUT=dir puts the setup log and the incast report elsewhere (default: out/).
set -euo pipefail
cd "$(dirname "$0")/.."
TOPOLOGY=${1:-topologies/clos-2x4.yaml}
OUT=${DEMO_OUT:-out}
R=.venv/bin/rocelab
if [ -t 1 ]; then
    bold=$'\033[1m' plain=$'\033[0m'
else  # a log: no escapes, and tables as wide as a log reader's window rather than 80 columns
    bold='' plain=''
    export COLUMNS=${COLUMNS:-120}
fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
die() { echo "demo: $*" >&2; exit 1; }

# Setup (apt packages if missing, the virtualenv) talks a lot: into a log, one line here.
mkdir -p "$OUT"
if make --no-print-directory setup >"$OUT/demo-setup.log" 2>&1; then
    echo "setup: system packages and .venv ready (log: $OUT/demo-setup.log)"
else
    tail -n 20 "$OUT/demo-setup.log" >&2
    die "make setup failed; the whole log is $OUT/demo-setup.log"
fi

LAB=${DEMO_LAB:-$(.venv/bin/python -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["name"])' \
                  "$TOPOLOGY")}
name=(); [ -n "${DEMO_LAB:-}" ] && name=(--name "$LAB")


step "rocelab up $TOPOLOGY${DEMO_LAB:+ --name $LAB}"
# A lab of this name that is already running is refused by `up` (and left alone).
$R up "$TOPOLOGY" "${name[@]}"
trap 'echo "demo: tearing down $LAB" >&2; $R down "$LAB" >/dev/null 2>&1 || true' EXIT

step "rocelab status $LAB"
$R status "$LAB"

step "rocelab validate $LAB: named checks a CI job can trust (exit 10 if one fails)"
$R validate "$LAB"

dst=$($R status "$LAB" --json | .venv/bin/python -c \
      'import json, sys; print(next(h["address"] for h in json.load(sys.stdin)["hosts"] if h["node"] == "decode1"))')
step "leaf1's kernel FIB toward decode1 ($dst): one next hop per spine (ECMP)"
$R exec "$LAB" leaf1 -- ip route show match "$dst"

step "prefill1 -> decode1 across the fabric"
$R exec "$LAB" prefill1 -- ping -c 3 -i 0.2 "$dst"

step "RoCEv2: 64 MiB RDMA WRITE prefill1 -> decode1 over 4 QPs (each QP's UDP source port picks a spine)"
$R transfer "$LAB" --src prefill1 --dst decode1 --size 64MiB --qps 4

step "KV-cache handoffs: Llama-3-70B, 64-token prompts, 8 requests over 4 prefill/decode pairs, decode pulls (RDMA READ)"
$R kv "$LAB" --model llama3-70b --tokens 64 --requests 8 --concurrency 4 --qps 2 --op read

step "rocelab fail $LAB link leaf1 spine1: carrier loss on both ends; returns once routing went around it"
$R fail "$LAB" link leaf1 spine1
echo "leaf1 toward decode1 now, through spine2 only:"
$R exec "$LAB" leaf1 -- ip route show match "$dst"
$R exec "$LAB" prefill1 -- ping -c 3 -i 0.2 "$dst"

step "rocelab heal $LAB --all: the link comes back and leaf1 has a next hop per spine again"
$R heal "$LAB" --all
$R wait "$LAB" --until healthy --timeout 30
$R exec "$LAB" leaf1 -- ip route show match "$dst"

step "rocelab down $LAB"
trap - EXIT
$R down "$LAB"

step "the default experiment: a 4:1 KV-cache incast on the congestion plane (400G emulated at 100 Mbit/s, ECN + PFC + DCQCN)"
$R run experiments/incast.yaml --out "$OUT/demo-incast"
echo "report: $OUT/demo-incast/report.html (plots and the topology picture beside it)"
