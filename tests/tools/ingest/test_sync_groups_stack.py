"""A folder sync's groups on a real Postgres (a scripted embedder: no Triton): `.rag-groups` files become the
documents' and chunks' `groups`, and a changed file sets them again through the store's `set_document_groups`
without writing any chunk anew."""

from __future__ import annotations

from pathlib import Path

from agent.config.settings import Settings
from agent.core.wiring import ingest_options
from tests.contracts.conftest import empty_store
from tests.ingest_doubles import ScriptedEmbedder
from tests.sync_scenario import groups_folder
from tools.ingest.sync import SyncRequest, sync_folder
from tools.store.sync_state import PostgresSyncLedger


async def test_rules_files_set_and_reset_the_groups_in_postgres(
    postgres_url: str, settings: Settings, tmp_path: Path
) -> None:
    folder = groups_folder(tmp_path)
    store = await empty_store(postgres_url, "test_sync_groups", settings)
    try:
        ledger = PostgresSyncLedger(store)
        await ledger.setup()
        await store.pool.execute("DELETE FROM sync_sources")
        embedder, options = ScriptedEmbedder(), ingest_options(settings)
        request = SyncRequest(folder, collection="synced")

        async def groups() -> dict[str, tuple[list[str], set[tuple[str, ...]]]]:
            rows = await store.pool.fetch(
                "SELECT d.doc_id, d.groups, array_agg(DISTINCT array_to_string(c.groups, ',')) AS chunk_groups "
                "FROM documents d JOIN chunks c ON c.document_id = d.id "
                "WHERE d.collection = 'synced' GROUP BY d.doc_id, d.groups"
            )
            return {r["doc_id"]: (list(r["groups"]), {tuple(g.split(",")) for g in r["chunk_groups"]}) for r in rows}

        first = await sync_folder(request, embedder, store, ledger, options)
        assert sorted(first.added) == ["hr/pay.md", "open.md"]
        assert await groups() == {"hr/pay.md": (["hr"], {("hr",)}), "open.md": (["everyone"], {("everyone",)})}
        calls = len(embedder.calls)

        (folder / "hr" / ".rag-groups").write_text("# leads only\nhr-leads\n")
        changed = await sync_folder(
            SyncRequest(folder, collection="synced", groups=("staff",)), embedder, store, ledger, options
        )
        assert sorted(changed.regrouped) == ["hr/pay.md", "open.md"] and len(embedder.calls) == calls
        assert await groups() == {
            "hr/pay.md": (["hr-leads"], {("hr-leads",)}),
            "open.md": (["staff"], {("staff",)}),
        }
        again = await sync_folder(
            SyncRequest(folder, collection="synced", groups=("staff",)), embedder, store, ledger, options
        )
        assert again.regrouped == [] and not again.changed
    finally:
        await store.close()
