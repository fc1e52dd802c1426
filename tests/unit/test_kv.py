from __future__ import annotations

import pytest

from emulator.engine.kv import MODELS, KvLayout, model
from emulator.errors import RocelabError


def test_llama3_70b_is_320_kib_per_token_fp16_and_160_fp8():
    m = model("llama3-70b")
    assert m.bytes_per_token("fp16") == 320 * 1024
    assert m.bytes_per_token("fp8") == 160 * 1024


def test_llama3_8b_is_128_kib_per_token():
    assert model("llama3-8b").bytes_per_token() == 128 * 1024


@pytest.mark.parametrize("tokens", [1, 15, 16, 17, 100, 4096])
def test_segments_cover_exactly_the_cache(tokens):
    layout = KvLayout(model("llama3-8b"), tokens)
    segs = layout.segments(seed=3)
    assert sum(s.length for s in segs) == layout.total_bytes == tokens * 128 * 1024
    assert len(segs) == 32 * 2 * layout.blocks
    for s in segs:  # every copy inside the region, none overlapping on either side
        assert 0 <= s.src_offset and s.src_offset + s.length <= layout.region_bytes
        assert s.dst_offset % layout.block_bytes == 0
    dst = sorted(s.dst_offset for s in segs)
    assert len(set(dst)) == len(dst)


def test_destination_blocks_are_scattered_but_deterministic():
    layout = KvLayout(model("llama3-70b"), 256)
    a, b = layout.segments(seed=1), layout.segments(seed=1)
    assert a == b
    assert any(s.src_offset != s.dst_offset for s in a)


def test_every_preset_has_an_moe_and_sane_shapes():
    assert any("MoE" in m.note for m in MODELS.values())
    for m in MODELS.values():
        assert m.layers > 0 and m.kv_heads > 0 and m.head_dim in (64, 128, 256)


def test_unknown_model_and_dtype_are_clear():
    with pytest.raises(RocelabError, match="--model: unknown 'gpt5'; allowed: llama3-8b"):
        model("gpt5")
    with pytest.raises(RocelabError, match="--dtype"):
        model("llama3-8b").bytes_per_token("int3")


def test_source_bytes_are_seeded_and_chunked_for_large_regions(monkeypatch):
    from emulator.engine import job as jobmod
    from emulator.engine.job import Job, Op, source_bytes

    small = Job(Op.WRITE, size=1000, seed=3)
    assert source_bytes(small) == source_bytes(small) != source_bytes(Job(Op.WRITE, size=1000))
    monkeypatch.setattr(jobmod, "SOURCE_CHUNK", 256)  # as a 256 MiB+ region is built
    chunked = source_bytes(small)
    assert len(chunked) == 1000 and chunked[:256] == source_bytes(Job(Op.WRITE, size=256, seed=3))
