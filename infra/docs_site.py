"""The documentation site's MkDocs hook: README.md as the home page, repository files the pages link to, and the
generated parts of the Layout page.

MkDocs loads this file through `hooks:` in `mkdocs.yml` (MkDocs 1.6 "hooks": a Python file whose `on_*` functions
are plugin events). It adds to the site, at build time and without writing into `docs/`:

- `README.md` as the home page `index.md`;
- the repository files the pages link to that live outside `docs/` (`MOUNTS`: the stored evaluation reports and
  plots, the production guide `infra/production/README.md`), at their repository path;
- on the Layout page, in place of its marker lines, the table of every package and module of the source tree with
  the first sentence of its docstring (`module_table`) and the import contracts of `pyproject.toml`
  (`contracts_table`), so the listing is the tree at build time and cannot go stale.

Links are written as on GitHub (relative to the file that holds them, e.g. `../evals/results/bench-query.png` in
`docs/benchmarks.md`, `docs/cli.md` in README.md) and rewritten here to the page or file they name in the site.
`mkdocs build --strict` (infra/test.sh) fails on any link that names neither.
"""

from __future__ import annotations

import ast
import posixpath
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
"""The source checkout (this file is `infra/docs_site.py`)."""
DOCS_DIR = "docs"
"""The folder of the site's own pages, relative to `ROOT`."""
HOME = "README.md"
"""Shown as the site's home page, `index.md`."""
MOUNTS = ("evals/results", "infra/production/README.md")
"""Repository files and folders (relative to `ROOT`) the site serves at their repository path."""
PACKAGES = ("agent", "tools", "evals", "infra", "tests")
"""The source packages the Layout page lists, in that order."""
MODULES_MARKER = "<!-- generated:modules -->"
CONTRACTS_MARKER = "<!-- generated:contracts -->"
"""Lines of `docs/layout.md` replaced at build time by `module_table()` and `contracts_table()`."""

_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)


def first_sentence(docstring: str | None) -> str:
    """The first sentence of `docstring`'s first paragraph, on one line ("" for none): up to the first `.`, `!` or
    `?` followed by a space or the paragraph's end."""
    if not docstring:
        return ""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    return match[1] if match else paragraph


def modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> Iterator[tuple[str, str]]:
    """(path relative to `root`, first docstring sentence) of every package (its folder, from `__init__.py`) and
    module under `packages`, in path order with each package before its modules. Folders without `__init__.py`
    (data, the Triton backend) are left out.

    Raises:
        SyntaxError: a module does not parse.
    """
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if not (path.parent / "__init__.py").is_file() or "__pycache__" in path.parts:
                continue
            doc = first_sentence(ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))))
            rel = path.relative_to(root).as_posix()
            yield (rel.removesuffix("__init__.py") if path.name == "__init__.py" else rel), doc


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "–"


def module_table(root: Path = ROOT) -> str:
    """The Markdown table of `modules(root)`: one row per package and module, path and what it is."""
    rows = [f"| `{path}` | {_cell(doc)} |" for path, doc in modules(root)]
    return "\n".join(["| module | what |", "| --- | --- |", *rows]) + "\n"


def contracts_table(root: Path = ROOT) -> str:
    """The import contracts `lint-imports` checks (`[[tool.importlinter.contracts]]` of pyproject.toml) as a
    Markdown table: name, type, the modules it constrains (a layers contract's layers by full name, highest first,
    e.g. `agent.cli`) and those they may not import."""
    contracts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    rows = []
    for contract in contracts:
        containers, layers = contract.get("containers") or [""], contract.get("layers", [])
        source = contract.get("source_modules") or [f"{c}.{layer}" for c in containers for layer in layers]
        source = [module.lstrip(".") for module in source]
        forbidden = contract.get("forbidden_modules") or []
        ignored = contract.get("ignore_imports") or []
        rows.append(
            f"| {_cell(contract['name'])} | {contract['type']} | {', '.join(f'`{m}`' for m in source)} | "
            f"{', '.join(f'`{m}`' for m in forbidden) or '–'} | {', '.join(f'`{i}`' for i in ignored) or '–'} |"
        )
    header = ["| contract | type | modules | may not import | allowed exceptions |", "| --- | --- | --- | --- | --- |"]
    return "\n".join([*header, *rows]) + "\n"


def site_uri(repo_path: str) -> str | None:
    """Where the repository file `repo_path` (relative, POSIX) is in the site, or None when the site lacks it."""
    if repo_path == HOME:
        return "index.md"
    if repo_path.startswith(DOCS_DIR + "/"):
        return repo_path.removeprefix(DOCS_DIR + "/")
    if any(repo_path == m or repo_path.startswith(m + "/") for m in MOUNTS):
        return repo_path
    return None


def repo_path_of(src_uri: str) -> str:
    """The repository path of the site file `src_uri` (the inverse of `site_uri`)."""
    if src_uri == "index.md":
        return HOME
    if any(src_uri == m or src_uri.startswith(m + "/") for m in MOUNTS):
        return src_uri
    return f"{DOCS_DIR}/{src_uri}"


def rewrite_links(markdown: str, src_uri: str) -> str:
    """`markdown` of the site file `src_uri` with each relative link that names a repository file the site has
    rewritten to that file's place in the site (anchors kept). Links in fenced code blocks, absolute URLs, anchors
    alone and links to files the site lacks are left as written (MkDocs then reports the latter)."""
    here = posixpath.dirname(repo_path_of(src_uri))
    site_dir = posixpath.dirname(src_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = match[2]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return match[0]
        path, hash_, anchor = target.partition("#")
        uri = site_uri(posixpath.normpath(posixpath.join(here, path)))
        if uri is None:
            return match[0]
        return f"{match[1]}{posixpath.relpath(uri, site_dir or '.')}{hash_}{anchor}{match[3]}"

    parts = _FENCE.split(markdown)
    # split() with one group: text, fence, text, fence, ...; a text part is inside a block after an odd fence count
    out, inside = [], False
    for i, part in enumerate(parts):
        if i % 2 == 1:
            out.append(part)
            inside = not inside
        else:
            out.append(part if inside else _LINK.sub(rewrite, part))
    return "".join(out)


# --- MkDocs events (https://www.mkdocs.org/user-guide/configuration/#hooks) ----------------------------------------


def on_files(files: Any, config: Any) -> Any:
    """Add the home page and the mounted repository files to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "index.md", abs_src_path=str(ROOT / HOME)))
    for mount in MOUNTS:
        base = ROOT / mount
        for path in sorted(base.rglob("*")) if base.is_dir() else [base]:
            if path.is_file():
                files.append(File.generated(config, path.relative_to(ROOT).as_posix(), abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite the page's links to the site, and fill the Layout page's generated parts."""
    markdown = markdown.replace(MODULES_MARKER, module_table()).replace(CONTRACTS_MARKER, contracts_table())
    return rewrite_links(markdown, page.file.src_uri)
