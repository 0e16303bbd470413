"""The ingestion service is composed once, beside the answer path (`agent.core.wiring.build_services`): one store
shared by the retrieval, the document library, the jobs and (in `rag serve`) the API keys; documents added through
the library are embedded on the bulk embedder (`EMBEDDER_MODEL`, Triton priority 2, `INGEST_MAX_IN_FLIGHT`), never the
interactive one. Nothing is connected here."""

from __future__ import annotations

from pathlib import Path

from agent.config.settings import Settings
from agent.core.grants import StoreGrants
from agent.core.ingestion import IngestionService
from agent.core.keys import StoreKeys
from agent.core.library import StoreLibrary
from agent.core.wiring import Clients, build_services
from tools.embedder import PRIORITY_BULK, PRIORITY_INTERACTIVE


def settings(**update: object) -> Settings:
    return Settings.model_validate(
        {
            "database_url": "postgresql://postgres@127.0.0.1:1/rag",
            "embedder_interactive_model": "all-minilm-l6-v2-query",
            "triton_max_in_flight": 3,
            "ingest_max_in_flight": 5,
        }
        | update
    )


def test_services_hold_one_ingestion_service_over_the_answer_paths_store() -> None:
    configured = settings()
    services = build_services(configured)
    clients, ingestion = services.resources
    assert isinstance(clients, Clients) and isinstance(ingestion, IngestionService)
    assert services.ingestion is ingestion and ingestion.workers == 0 and services.keys is None
    assert ingestion.store is clients.store
    assert isinstance(services.library, StoreLibrary)
    assert services.library.store is clients.store and services.library.intake is ingestion


def test_documents_are_added_on_the_bulk_embedder() -> None:
    configured = settings()
    services = build_services(configured)
    assert services.ingestion is not None
    clients = services.resources[0]
    assert isinstance(clients, Clients)
    bulk, interactive = services.ingestion.embedder, clients.embedder
    assert bulk is not interactive
    assert (bulk.model_name, bulk.priority, bulk.max_in_flight) == (configured.embedder_model, PRIORITY_BULK, 5)
    assert (interactive.model_name, interactive.priority) == ("all-minilm-l6-v2-query", PRIORITY_INTERACTIVE)


def test_serving_runs_the_job_workers_and_keeps_the_keys_in_the_same_store(tmp_path: Path) -> None:
    # (serving checks that the originals folder is writable: one of the test's own)
    services = build_services(settings(jobs_serve_workers=3, originals_dir=tmp_path / "originals"), serving=True)
    clients, keys, grants, ingestion = services.resources
    assert isinstance(clients, Clients) and isinstance(keys, StoreKeys) and isinstance(ingestion, IngestionService)
    assert services.keys is keys and keys.store is clients.store
    assert isinstance(grants, StoreGrants) and services.grants is grants and grants.store is clients.store
    assert services.ingestion is ingestion and ingestion.workers == 3 and ingestion.store is clients.store
