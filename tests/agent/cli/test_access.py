"""`rag access`: grants listed, made, replaced and revoked, and a document's groups set, over in-memory doubles."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner

from agent.cli import access, main
from agent.cli import keys as keys_cli
from agent.cli.main import app
from agent.config.settings import Settings
from agent.core import wiring
from agent.core.errors import InputError
from agent.core.ingestion import SyncReport, SyncRequest
from agent.core.keys import InMemoryKeys
from tools.in_memory import InMemoryCollection
from tools.in_memory_grants import InMemoryGrants
from tools.ingest import IngestReport, SourceDocument

R = TypeVar("R")


def opener(resource: R) -> Callable[[Settings], AbstractAsyncContextManager[R]]:
    """A stand-in for a `settings_*` opener: whatever the settings, `resource`."""

    @asynccontextmanager
    async def opened(settings: Settings) -> AsyncIterator[R]:
        yield resource

    return opened


@pytest.fixture
def grants(monkeypatch: pytest.MonkeyPatch) -> InMemoryGrants:
    """The grants `rag access` reads and writes: in memory."""
    book = InMemoryGrants()
    monkeypatch.setattr(access, "settings_grants", opener(book))
    return book


def run(*args: str) -> tuple[int, str]:
    """(exit code, output and the message of the error `rag` prints, if any)."""
    result = CliRunner().invoke(app, ["access", *args])
    return result.exit_code, result.output + ("" if result.exception is None else str(result.exception))


def test_grant_list_and_revoke(grants: InMemoryGrants) -> None:
    assert run("grant", "eng", "handbook")[0] == 0
    code, out = run("grant", "ops", "handbook", "--role", "admin", "--json")
    assert code == 0 and json.loads(out)["role"] == "admin"
    code, out = run("list", "--json")
    listed = json.loads(out)["grants"]
    assert code == 0 and [(g["group"], g["collection"], g["role"]) for g in listed] == [
        ("eng", "handbook", "reader"),
        ("ops", "handbook", "admin"),
    ]
    assert set(listed[0]) == {"group", "collection", "role", "created_at"}
    code, out = run("list")
    assert code == 0 and "eng" in out and "admin" in out
    assert run("revoke", "eng", "handbook")[0] == 0
    code, out = run("revoke", "eng", "handbook")
    assert code == 1 and "holds no role" in out
    assert [g.group for g in asyncio.run(grants.list())] == ["ops"]


def test_bad_roles_and_names_are_refused_before_anything_is_written(grants: InMemoryGrants) -> None:
    code, out = run("grant", "eng", "handbook", "--role", "owner")
    assert code == 1 and "role 'owner'" in out
    code, out = run("grant", "eng", "Bad Name")
    assert code == 1 and "collection 'Bad Name'" in out
    assert grants.grants == {}


def test_set_groups_changes_a_stored_documents_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    store = InMemoryCollection([SourceDocument("a.md", "A", "text", "a.md", {})], collection="handbook")

    async def in_memory(doc_id: str, groups: tuple[str, ...], collection: str) -> bool:
        return await store.set_document_groups(doc_id, groups, collection)

    monkeypatch.setattr(access, "set_groups_in_store", in_memory)
    code, out = run("set-groups", "a.md", "--groups", "sales, eng,,", "--collection", "handbook")
    assert code == 0 and "eng, sales" in out
    assert store._entries["a.md", "handbook"].groups == ("eng", "sales")
    code, out = run("set-groups", "a.md", "--groups", "eng")
    assert code == 1 and "no document 'a.md' in 'default'" in out


def test_split_groups_reads_a_comma_separated_list() -> None:
    assert access.split_groups(" b, a ,,a") == ("a", "b")
    assert access.split_groups("") == ()
    with pytest.raises(InputError, match="--groups: group"):
        access.split_groups("ok,bad\x01name")


class FakeIngestion:
    """What `rag ingest` and `rag sync` asked the ingestion service for."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    async def ingest_files(self, paths: Any, progress: Any, **kw: Any) -> tuple[IngestReport, int, int]:
        self.asked.append(kw.get("groups"))
        return IngestReport(), 0, 0

    async def sync(self, request: SyncRequest, progress: Any, *, dry_run: bool = False) -> SyncReport:
        self.asked.append(request.groups)
        return SyncReport()


def test_ingest_and_sync_pass_their_groups_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = FakeIngestion()
    monkeypatch.setattr(main, "open_ingestion", opener(fake))
    monkeypatch.setattr(wiring, "open_ingestion", opener(fake))
    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    runner = CliRunner()
    for args in (["ingest", str(tmp_path), "--groups", "eng,sales"], ["ingest", str(tmp_path)]):
        assert runner.invoke(app, args).exit_code == 0
    for args in (["sync", str(tmp_path), "--groups", " hr "], ["sync", str(tmp_path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    assert fake.asked == [("eng", "sales"), None, ("hr",), None]
    refused = runner.invoke(app, ["ingest", str(tmp_path), "--groups", "bad\x01"])
    assert refused.exit_code == 1 and "--groups: group" in str(refused.exception)


def test_keys_tied_to_a_group_are_created_and_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = InMemoryKeys()
    monkeypatch.setattr(keys_cli, "settings_keys", opener(ring))
    runner = CliRunner()
    made = runner.invoke(app, ["keys", "create", "--group", "eng", "--json"])
    assert made.exit_code == 0, made.output
    created = json.loads(made.stdout)
    assert (created["group"], created["collections"]) == ("eng", []) and created["token"].startswith("rag_")
    pinned = runner.invoke(app, ["keys", "create", "--group", "eng", "--collections", "handbook"])
    assert pinned.exit_code == 0 and "group eng" in pinned.stdout
    plain = json.loads(runner.invoke(app, ["keys", "create", "--collections", "a", "--json"]).stdout)
    assert plain["group"] is None
    listed = json.loads(runner.invoke(app, ["keys", "list", "--json"]).stdout)["keys"]
    assert [(k["group"], k["collections"]) for k in listed] == [("eng", []), ("eng", ["handbook"]), (None, ["a"])]
    table = runner.invoke(app, ["keys", "list"]).stdout
    assert "group" in table and "(grants)" in table
    neither = runner.invoke(app, ["keys", "create"])
    assert neither.exit_code == 1 and "--collections" in str(neither.exception)
    blank = runner.invoke(app, ["keys", "create", "--group", " "])
    assert blank.exit_code == 1 and "--group" in str(blank.exception)
