"""The documentation site stays true to the tree: every repository path and module name the pages name exists, the
Layout page's listing is generated from the tree, links are rewritten to the site, and mkdocs.yml makes a broken
link fail the strict build (`mkdocs build --strict`, run by infra/test.sh). Pure logic, no server."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import docs_site

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
"""The pages written for this repository (the production guide, mounted from infra/production/, names paths of
other repositories too and is checked by its own tests)."""
_PATH = re.compile(r"`((?:agent|tools|evals|infra|tests)/[^`\s]*)`")
_NAME = re.compile(r"`((?:agent|tools|evals|infra)(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")


def named_paths() -> list[tuple[str, str]]:
    """(page, path) of every backticked repository path on the pages: `agent/...`, `tools/...`, `evals/...`,
    `infra/...`, `tests/...` (a glob, a folder ending in `/`, or a pytest node id `file::test`)."""
    return [(page.name, m[1]) for page in PAGES for m in _PATH.finditer(page.read_text(encoding="utf-8"))]


def path_exists(named: str) -> bool:
    """Whether the repository path `named` exists: a glob matches something; a node id's file defines its test."""
    path, _, test = named.partition("::")
    if "*" in path:
        return any(ROOT.glob(path))
    if not (ROOT / path).exists():
        return False
    if test:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == test for n in tree.body)
    return True


def test_every_repository_path_named_in_the_docs_exists() -> None:
    named = named_paths()
    assert len(named) > 50, "the scan finds the paths"
    missing = sorted({f"{page}: `{path}`" for page, path in named if not path_exists(path)})
    assert missing == [], f"paths named in the docs that do not exist: {missing}"


def test_the_path_check_catches_a_missing_path() -> None:
    assert path_exists("tests/test_docs_site.py") and path_exists("evals/results/*.json")
    assert path_exists("tests/test_docs_site.py::test_every_repository_path_named_in_the_docs_exists")
    assert not path_exists("tools/no_such_module.py")
    assert not path_exists("evals/results/*.nothing")
    assert not path_exists("tests/test_docs_site.py::test_no_such_test")


def resolve(dotted: str) -> object:
    """The object a dotted name of ours names: the longest importable module prefix, then attributes.

    Raises:
        ImportError: no prefix is a module.
        AttributeError: an attribute is missing.
    """
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(dotted)


def test_every_module_name_in_the_docs_resolves() -> None:
    named = sorted({(page.name, m[1]) for page in PAGES for m in _NAME.finditer(page.read_text(encoding="utf-8"))})
    assert len(named) > 10, "the scan finds the names"
    broken = []
    for page, dotted in named:
        try:
            resolve(dotted)
        except (ImportError, AttributeError) as exc:
            broken.append(f"{page}: `{dotted}` ({exc})")
    assert broken == [], f"names in the docs that do not resolve: {broken}"
    with pytest.raises(AttributeError):
        resolve("tools.retrieval.NoSuchThing")


def test_the_layout_listing_is_every_module_of_the_tree(tmp_path: Path) -> None:
    for name, text in {
        "pkg/__init__.py": '"""The package. More."""',
        "pkg/a.py": '"""Module a: does | things.\n\nDetails."""',
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "x = 1",
        "pkg/data/c.py": '"""Not a package."""',
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert list(docs_site.modules(tmp_path, ("pkg",))) == [
        ("pkg/", "The package."),
        ("pkg/a.py", "Module a: does | things."),
        ("pkg/sub/", ""),
        ("pkg/sub/b.py", ""),
    ]
    table = docs_site.module_table()
    listed = set(re.findall(r"^\| `([^`]+)` \|", table, re.MULTILINE))
    on_disk = {
        p.relative_to(ROOT).as_posix()
        for package in docs_site.PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if (p.parent / "__init__.py").is_file() and p.name != "__init__.py"
    }
    assert on_disk and on_disk <= listed
    assert "`infra/docs_site.py` | The documentation site's MkDocs hook" in table


def test_first_sentence() -> None:
    assert docs_site.first_sentence("The store. It keeps chunks.") == "The store."
    wrapped = "One line\nwrapped here, v1.5 kept.\n\nMore."
    assert docs_site.first_sentence(wrapped) == "One line wrapped here, v1.5 kept."
    assert docs_site.first_sentence(None) == ""


def test_the_contracts_table_lists_every_import_contract() -> None:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    table = docs_site.contracts_table()
    assert len(table.strip().splitlines()) == 2 + len(contracts)
    assert all(c["name"].replace("|", "\\|") in table for c in contracts)


def test_a_layers_contract_names_its_layers_as_importable_modules(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[[tool.importlinter.contracts]]\nname = 'by layer'\ntype = 'layers'\ncontainers = ['agent']\n"
        "layers = ['cli', 'core']\n\n[[tool.importlinter.contracts]]\nname = 'flat'\ntype = 'layers'\n"
        "layers = ['tools.a', 'tools.b']\n"
    )
    rows = docs_site.contracts_table(tmp_path).splitlines()[2:]
    assert "`agent.cli`, `agent.core`" in rows[0]
    assert "`tools.a`, `tools.b`" in rows[1]


def test_links_are_rewritten_to_their_place_in_the_site() -> None:
    readme = "See [the CLI](docs/cli.md#output), [guide](infra/production/README.md), [web](https://x.org/a.md)."
    assert docs_site.rewrite_links(readme, "index.md") == (
        "See [the CLI](cli.md#output), [guide](infra/production/README.md), [web](https://x.org/a.md)."
    )
    page = "![plot](../evals/results/bench-query.png) [home](../README.md) [here](#top) [gone](../nowhere.md)"
    assert docs_site.rewrite_links(page, "benchmarks.md") == (
        "![plot](evals/results/bench-query.png) [home](index.md) [here](#top) [gone](../nowhere.md)"
    )
    fenced = "```\n[x](../evals/results/a.json)\n```\n[y](../evals/results/a.json)"
    expected = "```\n[x](../evals/results/a.json)\n```\n[y](evals/results/a.json)"
    assert docs_site.rewrite_links(fenced, "a.md") == expected
    assert docs_site.rewrite_links("[cli](../../docs/cli.md)", "infra/production/README.md") == "[cli](../../cli.md)"


def mkdocs_config() -> dict[str, Any]:
    """mkdocs.yml, its `!!python/name:` tags (if any) read as plain strings."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)
    config: dict[str, Any] = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    return config


def nav_files(nav: list[Any]) -> list[str]:
    """Every page a `nav:` entry names, depth first."""
    out: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        out += nav_files(value) if isinstance(value, list) else [value]
    return out


def test_the_nav_holds_every_page_and_a_broken_link_fails_the_strict_build() -> None:
    config = mkdocs_config()
    pages = nav_files(config["nav"])
    docs = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert docs <= set(pages), f"pages missing from the nav: {sorted(docs - set(pages))}"
    for page in set(pages) - docs:  # the home page and the mounted files the hook adds
        assert page == "index.md" or docs_site.site_uri(page) == page, page
        assert (ROOT / docs_site.repo_path_of(page)).is_file(), page
    assert config["theme"]["font"] is False, "no Google Fonts: the site builds offline"
    assert config["hooks"] == ["infra/docs_site.py"]
    assert config["validation"] == {  # warnings, which `--strict` (and `strict: true`) turns into a failed build
        "omitted_files": "warn",
        "absolute_links": "warn",
        "unrecognized_links": "warn",
        "anchors": "warn",
    }
    assert config["strict"] is True


def test_the_own_llm_page_s_env_names_only_settings_and_loads() -> None:
    from agent.config.settings import Settings

    page = (ROOT / "docs" / "own-llm-and-documents.md").read_text(encoding="utf-8")
    block = re.search(r"```dotenv\n(.*?)```", page, re.S)
    assert block is not None, "the page shows no .env block"
    lines = [line for line in block[1].splitlines() if line.strip() and not line.startswith("#")]
    names = [line.split("=", 1)[0] for line in lines]
    assert {"LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY", "SERVICES"} <= set(names)
    assert [n for n in names if n.lower() not in Settings.model_fields] == []
    env = dict(line.split("=", 1) for line in lines)
    loaded = Settings.model_validate({k.lower(): json.loads(v) if v.startswith("[") else v for k, v in env.items()})
    assert loaded.services == ("postgres", "triton") and loaded.llm_api_key == env["LLM_API_KEY"]
    readme_first_screen = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:40])
    assert "(docs/own-llm-and-documents.md)" in readme_first_screen
