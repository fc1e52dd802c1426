"""KV-cache sizing and paged layout: how many bytes a request's cache is,
and which RDMA operations move it from a prefill host to a decode host.

bytes per token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element.
Serving stacks page the cache in blocks of `tokens_per_block` tokens (vLLM:
16), one tensor per layer, so a transfer is layers x 2 x blocks separate
block copies, each landing at whatever block the decode side allocated.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..errors import RocelabError

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
DEFAULT_TOKENS_PER_BLOCK = 16


@dataclass(frozen=True)
class Model:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    note: str = ""

    def bytes_per_token(self, dtype: str = "fp16") -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(dtype)


# Grouped-query attention shapes from the models' published configs.
MODELS = {
    "llama3-8b": Model("Llama-3-8B", layers=32, kv_heads=8, head_dim=128),
    "llama3-70b": Model("Llama-3-70B", layers=80, kv_heads=8, head_dim=128),
    "llama3-405b": Model("Llama-3.1-405B", layers=126, kv_heads=8, head_dim=128),
    "mixtral-8x7b": Model("Mixtral-8x7B", layers=32, kv_heads=8, head_dim=128,
                          note="MoE: experts change FLOPs, not the KV cache"),
    "qwen3-235b-a22b": Model("Qwen3-235B-A22B", layers=94, kv_heads=4, head_dim=128, note="MoE"),
}


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise RocelabError(f"--dtype: unknown {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}") from None


def model(name: str) -> Model:
    try:
        return MODELS[name]
    except KeyError:
        raise RocelabError(f"--model: unknown {name!r}; allowed: {', '.join(MODELS)}") from None


@dataclass(frozen=True)
class Segment:
    """One block copy: `length` bytes from `src_offset` in the prefill region
    to `dst_offset` in the decode region (one RDMA WRITE, or one READ)."""

    src_offset: int
    dst_offset: int
    length: int


@dataclass(frozen=True)
class KvLayout:
    model: Model
    tokens: int
    dtype: str = "fp16"
    tokens_per_block: int = DEFAULT_TOKENS_PER_BLOCK

    @property
    def blocks(self) -> int:
        return math.ceil(self.tokens / self.tokens_per_block)

    @property
    def block_bytes(self) -> int:
        """One layer's K (or V) for one full block."""
        return self.tokens_per_block * self.model.kv_heads * self.model.head_dim * dtype_bytes(self.dtype)

    @property
    def total_bytes(self) -> int:
        return self.tokens * self.model.bytes_per_token(self.dtype)

    @property
    def region_bytes(self) -> int:
        """Region size on either side: whole blocks for every layer, K and V."""
        return self.model.layers * 2 * self.blocks * self.block_bytes

    def segments(self, seed: int = 0) -> list[Segment]:
        """Block copies in (layer, K/V, block) order. The decode side's block
        table is a seeded permutation: pages land scattered, as in a real cache."""
        rng = random.Random(seed)
        per_token = self.block_bytes // self.tokens_per_block
        out = []
        for tensor in range(self.model.layers * 2):
            dst_blocks = list(range(self.blocks))
            rng.shuffle(dst_blocks)
            base = tensor * self.blocks * self.block_bytes
            for b in range(self.blocks):
                filled = min(self.tokens_per_block, self.tokens - b * self.tokens_per_block)
                out.append(Segment(base + b * self.block_bytes, base + dst_blocks[b] * self.block_bytes,
                                   filled * per_token))
        return out


def describe(layout: KvLayout) -> str:
    """The sizing formula with the numbers filled in (for docs and --json)."""
    m = layout.model
    return (f"{m.name}: 2 x {m.layers} layers x {m.kv_heads} KV heads x {m.head_dim} head_dim x "
            f"{dtype_bytes(layout.dtype)} B ({layout.dtype}) = {m.bytes_per_token(layout.dtype)} B/token; "
            f"x {layout.tokens} tokens = {layout.total_bytes} B in "
            f"{len(layout.segments())} block copies of <= {layout.block_bytes} B")
