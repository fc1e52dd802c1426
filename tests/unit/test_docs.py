"""Docs stay true: every topology field and every CLI command is documented."""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import click

from emulator.cli import main
from emulator.errors import ExitCode, RocelabError
from emulator.spec import json_schema


def _fields(props: dict, defs: dict, prefix: str = "") -> list[str]:
    """Leaf fields (sections themselves are documented through their fields)."""
    out = []
    for name, prop in props.items():
        ref = prop.get("$ref", "").split("/")[-1]
        if ref in defs and "properties" in defs[ref]:
            out += _fields(defs[ref]["properties"], defs, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def test_every_topology_field_is_in_the_reference():
    schema = json_schema()
    doc = Path("docs/topology.md").read_text()
    fields = _fields(schema["properties"], schema["$defs"])
    missing = [f for f in fields if f"`{f}`" not in doc]
    assert not missing, f"docs/topology.md lacks {missing}"


def test_every_command_is_in_the_cli_reference():
    doc = Path("docs/cli.md").read_text()
    missing = [c for c in main.commands if f"## rocelab {c}" not in doc]
    assert not missing, f"docs/cli.md lacks {missing}"


def test_readme_has_the_two_commands():
    readme = Path("README.md").read_text()
    assert "make demo" in readme and "make test" in readme


def test_every_source_path_the_docs_name_exists():
    named = {m for doc in [*Path("docs").glob("*.md"), Path("README.md")]
             for m in re.findall(r"`(emulator/[\w/]+(?:\.py)?)`", doc.read_text())}
    missing = sorted(p for p in named if not Path(p).exists())
    assert named and not missing, f"docs name paths that do not exist: {missing}"


def test_the_architecture_page_places_every_module():
    doc = Path("docs/architecture.md").read_text()
    top = [p for p in Path("emulator").iterdir()
           if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
           or (p.is_dir() and (p / "__init__.py").exists())]
    missing = [p.name for p in top if f"emulator/{p.name}" not in doc]
    assert not missing, f"docs/architecture.md does not place {missing}"


def test_every_exit_code_is_in_the_table():
    doc = Path("docs/cli.md").read_text()
    missing = [c.name for c in ExitCode if f"\n| {int(c)} |" not in doc]
    assert not missing, f"docs/cli.md's exit-code table lacks {missing}"


# --- issue 25 (7): the reference says what the code does -------------------------------

CLI_DOC = Path("docs/cli.md")


def _sections(doc: str) -> dict[str, tuple[str, str]]:
    """command -> (its `## rocelab CMD ...` synopsis line, its whole section)."""
    out = {}
    for m in re.finditer(r"^## rocelab (\S+)(.*)$", doc, re.M):
        end = doc.find("\n## ", m.end())
        out[m.group(1)] = (m.group(0), doc[m.start():end if end > 0 else len(doc)])
    return out


def _mentions(text: str, opt: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text) is not None


def _options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


def test_every_option_in_help_is_in_its_commands_section():
    sections = _sections(CLI_DOC.read_text())
    missing = [f"{name} {'/'.join(p.opts)}" for name, cmd in main.commands.items()
               for p in _options(cmd) if not any(_mentions(sections[name][1], o) for o in p.opts)]
    assert not missing, f"docs/cli.md does not describe these options: {missing}"


def test_every_option_a_synopsis_lists_exists():
    wrong = []
    for name, (synopsis, _) in _sections(CLI_DOC.read_text()).items():
        cmd = main.commands.get(name)
        have = {o for p in _options(cmd) for o in p.opts + p.secondary_opts} if cmd else set()
        wrong += [f"{name} {o}" for o in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", synopsis)
                  if o not in have]
    assert not wrong, f"docs/cli.md lists options the commands do not have: {wrong}"


def test_the_programs_own_options_are_documented():
    intro = CLI_DOC.read_text().split("\n## ", 1)[0]
    missing = [o for p in _options(main) for o in p.opts if o.startswith("--")
               and not _mentions(intro, f"rocelab {o}") and o != "--help"]
    assert not missing, f"docs/cli.md's introduction lacks {missing}"


def test_every_shipped_topology_is_in_the_table():
    table = Path("docs/topology.md").read_text().split("## Shipped topologies", 1)[1]
    listed = set(re.findall(r"`(topologies/[\w.-]+\.yaml)`", table))
    shipped = {f"topologies/{p.name}" for p in Path("topologies").glob("*.yaml")}
    assert shipped == listed, (f"docs/topology.md's table lacks {sorted(shipped - listed)}, "
                               f"names missing files {sorted(listed - shipped)}")


def test_every_make_target_is_in_the_table():
    targets = set(re.findall(r"^([a-z][a-z-]*):", Path("Makefile").read_text(), re.M))
    table = CLI_DOC.read_text().split("## make targets", 1)[1]
    listed = set(re.findall(r"^\| `make ([a-z-]+)` \|", table, re.M))
    assert targets == listed, (f"docs/cli.md's make targets lack {sorted(targets - listed)}, "
                               f"name no target {sorted(listed - targets)}")


def _doc_codes() -> dict[str, tuple[set[int], str]]:
    """docs/cli.md's "Exit codes by command": command -> (its codes, the rest of the row)."""
    table = CLI_DOC.read_text().split("### Exit codes by command", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z]+)` \| ([^|]+) \|$", table, re.M)
    return {name: ({int(c) for c in re.findall(r"\d+", cell.split(";")[0])}, cell) for name, cell in rows}


def test_every_commands_exit_codes_are_its_row_of_the_docs():
    from emulator.cli.exitcodes import CODES, PASSTHROUGH

    docs = _doc_codes()
    assert set(docs) == set(main.commands) == set(CODES), "one row per command, in both tables"
    wrong = {name: (sorted(docs[name][0]), sorted(map(int, codes)))
             for name, codes in CODES.items() if docs[name][0] != set(map(int, codes))}
    assert not wrong, f"docs/cli.md's row (left) and cli/exitcodes.py (right) differ: {wrong}"
    assert all(("own exit code" in docs[n][1]) == (n in PASSTHROUGH) for n in main.commands)


# What a command module's own code can end with, beyond what it raises by name.
LIBRARY_CHECKS = {"require_root": ExitCode.NOT_ROOT, "lab_plan": ExitCode.NOT_FOUND,
                  "resolve_lab": ExitCode.NOT_FOUND}


def reachable_codes(module: ModuleType) -> set[ExitCode]:
    """The exit codes a command module reaches by itself: `ExitCode.X` it names, the errors it
    raises (a RocelabError's own code, click's usage errors 64), the library checks it calls."""
    codes = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "ExitCode":
            codes.add(ExitCode[node.attr])
        elif isinstance(node, ast.Attribute) and node.attr in LIBRARY_CHECKS:
            codes.add(LIBRARY_CHECKS[node.attr])
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            try:  # a class the module imports; not a local (`raise e.with_traceback(...)`)
                cls = eval(ast.unparse(node.exc.func), vars(module))
            except (NameError, AttributeError):
                continue
            if isinstance(cls, type) and issubclass(cls, RocelabError):
                codes.add(cls.exit_code)
            elif isinstance(cls, type) and issubclass(cls, click.UsageError):
                codes.add(ExitCode.USAGE)
            elif isinstance(cls, type) and issubclass(cls, click.ClickException):
                codes.add(ExitCode.ERROR)
    return codes


def test_every_code_a_command_module_reaches_is_declared():
    from emulator.cli.exitcodes import CODES

    undeclared = {name: sorted(map(int, extra)) for name, cmd in main.commands.items()
                  if (extra := reachable_codes(sys.modules[cmd.callback.__module__]) - CODES[name])}
    assert not undeclared, f"commands reach codes cli/exitcodes.py and docs/cli.md lack: {undeclared}"


# --- sample figures: produced by `make docs-images`, or dated where they were measured ---

FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?(?:s|ms|us|Gbit/s|Mbit/s|MB/sec|MB/s|MB|KB|GB"
                    r"|MiB|GiB|%)(?![\w/])|(?<![\w.])(?<!kernel )(?<!FRR )(\d+\.\d+)(?![\w.])")
# (a version after `kernel` or `FRR` is not a figure)
MEASURED = re.compile(r"measured on .*?\d{4}-\d{2}-\d{2}", re.S)
INCAST = json.loads(Path("docs/images/incast-numbers.json").read_text())


def _produced(numbers: dict) -> set[str]:
    """Every figure docs-images writes, as the docs may round it."""
    out: set[str] = set()
    for v in numbers.values():
        if isinstance(v, dict):
            out |= _produced(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out |= {f"{v:g}", f"{round(v)}", f"{v:.1f}"} | ({f"{v * 100:.1f}"} if 0 < v < 1 else set())
    return out


def _unsourced(section: str) -> list[str]:
    """Figures of one README section neither docs-images writes nor a "measured on DATE"
    line before them dates; what a `$ ` command line types is input, not a figure."""
    typed = "".join(ln for ln in section.splitlines() if ln.lstrip().startswith("$ ")).replace(" ", "")
    bad, fence, before = [], None, ""
    for line in section.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:]
            continue
        if fence or line.lstrip().startswith("$ "):  # code in a language, or a typed command
            continue
        for m in FIGURE.finditer(line):
            value = m.group(1) or m.group(2)
            dated = fence == "" and MEASURED.search(before)  # sample output below a dated line
            if not dated and value not in _produced(INCAST) and m.group(0).replace(" ", "") not in typed:
                bad.append(m.group(0))
        before += line + "\n"
    return bad


def test_every_readme_figure_is_produced_or_dated():
    sections = Path("README.md").read_text().split("\n## ")
    bad = {s.splitlines()[0]: figs for s in sections if (figs := _unsourced(s))}
    assert not bad, ("README figures that neither `make docs-images` writes nor a dated "
                     f"'measured on' line covers: {bad}")


def test_the_incast_figures_are_the_ones_docs_images_wrote():
    n, rates = INCAST, [f["steady_mbit_s"] for f in INCAST["flows"].values()]
    readme = " ".join(Path("README.md").read_text().split())
    for text in (f"settle at {min(rates):.0f}-{max(rates):.0f} Mbit/s", f"Jain's index is {n['jain']:.3f}",
                 f"is {n['bottleneck_utilisation']:.1%}".replace("%", " %"),
                 f"at most {n['queue_max_kb']} KB", f"{n['pfc_pauses']} PFC pauses"):
        assert text in readme, f"README.md: want {text!r} (docs/images/incast-numbers.json)"
    cli = CLI_DOC.read_text()
    b = n["bottleneck"]
    for line in (f"steady state {n['steady_from_s']:.1f}-{n['steady_to_s']:.1f} s: Jain {n['jain']:.3f}; "
                 f"PFC pauses {n['pfc_pauses']}; lossless drops {n['lossless_drops']}",
                 f"bottleneck {b} TC 3: {n['bottleneck_utilisation']:.1%} busy, queue p50 "
                 f"{n['queue_p50_kb']} KB, p90 {n['queue_p90_kb']} KB, max {n['queue_max_kb']} KB"):
        assert line in cli, f"docs/cli.md's incast run: want {line!r} (docs/images/incast-numbers.json)"
    assert f"Jain's index is {n['jain']:.3f}" in " ".join(Path("docs/telemetry.md").read_text().split())
