#!/usr/bin/env bash
# `make docs-images`: regenerate every picture in docs/images/ from one real
# run of experiments/incast.yaml, and write that run's headline numbers to
# docs/images/incast-numbers.json (README.md and docs/telemetry.md quote them;
# after a rerun, update their prose from that file).
#
# Brings a lab up and down by itself (`rocelab run`, as root), ~30-60 s.
# DOCS_IMAGES_LAB names the lab (default docs-images).
set -euo pipefail
cd "$(dirname "$0")/.."
LAB=${DOCS_IMAGES_LAB:-docs-images}
R=.venv/bin/rocelab
PY=.venv/bin/python
IMAGES=docs/images

MAKES=(incast-flow-rates.png incast-topology.png)

# Every picture the docs show must be one this script makes.
for ref in $(grep -ohE 'images/[A-Za-z0-9._-]+\.(png|svg)' README.md docs/*.md | sort -u); do
    if [[ " ${MAKES[*]} " != *" ${ref#images/} "* ]]; then
        echo "docs-images: the docs show $ref but this script does not make it" >&2
        exit 1
    fi
done

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$R run experiments/incast.yaml --out "$OUT" --name "$LAB"

cp "$OUT/flow_rates.png" "$IMAGES/incast-flow-rates.png"
# The report's own topology picture is titled with the lab name; redraw it from
# the same results with a title that does not depend on it.
$R graph topologies/clos-2x4-cc.yaml --results "$OUT/results.json" \
    --title "incast: prefill1-4 push KV caches into decode1" -o "$IMAGES/incast-topology.png"

"$PY" - "$OUT/results.json" "$IMAGES/incast-numbers.json" <<'EOF'
import json
import sys

r = json.load(open(sys.argv[1]))
s, b = r["steady"], r["steady"]["bottleneck"]
numbers = {
    "experiment": r["experiment"],
    "link_rate_mbit_s": r["link_rate_bps"] / 1e6,
    "dilation": r["dilation"],
    "steady_from_s": round(s["from_s"], 1),
    "steady_to_s": round(s["to_s"], 1),
    "jain": round(s["jain"], 3),
    "bottleneck": f"{b['node']}:{b['port']}",
    "bottleneck_utilisation": b["utilisation"],
    "queue_p50_kb": round(b["queue_p50"] / 1e3),
    "queue_p90_kb": round(b["queue_p90"] / 1e3),
    "queue_max_kb": round(b["queue_max"] / 1e3),
    "pfc_pauses": r["pfc"]["pauses"],
    "lossless_drops": r["lossless_drops"],
    "integrity_ok": r["integrity_ok"],
    "flows": {f["name"]: {"steady_mbit_s": round(s["rates_bps"][f["name"]] / 1e6, 1),
                          "goodput_mbit_s": round(f["goodput_bps"] / 1e6, 1),
                          "fct_s": round(f["fct_s"], 2), "cnps_rx": f["cnps_rx"],
                          "retransmitted_packets": f["retransmitted_packets"]}
              for f in r["flows"]},
}
with open(sys.argv[2], "w") as out:
    json.dump(numbers, out, indent=2)
    out.write("\n")
print(f"docs-images: bottleneck {numbers['bottleneck']} {numbers['bottleneck_utilisation']:.1%} "
      f"busy, Jain {numbers['jain']:.3f}, {numbers['pfc_pauses']} pauses, "
      f"{numbers['lossless_drops']} lossless drops -> {sys.argv[2]}")
EOF
ls -l "$IMAGES"
