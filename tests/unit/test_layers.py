"""Every import runs down: the import graph, read from the code, against the layers that
docs/architecture.md draws ("## Layers"), with no cycle between modules.

The graph is every import of an emulator module anywhere in emulator/**: at the top,
inside functions and under `if TYPE_CHECKING:`, relative ones resolved. A diagram line
is a layer, the top line the highest; its entries are module paths (`lab.py`) or
packages (`engine/`), and a module belongs to the most specific entry that covers it.
An import within one layer is allowed; one upward only where the section lists it as
"- `importer.py` -> `imported.py`: reason".
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = "docs/architecture.md"
EXCEPTION = re.compile(r"^- `([\w/.]+)` -> `([\w/.]+)`: (.*\S)")


@dataclass(frozen=True)
class Import:
    src: str  # path under emulator/, "engine/daemon.py"
    line: int
    dst: str  # the imported module's path under emulator/
    name: str  # as written, resolved: "emulator.engine.client"


def modules(pkg: Path) -> dict[str, str]:
    """Dotted name -> path under the package ("emulator.engine" -> "engine/__init__.py")."""
    out = {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg)
        parts = [pkg.name, *rel.with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = rel.as_posix()
    return out


def _targets(node: ast.Import | ast.ImportFrom, package: str, mods: dict[str, str]) -> set[str]:
    """What one import statement in `package` reads: `from X import a` is X.a where that
    is a module, else X; relative names resolved."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names}


@functools.cache  # both tests read the same tree
def imports(pkg: Path) -> list[Import]:
    mods = modules(pkg)
    out = []
    for name, rel in mods.items():
        package = name if rel.endswith("__init__.py") else name.rpartition(".")[0]
        for node in ast.walk(ast.parse((pkg / rel).read_text(), rel)):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in sorted(_targets(node, package, mods)):
                while target and target not in mods:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and mods[target] != rel:
                    out.append(Import(rel, node.lineno, mods[target], target))
    return out


@dataclass
class Layers:
    lines: list[list[str]]  # top first
    exceptions: dict[tuple[str, str], str]

    def of(self, rel: str) -> int | None:
        """The layer (0: the top) of the most specific entry covering `rel`."""
        best: tuple[int, int] | None = None
        for i, entries in enumerate(self.lines):
            for e in entries:
                if rel == e or (e.endswith("/") and rel.startswith(e)):
                    best = max(best or (-1, 0), (len(e), i))
        return None if best is None else best[1]

    def name(self, layer: int) -> str:
        return f"layer {layer + 1} ({' '.join(self.lines[layer])})"


def parse_layers(text: str) -> Layers:
    """The "## Layers" section: its first fenced block, one layer a line (a trailing
    "(...)" is a comment), and its exceptions."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    diagram = section.split("```", 2)[1]
    lines = [re.sub(r"\(.*\)\s*$", "", line).split() for line in diagram.splitlines()]
    exceptions = {(m[1], m[2]): m[3] for line in section.splitlines()
                  if (m := EXCEPTION.match(line))}
    return Layers([entries for entries in lines if entries], exceptions)


def problems(pkg: Path, layers: Layers) -> list[str]:
    """Modules in no layer, imports that run upward (not listed), listed ones not used."""
    out = [f"emulator/{rel} is in no layer: add it to the Layers diagram in {DOC}"
           for rel in modules(pkg).values() if layers.of(rel) is None]
    used = set()
    for imp in imports(pkg):
        src, dst = layers.of(imp.src), layers.of(imp.dst)
        if src is None or dst is None or dst >= src:
            continue
        if (imp.src, imp.dst) in layers.exceptions:
            used.add((imp.src, imp.dst))
            continue
        out.append(f"emulator/{imp.src}:{imp.line} imports {imp.name} upward: "
                   f"{layers.name(src)} -> {layers.name(dst)}")
    out += [f"listed exception `{a}` -> `{b}` is no upward import (any more): drop it from {DOC}"
            for a, b in layers.exceptions if (a, b) not in used]
    return out


def cycles(pkg: Path) -> list[list[Import]]:
    """One cycle per strongly connected group of modules (Tarjan), as its imports."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in imports(pkg):
        edges.setdefault(imp.src, {}).setdefault(imp.dst, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(set(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [_cycle_in(group, edges) for group in groups]


def _cycle_in(group: set[str], edges: dict[str, dict[str, Import]]) -> list[Import]:
    """A path from the group's first module back to itself, within the group."""
    start = min(group)
    path, seen, at = [], {start}, start
    while True:
        nxt = min(w for w in edges[at] if w in group)
        path.append(edges[at][nxt])
        if nxt in seen:
            return path[next(i for i, imp in enumerate(path) if imp.src == nxt):]
        seen.add(nxt)
        at = nxt


def test_every_import_runs_down_the_layers():
    layers = parse_layers((ROOT / DOC).read_text())
    assert layers.lines, f"{DOC}: no Layers diagram"
    entries = [e for line in layers.lines for e in line]
    missing = [e for e in entries if not (ROOT / "emulator" / e).exists()]
    assert not missing, f"{DOC}'s Layers diagram names what does not exist: {missing}"
    assert len(set(entries)) == len(entries), f"{DOC}'s Layers diagram repeats an entry"
    assert len(layers.exceptions) <= 1, f"{DOC} lists {len(layers.exceptions)} exceptions"
    found = problems(ROOT / "emulator", layers)
    assert not found, "\n".join(found)


def test_no_import_cycle():
    found = cycles(ROOT / "emulator")
    assert not found, "\n".join(
        "import cycle: " + "; ".join(f"emulator/{i.src}:{i.line} imports {i.name}" for i in c)
        for c in found)


DIAGRAM = """# A

## Layers

```
top.py   (the top)
mid/
low.py
```

- `mid/a.py` -> `top.py`: a reason

## Next
"""


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "emulator"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_the_check_sees_upward_imports_cycles_and_strays(tmp_path):
    pkg = _tree(tmp_path, {
        "__init__.py": "", "top.py": "from . import low\n", "low.py": "",
        "mid/__init__.py": "", "mid/a.py": "from .. import low\nfrom ..top import x\n",
        "mid/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from emulator.mid import c\n    from ..top import y\n",
        "mid/c.py": "def f():\n    from . import b\n", "stray.py": "import emulator.low\n"})
    layers = parse_layers(DIAGRAM)
    assert layers.lines == [["top.py"], ["mid/"], ["low.py"]]
    assert layers.of("mid/c.py") == 1 and layers.of("stray.py") is None
    layers.lines[0].append("__init__.py")
    assert problems(pkg, layers) == [
        f"emulator/stray.py is in no layer: add it to the Layers diagram in {DOC}",
        "emulator/mid/b.py:4 imports emulator.top upward: layer 2 (mid/) -> "
        "layer 1 (top.py __init__.py)"]
    assert [[(i.src, i.line, i.name) for i in c] for c in cycles(pkg)] == [
        [("mid/b.py", 3, "emulator.mid.c"), ("mid/c.py", 2, "emulator.mid.b")]]
