#!/usr/bin/env bash
# `make demo`: the main job on the built-in default topology, start to finish.
# Brings the fabric up, shows it converged with ECMP, moves RoCEv2 KV-cache
# transfers across it,
# fails and heals a leaf uplink to show ECMP shrink and recover, then tears down.
set -euo pipefail
cd "$(dirname "$0")/.."
TOPOLOGY=${1:-topologies/clos-2x4.yaml}
LAB=${DEMO_LAB:-demo}
R=.venv/bin/rocelab
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

trap '$R down "$LAB" >/dev/null 2>&1 || true' EXIT
$R down "$LAB" >/dev/null 2>&1 || true

step "rocelab up $TOPOLOGY --name $LAB"
$R up "$TOPOLOGY" --name "$LAB"

step "rocelab status $LAB"
$R status "$LAB"

dst=$($R status "$LAB" --json | python3 -c 'import json,sys; h=json.load(sys.stdin)["hosts"]; print([x["address"] for x in h if x["role"]=="decode"][0])')
step "leaf1's kernel FIB toward decode1 ($dst): one next hop per spine (ECMP)"
$R exec "$LAB" leaf1 -- ip route show match "$dst"

step "prefill1 -> decode1 across the fabric"
$R exec "$LAB" prefill1 -- ping -c 3 -i 0.2 "$dst"

step "RoCEv2: 64 MiB RDMA WRITE prefill1 -> decode1 over 4 QPs (each QP's UDP source port picks a spine)"
$R transfer "$LAB" --src prefill1 --dst decode1 --size 64MiB --qps 4

step "KV-cache handoffs: Llama-3-70B, 64-token prompts, 8 requests over 4 prefill/decode pairs, decode pulls (RDMA READ)"
$R kv "$LAB" --model llama3-70b --tokens 64 --requests 8 --concurrency 4 --qps 2 --op read

step "fail leaf1's uplink to spine1: ECMP on leaf1 shrinks to 1"
$R exec "$LAB" leaf1 -- ip link set spine1 down
for _ in $(seq 50); do
    [ "$($R exec "$LAB" leaf1 -- ip -j route show match "$dst" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(len(r[0].get("nexthops",[0])) if r else 0)')" = 1 ] && break
    sleep 0.1
done
$R exec "$LAB" leaf1 -- ip route show match "$dst"
$R exec "$LAB" prefill1 -- ping -c 2 -i 0.2 "$dst"

step "heal it: ECMP comes back (FRR 8.4 nexthop-group bug avoided)"
$R exec "$LAB" leaf1 -- ip link set spine1 up
for _ in $(seq 100); do
    $R status "$LAB" --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["converged"] else 1)' && break
    sleep 0.1
done
$R exec "$LAB" leaf1 -- ip route show match "$dst"

step "rocelab down $LAB"
$R down "$LAB"
trap - EXIT

step "the default experiment: a 4:1 KV-cache incast on the congestion plane (400G emulated at 100 Mbit/s, ECN + PFC + DCQCN)"
OUT=${DEMO_OUT:-out/demo-incast}
$R run experiments/incast.yaml --out "$OUT" --name "$LAB-cc"
echo "report: $OUT/report.html (plots and topology picture beside it)"
