"""The Settings page (`docs/settings.md`), generated from `Settings`: every field as its environment variable, with
its type, default and description, grouped under the section comments of `agent/config/settings.py`.

The page's table lives between `<!-- generated:settings -->` and `<!-- /generated:settings -->`; the prose around it
is written by hand. `tests/agent/config/test_settings_doc.py` fails when the committed page differs from the
generated one, so the page lists every setting and cannot drift.

    python -m agent.config.settings_doc           # rewrite the table in docs/settings.md
    python -m agent.config.settings_doc --check   # exit 1 when the page differs; change nothing
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from agent.config.settings import Settings

ROOT = Path(__file__).resolve().parent.parent.parent
"""The source checkout (this file is `agent/config/settings_doc.py`)."""
PAGE = ROOT / "docs" / "settings.md"
"""The page whose generated block this module writes."""
BEGIN, END = "<!-- generated:settings -->", "<!-- /generated:settings -->"
"""The marker lines around the generated block."""

_HEADING = re.compile(r"^    # --- (?P<title>.+?) -*$")
_FIELD = re.compile(r"^    (?P<name>[a-z_][a-z0-9_]*)\s*:")
_MIB = 1024 * 1024


class SettingsDocError(ValueError):
    """The page has no generated block, or a field of `Settings` is under no section comment."""


def sections(settings: type[Settings] = Settings) -> Iterator[tuple[str, list[str]]]:
    """(section title, field names in source order) of each `# --- title ---` comment in the class body.

    Raises:
        SettingsDocError: a field comes before the first section comment, or a field of the model is missing from
            the source's field lines (they are read from `inspect.getsource`).
    """
    title: str | None = None
    names: list[str] = []
    found: list[str] = []
    for line in textwrap.dedent(inspect.getsource(settings)).splitlines():
        if heading := _HEADING.match(line):
            if title is not None:
                yield title, names
            title, names = heading["title"], []
        elif (field := _FIELD.match(line)) and field["name"] in settings.model_fields:
            if title is None:
                raise SettingsDocError(f"{field['name'].upper()} is under no `# --- section ---` comment")
            names.append(field["name"])
            found.append(field["name"])
    if title is not None:
        yield title, names
    missing = set(settings.model_fields) - set(found)
    if missing:
        raise SettingsDocError(f"fields not found in the class source: {', '.join(sorted(missing))}")


def type_text(annotation: Any) -> str:
    """A reader's name for a field's type: `integer`, `number`, `text`, `path`, `true/false`, `secret`,
    `JSON object`, one of the `Literal` values, `list of ...` (comma-separated in the environment); optional types
    name their type alone (their default reads "unset")."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(type_text(arg) for arg in args if arg is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(f"`{arg}`" for arg in args)
    if origin is tuple and get_origin(args[0]) is Literal:
        return "list of " + ", ".join(f"`{arg}`" for arg in get_args(args[0]))
    if origin is tuple:
        return f"list of {type_text(args[0])}"
    if origin is dict:
        return "JSON object"
    names = {bool: "true/false", int: "integer", float: "number", str: "text", Path: "path", SecretStr: "secret"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def bounds_text(field: FieldInfo) -> str:
    """The field's numeric bounds, e.g. `≥ 1`, `> 0`, `0–19` ("" for none)."""
    bound: dict[str, float] = {}
    for item in field.metadata:
        for kind in ("ge", "gt", "le", "lt"):
            if isinstance(item, getattr(annotated_types, kind.capitalize())):
                bound[kind] = getattr(item, kind)
    if "ge" in bound and "le" in bound:
        return f"{bound['ge']:g}–{bound['le']:g}"
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    return ", ".join(f"{signs[kind]} {value:g}" for kind, value in bound.items())


def default_text(name: str, field: FieldInfo) -> str:
    """The field's default as the environment would spell it: `unset`, `empty`, a value in backticks (lists
    comma-separated), numbers plain (byte counts also in MiB)."""
    value = field.get_default(call_default_factory=True) if field.default is PydanticUndefined else field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        text = f"{value:g}" if isinstance(value, float) else str(value)
        if name.endswith("_bytes") and value >= _MIB and value % _MIB == 0:
            text += f" ({value // _MIB} MiB)"
        return text
    if isinstance(value, tuple):
        return f"`{','.join(map(str, value))}`" if value else "empty"
    if isinstance(value, dict):
        return f"`{value}`" if value else "`{}`"
    return f"`{value}`" if str(value) else "empty"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(settings: type[Settings] = Settings) -> str:
    """The generated block: one `###` section per section comment, each a table of its fields (variable, type,
    default, meaning), in source order.

    Raises:
        SettingsDocError: see `sections`.
    """
    out: list[str] = []
    for title, names in sections(settings):
        out += [f"### {title[0].upper()}{title[1:]}", "", "| variable | type | default | meaning |"]
        out.append("| --- | --- | --- | --- |")
        for name in names:
            field = settings.model_fields[name]
            kind = type_text(field.annotation)
            bounds = bounds_text(field)
            kind = f"{kind}, {bounds}" if bounds else kind
            meaning = _cell(field.description or "")
            out.append(f"| `{name.upper()}` | {_cell(kind)} | {_cell(default_text(name, field))} | {meaning} |")
        out.append("")
    return "\n".join(out)


def render_page(text: str, settings: type[Settings] = Settings) -> str:
    """`text` (the page) with its generated block replaced by `render(settings)`.

    Raises:
        SettingsDocError: the page lacks the marker lines, or see `sections`.
    """
    pattern = re.compile(rf"{re.escape(BEGIN)}\n.*?{re.escape(END)}", re.DOTALL)
    if len(pattern.findall(text)) != 1:
        raise SettingsDocError(f"the page needs one block between {BEGIN} and {END}, each on a line of its own")
    return pattern.sub(lambda _: f"{BEGIN}\n{render(settings)}{END}", text)


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or with `--check` only compare) `docs/settings.md`'s generated block; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m agent.config.settings_doc", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs; change nothing")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page to rewrite (default: docs/settings.md)")
    args = parser.parse_args(argv)
    text = args.page.read_text(encoding="utf-8")
    try:
        updated = render_page(text)
    except SettingsDocError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if updated == text:
        return 0
    if args.check:
        print(f"{args.page}: the settings table is stale: run `python -m agent.config.settings_doc`", file=sys.stderr)
        return 1
    args.page.write_text(updated, encoding="utf-8")
    print(f"{args.page}: settings table rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
