"""The code's layout: no import cycle between any two modules of agent/, tools/, evals/ or infra/ (on grimp's import
graph, the one `lint-imports` checks the layers on), the Python API's documented import paths, and the web page
shipped as package data where the HTTP app serves it from. No server."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import grimp

from tests.conftest import REPO_ROOT

ROOT_PACKAGES = ("agent", "tools", "evals", "infra")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import cycles of `graph`: its strongly connected components of more than one module, plus every module
    that imports itself, each sorted, the list sorted. Tarjan's algorithm (Tarjan 1972, "Depth-first search and
    linear graph algorithms"), iterative so a deep graph does not hit Python's recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            step = next(imported, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.find_modules_directly_imported_by(step)))))
                elif step in on_stack:
                    low[module] = min(low[module], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1 or module in graph.find_modules_directly_imported_by(module):
                    cycles.append(sorted(component))
    return sorted(cycles)


def test_no_import_cycles_between_our_modules() -> None:
    """Not one cycle, direct or through other modules, imports under `TYPE_CHECKING` and inside functions included
    (grimp sees them all): a cycle is a module whose import order matters and a layer that cannot be split."""
    graph = grimp.build_graph(*ROOT_PACKAGES, include_external_packages=False, cache_dir=None)
    assert len(graph.modules) > 100  # the whole code, not an empty graph
    assert import_cycles(graph) == []


def test_import_cycles_finds_direct_indirect_and_self_imports() -> None:
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c", "p.d", "p.e", "p.f"):
        graph.add_module(module)
    for importer, imported in [
        ("p.a", "p.b"),
        ("p.b", "p.a"),  # direct
        ("p.c", "p.d"),
        ("p.d", "p.e"),
        ("p.e", "p.c"),  # through p.d and p.e
        ("p.f", "p.f"),  # itself
        ("p.a", "p.c"),  # one way only: joins no cycle
    ]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["p.a", "p.b"], ["p.c", "p.d", "p.e"], ["p.f"]]
    graph.remove_import(importer="p.e", imported="p.c")
    assert import_cycles(graph) == [["p.a", "p.b"], ["p.f"]]


def test_public_import_paths_are_the_core_objects() -> None:
    """The Python API's documented paths (`from agent.app import RagApp`, `from agent.answer import AnswerRequest`,
    `from agent.settings import Settings`) and the `rag` entry point (`agent.cli:app`) name the objects that live in
    agent/core/, agent/config/ and agent/cli/main.py, not copies."""
    import agent.answer
    import agent.app
    import agent.cli
    import agent.settings
    from agent.cli import main
    from agent.config import settings
    from agent.core import answer, app, wiring

    assert agent.app.RagApp is app.RagApp
    assert agent.app.build_services is wiring.build_services
    assert agent.answer.AnswerRequest is answer.AnswerRequest
    assert agent.settings.Settings is settings.Settings
    assert agent.cli.app is main.app
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["rag"] == "agent.cli:app"


def test_web_page_is_package_data_where_it_is_served_from() -> None:
    """`pip install .` ships the page the HTTP app's `GET /` reads (`agent.http.service.WEB_DIR`)."""
    from agent.http.service import WEB_DIR

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    shipped = {
        path.resolve()
        for pattern in pyproject["tool"]["setuptools"]["package-data"]["agent"]
        for path in (REPO_ROOT / "agent").glob(pattern)
    }
    assert (WEB_DIR / "index.html").resolve() in shipped
    assert (WEB_DIR / "index.html").is_file()


def imported_test_modules(source: str) -> set[str]:
    """The test modules (`test_*` under `tests`) that Python `source` imports, in any import form."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("tests.") and _is_test(a.name)}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tests":
            if _is_test(node.module):
                found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if a.name.startswith("test_")}
    return found


def _is_test(module: str) -> bool:
    return module.rsplit(".", 1)[-1].startswith("test_")


def test_no_test_module_imports_another() -> None:
    """Shared fixtures live in `conftest.py`, shared doubles and rigs in helper modules: a test module is a leaf."""
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(found)
        for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
        if (found := imported_test_modules(path.read_text()))
    }
    assert offenders == {}


def test_test_module_imports_are_found_in_every_form() -> None:
    source = (
        "from tests.test_a import x\nimport tests.test_b\nfrom tests import test_c, rig\n"
        "from tests.contracts.test_d import y\nfrom tests.http_rig import serve\n"
        "def f():\n    from tests.test_e import z\n"
    )
    assert imported_test_modules(source) == {
        "tests.test_a",
        "tests.test_b",
        "tests.test_c",
        "tests.contracts.test_d",
        "tests.test_e",
    }


WHOLE_REPOSITORY_TESTS = {"test_docs_site.py", "test_layout.py", "test_test_signals.py"}
"""The test modules directly under `tests/`: they check the repository as a whole, not one source folder."""


def misplaced_test_paths(root: Path) -> list[str]:
    """Test modules and folders under `root / "tests"` that break the mirror of the source tree: a folder (other than
    `contracts/` and caches) with no source folder of the same path under `root`, or a `test_*.py` directly under
    `tests/` that is not one of `WHOLE_REPOSITORY_TESTS`. Paths relative to `root`, sorted."""
    tests = root / "tests"
    found = [
        str(folder.relative_to(root))
        for folder in tests.rglob("*")
        if folder.is_dir()
        and folder.name != "__pycache__"
        and folder.relative_to(tests).parts[0] != "contracts"
        and not (root / folder.relative_to(tests)).is_dir()
    ]
    found += [
        str(path.relative_to(root)) for path in tests.glob("test_*.py") if path.name not in WHOLE_REPOSITORY_TESTS
    ]
    return sorted(found)


def test_the_tests_tree_mirrors_the_source_tree() -> None:
    """`tests/agent/http/` tests `agent/http/`, and so on: a reader finds a module's tests at its own path."""
    assert misplaced_test_paths(REPO_ROOT) == []


def test_a_test_folder_without_a_source_folder_is_reported(tmp_path: Path) -> None:
    for folder in ("agent/core", "tests/agent/core", "tests/agent/cor", "tests/contracts", "tests/agent/__pycache__"):
        (tmp_path / folder).mkdir(parents=True)
    for module in ("tests/test_layout.py", "tests/test_stray.py", "tests/agent/core/test_x.py"):
        (tmp_path / module).write_text("")
    assert misplaced_test_paths(tmp_path) == ["tests/agent/cor", "tests/test_stray.py"]
