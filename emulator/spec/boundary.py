"""The one boundary every file a user writes comes in through: the strict base model,
validation whose every error is one `SpecError` line naming the field, and the YAML
reader (stat first, at most 1 MiB, no bombs) that adds the line of that field.
`load_model` reads and validates a topology or experiment file in one call.
"""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from .. import boundedread
from ..errors import SpecError

MAX_SHOWN = 64  # characters of a bad value an error line repeats
MAX_FILE_BYTES = 1 << 20  # a topology or experiment file: 1 MiB of text is far beyond any real one
MAX_DEPTH = 32  # mappings and lists inside each other
MAX_ALIASES = 16  # *alias references: enough to share a flow template, far from a bomb


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, serialize_by_alias=True,
                              validate_by_alias=True, validate_by_name=True)



UNION_TAGS = {"Links"}  # a union member's name pydantic puts in an error's location


WRONG_BRANCH = {"model_type", "dict_type", "list_type", "model_attributes_type"}


def _union_tag(part: str) -> bool:
    """A union member's tag in an error location ('constrained-float', 'list[LinkSpec]'),
    not a field or key (keys such as leaf1-spine1 carry dashes too)."""
    return part in UNION_TAGS or "[" in part or bool(
        re.match(r"(constrained|function|lax|json|tagged|nullable|default)-", part))



def _describe(err: ErrorDetails, model: type[BaseModel]) -> tuple[str, str]:
    # Union members add type tags (e.g. 'constrained-float') to the location: drop them.
    loc = ".".join(str(p) for p in err["loc"] if not _union_tag(str(p)))
    loc = loc or "(top level)"
    kind, got = err["type"], err.get("input")
    if kind == "extra_forbidden":
        parent = _model_at(model, err["loc"][:-1])
        allowed = ", ".join(parent.model_fields) if parent else "?"
        return loc, f"unknown field; allowed: {allowed}"
    if kind == "missing":
        return loc, "is required"
    msg = err["msg"].removeprefix("Value error, ")
    msg = msg[0].lower() + msg[1:] if msg else msg
    if kind == "enum":
        msg = "must be one of " + err["ctx"]["expected"].replace(" or ", ", ")
    shown = json.dumps(got, default=str)
    if len(shown) > MAX_SHOWN:  # an error stays one short line, whatever the input was
        shown = (shown[: MAX_SHOWN - 4] + '..."' if shown.startswith('"')
                 else shown[: MAX_SHOWN - 4] + " ...")
    return loc, f"{msg} (got {shown})"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model at `loc` inside `model` (through optional fields and list items), or None."""
    current: type[BaseModel] | None = model
    keyed = False  # the field just entered is a mapping: the next part is one of its keys
    for part in loc:
        if current is None:
            return None
        if isinstance(part, int) or keyed or _union_tag(str(part)):  # a list item, a key
            keyed = False
            continue
        field = current.model_fields.get(str(part))
        current = _submodel(field.annotation) if field else None
        keyed = field is not None and typing.get_origin(field.annotation) is dict
    return current


def _submodel(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    return next((m for m in map(_submodel, typing.get_args(ann)) if m), None)


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any, source: str, fields_hint: str | None = None) -> M:
    """Validate loaded YAML data against `model`; SpecError naming the first bad field."""
    if not isinstance(data, dict):
        hint = fields_hint or ", ".join(list(model.model_fields)[:3])
        raise SpecError(source, "(top level)", f"must be a mapping of fields ({hint}, ...)")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        # A union tried every member: the one whose type matched the input says what is wrong.
        errors = sorted(e.errors(), key=lambda x: (x["type"] in WRONG_BRANCH,
                                                   [str(p) for p in x["loc"]]))
        field, problem = _describe(errors[0], model)
        raise SpecError(source, field, problem) from None


# -- the YAML boundary: every file a user writes comes in here ---------------

def read_yaml(path: str | Path) -> tuple[Any, yaml.Node | None]:
    """A YAML file's data and its node tree (which knows the line of every value)."""
    p = Path(path)
    try:  # a regular file only, and never more than the limit read (boundedread)
        text = boundedread.read_bytes(p, MAX_FILE_BYTES).decode()
    except OSError as e:
        raise SpecError(str(p), "(file)", f"cannot read: {e.strerror or e}") from None
    except (boundedread.NotRegularError, boundedread.TooLargeError) as e:
        raise SpecError(str(p), "(file)", str(e)) from None
    except UnicodeDecodeError:
        raise SpecError(str(p), "(file)", "is not UTF-8 text") from None
    try:
        _check_shape(text, str(p))
        loader = yaml.SafeLoader(text)  # one parse: the node tree, and the data built from it
        try:
            node = loader.get_single_node()
            return (loader.construct_document(node) if node is not None else None), node
        finally:
            loader.dispose()
    except RecursionError:
        raise SpecError(str(p), "(file)", f"nests deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        # ReaderError (a NUL or control character) has no problem, a reason, and a
        # multi-line str: one line, whatever PyYAML says.
        problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e)
        raise SpecError(str(p), where, "invalid YAML: " + " ".join(str(problem).split())[:200]
                        ) from None


def _check_shape(text: str, source: str) -> None:
    """Refuse what would expand or nest without bound before building anything from it:
    a YAML bomb (aliases of aliases: 10^9 elements from a few lines) or deep nesting."""
    depth = aliases = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1
                raise SpecError(source, f"line {line}", f"nests deeper than {MAX_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                line = event.start_mark.line + 1
                raise SpecError(source, f"line {line}", f"uses more than {MAX_ALIASES} YAML "
                                "aliases (*name): refused, as a YAML bomb would be")


def line_of(node: yaml.Node | None, field: str) -> int | None:
    """The 1-based line of dotted `field` (e.g. flows.2.size) in a YAML node tree: of the
    deepest part that exists, so an unknown key points at the mapping that holds it."""
    line = None
    for part in field.split("."):
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
        elif isinstance(node, yaml.SequenceNode):  # a list of named items (flows): by name
            node = next((item for item in node.value if isinstance(item, yaml.MappingNode)
                         and any(getattr(k, "value", None) == "name" and getattr(v, "value", None) == part
                                 for k, v in item.value)), None)
        else:
            node = None
        if node is None:
            break
        line = node.start_mark.line + 1
    return line


def located(err: SpecError, node: yaml.Node | None) -> SpecError:
    """The same error with the line of its field in the file."""
    line = line_of(node, err.field) if err.line is None else err.line
    return SpecError(err.source, err.field, err.problem, line)


def load_model(path: str | Path, model: type[M], fields_hint: str | None = None) -> M:
    """Read and validate a YAML file (topology, experiment): errors name the file, the
    line and the field, in one line; nothing downstream sees an unvalidated value."""
    data, node = read_yaml(path)
    try:
        return validate(model, data, str(path), fields_hint)
    except SpecError as e:
        raise located(e, node) from None
