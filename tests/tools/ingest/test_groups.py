"""`tools.ingest.groups`: `.rag-groups` files parsed (comments, blank lines, invalid names refused with the file and
line), the nearest file winning over the run's default, and a folder sync over the in-memory doubles that stores
each document with its groups and, when a rules file changes, sets the groups of the documents it does not write
without embedding anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config.settings import Settings
from agent.core.wiring import ingest_options
from tests.ingest_doubles import ScriptedEmbedder
from tests.sync_scenario import groups_folder
from tools.in_memory_sink import InMemorySink
from tools.in_memory_sync import InMemorySyncLedger
from tools.ingest import IngestError, SourceDocument
from tools.ingest.groups import GROUPS_KEY, NO_RULES, GroupRules, parse_rules, with_groups
from tools.ingest.sync import CountingEmbedder, SyncRequest, sync_folder


def test_a_rules_file_names_one_group_per_line_with_comments_and_blanks_skipped() -> None:
    text = "# who may read this folder\n\n  eng  \nsales\n   # indented comment\neng\n/org/ops\n"
    assert parse_rules(text) == ("/org/ops", "eng", "sales")
    assert parse_rules("# nobody named: public\n") == ()
    with pytest.raises(IngestError, match=r"docs/\.rag-groups:2: group"):
        parse_rules("eng\nbad\x01name\n", "docs/.rag-groups")


def test_the_nearest_rules_file_wins_and_the_default_covers_the_rest(tmp_path: Path) -> None:
    (tmp_path / "hr" / "private").mkdir(parents=True)
    (tmp_path / "pub").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "hr" / ".rag-groups").write_text("hr\n")
    (tmp_path / "hr" / "private" / ".rag-groups").write_text("hr-leads\n# only them\n")
    (tmp_path / "pub" / ".rag-groups").write_text("# everyone\n")
    (tmp_path / ".hidden" / ".rag-groups").write_text("ignored\n")
    rules = GroupRules.scan(tmp_path, ["staff"])
    assert rules.rules == {"hr": ("hr",), "hr/private": ("hr-leads",), "pub": ()}
    assert rules.groups_for("hr/a.md") == ("hr",)
    assert rules.groups_for("hr/private/deep/b.md") == ("hr-leads",)
    assert rules.groups_for("pub/c.md") == ()
    assert rules.groups_for("top.md") == ("staff",)
    assert GroupRules.scan(tmp_path).groups_for("top.md") is None
    assert rules.fingerprint != GroupRules.scan(tmp_path).fingerprint != NO_RULES.fingerprint
    (tmp_path / ".rag-groups").write_text("root\n")
    assert GroupRules.scan(tmp_path, ["staff"]).groups_for("top.md") == ("root",)


def test_with_groups_sets_the_metadata_key_or_leaves_the_document() -> None:
    doc = SourceDocument("a", "A", "text", "a", {"year": 2020})
    assert with_groups(doc, None) is doc
    tagged = with_groups(doc, ("eng",))
    assert tagged.metadata == {"year": 2020, GROUPS_KEY: ["eng"]} and doc.metadata == {"year": 2020}
    assert tagged.content_hash == doc.content_hash  # groups never change what is embedded


async def test_a_sync_stores_groups_and_applies_a_changed_rules_file_without_embedding(
    tmp_path: Path, settings: Settings
) -> None:
    folder = groups_folder(tmp_path)
    embedder = CountingEmbedder(ScriptedEmbedder())
    sink = InMemorySink(embedder.spec.dim)
    ledger = InMemorySyncLedger(sink)
    options = ingest_options(settings)
    request = SyncRequest(folder, collection="synced", groups=("staff",))

    def groups_of(doc_id: str) -> tuple[str, ...]:
        return sink.groups["synced", doc_id]

    first = await sync_folder(request, embedder, sink, ledger, options)
    assert sorted(first.added) == ["hr/pay.md", "open.md"] and first.regrouped == []
    assert groups_of("hr/pay.md") == ("hr",) and groups_of("open.md") == ("staff",)
    assert ".rag-groups" not in [*first.added, *(e.path for e in first.skipped)]  # never a document
    calls = embedder.calls

    again = await sync_folder(request, embedder, sink, ledger, options)
    writes = sink.transactions
    assert (again.added, again.updated, again.regrouped) == ([], [], [])
    assert sink.transactions == writes  # nothing written

    (folder / "hr" / ".rag-groups").write_text("hr\nhr-leads\n")
    changed = await sync_folder(request, embedder, sink, ledger, options)
    assert sorted(changed.regrouped) == ["hr/pay.md", "open.md"] and (changed.added, changed.updated) == ([], [])
    assert groups_of("hr/pay.md") == ("hr", "hr-leads") and groups_of("open.md") == ("staff",)
    assert embedder.calls == calls  # nothing embedded
    assert (await sync_folder(request, embedder, sink, ledger, options)).regrouped == []

    (folder / "hr" / ".rag-groups").unlink()
    public = await sync_folder(SyncRequest(folder, collection="synced"), embedder, sink, ledger, options)
    assert sorted(public.regrouped) == ["hr/pay.md", "open.md"]
    assert groups_of("hr/pay.md") == groups_of("open.md") == ("everyone",)  # no rules, no default: public
