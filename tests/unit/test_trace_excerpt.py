"""The shipped trace excerpt is what its NOTICE says it is, with its license beside it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "traces"
EXCERPT = TRACES / "mooncake-conversation-excerpt.jsonl"


def test_excerpt_matches_the_notice():
    notice = (TRACES / "README.md").read_text()
    digests = re.findall(r"`([0-9a-f]{64})`", notice)
    assert hashlib.sha256(EXCERPT.read_bytes()).hexdigest() == digests[0]
    assert "first 1,000 lines" in notice and "Apache License 2.0" in notice
    assert "FAST 25" in notice and "kvcache-ai/Mooncake" in notice  # source and citation


def test_license_is_the_apache_2_text():
    text = (TRACES / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "4. Redistribution." in text


def test_every_line_is_a_request_in_arrival_order():
    rows = [json.loads(line) for line in EXCERPT.read_text().splitlines()]
    assert len(rows) == 1000
    assert all(set(r) == {"timestamp", "input_length", "output_length", "hash_ids"} for r in rows)
    stamps = [r["timestamp"] for r in rows]
    assert stamps == sorted(stamps) and (stamps[0], stamps[-1]) == (0, 330000)
    # a 512-token block per hash: the IDs cover the prompt
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 512) for r in rows)
