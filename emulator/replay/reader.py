"""Reading a request trace: Mooncake's JSONL, or rocelab's own CSV/JSONL (docs/workloads.md).

Mooncake (FAST'25 release): one JSON object a line, `timestamp` (ms from the trace's
start), `input_length`, `output_length` (tokens), `hash_ids` (512-token prefix blocks).
rocelab's own: the same four facts as `timestamp_ms`, `input_tokens`, `output_tokens` and
optional `prefix_blocks` -- JSONL objects, or CSV with that header and the blocks
space-separated. The file is a user's: stat'ed first, read to a bound, every bad line one
error naming its line and field. Timestamps must not go backwards (a trace is arrival
order; a reordered file is refused at the first line that goes back, not silently sorted).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..boundedread import NotRegularError, TooLargeError, read_bytes
from ..errors import ExitCode, RocelabError

MAX_TRACE_BYTES = 256 << 20  # Mooncake's hour is 3 MB; a week of a busy service fits
MAX_TOKENS = 10_000_000
MAX_BLOCKS = 100_000
MOONCAKE = ("timestamp", "input_length", "output_length", "hash_ids")
ROCELAB = ("timestamp_ms", "input_tokens", "output_tokens", "prefix_blocks")


class TraceError(RocelabError):
    """A trace file that cannot be replayed: the message names the file, line and field."""

    exit_code = ExitCode.BAD_FILE


@dataclass(frozen=True)
class Request:
    """One request of a trace: arrival (ms from the trace's start), tokens, prefix blocks."""

    index: int  # 0-based position in the file's requests
    t_ms: float
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...] = ()


def read(path: str | Path, start_s: float = 0.0, for_s: float | None = None) -> list[Request]:
    """The requests of `path` arriving in [start_s, start_s + for_s) (trace seconds), their
    times shifted so the window starts at 0. TraceError for any problem."""
    requests = parse(_text(path), str(path))
    lo, hi = start_s * 1000, (start_s + for_s) * 1000 if for_s is not None else float("inf")
    window = [r for r in requests if lo <= r.t_ms < hi]
    if not window:
        span = f"{requests[0].t_ms / 1000:g} s .. {requests[-1].t_ms / 1000:g} s"
        raise TraceError(f"{path}: no request in the window --from {start_s:g}s"
                         f"{f' --for {for_s:g}s' if for_s is not None else ''} (the trace spans {span})")
    return [Request(i, r.t_ms - lo, r.input_tokens, r.output_tokens, r.blocks)
            for i, r in enumerate(window)]


def _text(path: str | Path) -> str:
    try:
        data = read_bytes(path, MAX_TRACE_BYTES)
    except (NotRegularError, TooLargeError) as e:
        raise TraceError(f"{path}: {e}") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text (byte {e.start})") from None


def parse(text: str, source: str = "trace") -> list[Request]:
    """Every request of a trace's text, in order (TraceError: empty, bad line, time going back)."""
    lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not lines:
        raise TraceError(f"{source}: empty: no request (one JSON object or CSV row a line)")
    json_lines = lines[0][1].lstrip()[:1] in ("{", "[")
    rows = _jsonl(lines, source) if json_lines else _csv(lines, source)
    out: list[Request] = []
    for n, row in rows:
        req = _request(row, len(out), source, n)
        if out and req.t_ms < out[-1].t_ms:
            raise TraceError(f"{source}: line {n}: timestamp {req.t_ms:g} ms is before the line "
                             f"above ({out[-1].t_ms:g} ms): a trace is in arrival order; sort it")
        out.append(req)
    return out


def _jsonl(lines: list[tuple[int, str]], source: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for n, line in lines:
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise TraceError(f"{source}: line {n}: not a JSON object ({str(e).split(':')[0]})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{source}: line {n}: not a JSON object")
        rows.append((n, obj))
    return rows


def _csv(lines: list[tuple[int, str]], source: str) -> list[tuple[int, dict[str, Any]]]:
    header = [h.strip() for h in next(csv.reader([lines[0][1]]))]
    if header[:3] != list(ROCELAB[:3]) or header[3:] not in ([], [ROCELAB[3]]):
        raise TraceError(f"{source}: line {lines[0][0]}: a CSV trace starts with the header "
                         f"{','.join(ROCELAB)} (prefix_blocks optional); got {lines[0][1][:60]!r}")
    rows = []
    for n, line in lines[1:]:
        cells = next(csv.reader(io.StringIO(line)))
        if len(cells) != len(header):
            raise TraceError(f"{source}: line {n}: {len(cells)} fields; the header has {len(header)}")
        row: dict[str, Any] = dict(zip(header, (c.strip() for c in cells)))
        blocks = row.get("prefix_blocks", "")
        row["prefix_blocks"] = blocks.split() if blocks else []
        rows.append((n, row))
    return rows


def _request(row: dict[str, Any], index: int, source: str, n: int) -> Request:
    keys = MOONCAKE if "timestamp" in row or "input_length" in row else ROCELAB
    unknown = sorted(set(row) - set(keys))
    if unknown:
        raise TraceError(f"{source}: line {n}: unknown field {unknown[0]!r}; allowed: {', '.join(keys)}")
    t = _number(row, keys[0], source, n, float, 7 * 86400 * 1000)
    tokens = _number(row, keys[1], source, n, int, MAX_TOKENS)
    out = _number(row, keys[2], source, n, int, MAX_TOKENS)
    blocks = row.get(keys[3], [])
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        raise TraceError(f"{source}: line {n}: {keys[3]}: a list of at most {MAX_BLOCKS} block ids")
    ids = tuple(_block(b, keys[3], source, n) for b in blocks)
    return Request(index, t, tokens, out, ids)


def _number(row: dict[str, Any], key: str, source: str, n: int, kind: type, limit: float) -> Any:
    if key not in row:
        raise TraceError(f"{source}: line {n}: {key}: missing")
    v = row[key]
    try:
        value = kind(v) if isinstance(v, str) else v
    except ValueError:
        value = None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= limit
    if not ok or (kind is int and value != int(value)):
        what = "an integer" if kind is int else "a number"
        raise TraceError(f"{source}: line {n}: {key}: must be {what} in 0..{limit:g} (got {str(v)[:24]!r})")
    return kind(value)


def _block(b: Any, key: str, source: str, n: int) -> int:
    if isinstance(b, str) and b.isdigit():
        b = int(b)
    if not isinstance(b, int) or isinstance(b, bool) or b < 0:
        raise TraceError(f"{source}: line {n}: {key}: block ids are integers >= 0 (got {str(b)[:24]!r})")
    return b
