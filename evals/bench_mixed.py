"""`rag bench mixed`: questions while bulk work runs on the same Triton, LLM and Postgres.

Interactive load goes through the Python API (`agent.core.app.RagApp`, in this process, on the settings' stack and
store): retrieval alone (`RagApp.search`: embed on Triton + hybrid search) and whole answers (`RagApp.ask`, TTFT at
the first text delta), each at concurrency 1 and 8, as closed loops of a fixed number of questions (SciFact test
claims for retrieval; train claims in a seeded random order for answers, `ProbeClaims`, so that no answer is served
from vLLM's prefix cache). It is measured idle, then beside each bulk workload, each a process of its own as users
run them:

- `ingest`: `rag ingest` of the first `--ingest-docs` SciFact abstracts into a scratch database on the same Postgres
  (dropped and created afresh before each run);
- `upload`: a `rag serve` on a free loopback port over a scratch database, sent `--upload-files` PDFs (each
  `--upload-pages` SciFact abstracts, one per page, printed by headless Chromium) as one `POST /v1/documents/files`
  job, polled until done;
- `eval`: `rag eval answers --concurrency 8` of `--eval-cases` SciFact test claims on the settings' store (its LLM
  requests are bulk: `LLM_BULK_PRIORITY`); each of its three runs takes the next slice of the claims
  (`eval_claim_ids`), so no run finds its prompts in vLLM's prefix cache from the one before (a warm cache made the
  runs beside the probes twice as fast as the first, and they ended before the answer probes).

Each workload runs three times: alone (its rate: chunks/s or cases/s); beside a steady stream of one retrieval a
second (its rate beside questions, the ratio the targets judge, and the stream's latency); and beside the probes
(the questions' latency beside it, then the stream until it ends; its rate there is reported too). A probe counts
only while its workload still ran at its end (`overlap`). Reported per phase and probe: p50/p95/p99
with n, errors, and the ratio of p50 to idle; per workload its rate alone and beside and their ratio, and whether
it finished (nothing lost: every document stored, every case answered). Percentiles: `tools.stats.percentiles`.
Progress goes to stderr; `--json` prints one JSON object.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import asyncpg
import httpx

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from evals.machine import machine_info
from evals.plots import emit_report, pyplot, save_figure
from evals.retrieval_eval import ensure_database
from evals.scifact import SCIFACT_DIR, Split, claim_texts, load_corpus
from infra.processes import free_port
from tools.stats import percentiles

log = logging.getLogger(__name__)

Workload = Literal["ingest", "upload", "eval"]
WORKLOADS: tuple[Workload, ...] = ("ingest", "upload", "eval")
SCRATCH_DB = "rag_bench_mixed"
"""Scratch database of the ingest and upload workloads (dropped and created before each run)."""

TARGETS = {
    "retrieval_p50_over_idle_during_ingest": "<= 3",
    "retrieval_p95_ms_during_ingest": "<= 500",
    "ttft_p50_over_idle_during_ingest": "<= 1.5",
    "ttft_p50_over_idle_during_eval": "<= 2",
    "ingest_rate_beside_over_alone": ">= 0.8",
    "failed_questions": "<= 0",
    "lost_bulk_work": "<= 0",
}
"""The targets `rag bench mixed` checks (at concurrency 1; docs/benchmarks.md, "Questions while documents flow in")."""


@dataclass(frozen=True)
class MixedBenchParams:
    """What to run (see the module docstring); counts are questions per probe, documents, files or cases."""

    workloads: Sequence[Workload] = WORKLOADS
    concurrencies: Sequence[int] = (1, 8)
    retrieval_requests: int = 40
    answer_requests: int = 8
    answers: bool = True
    ingest_docs: int = 1500
    upload_files: int = 20
    upload_pages: int = 10
    eval_cases: int = 40
    eval_concurrency: int = 8
    question_gap_s: float = 1.0
    warmup_s: float = 10.0
    bulk_timeout_s: float = 1800.0
    seed: int | None = None
    """Order of the answer probes' claims (`ProbeClaims`); None: a fresh one per run, stored in the report."""

    def __post_init__(self) -> None:
        unknown = [w for w in self.workloads if w not in WORKLOADS]
        if unknown:
            raise ValueError(f"--workload {unknown}: expected some of {list(WORKLOADS)}")
        if not self.concurrencies or min(self.concurrencies) < 1:
            raise ValueError(f"--concurrency {list(self.concurrencies)}: expected one or more levels >= 1")
        counts = (self.retrieval_requests, self.answer_requests, self.ingest_docs, self.upload_files)
        if min(counts) < 1 or min(self.upload_pages, self.eval_cases, self.eval_concurrency) < 1:
            raise ValueError("request, document, file, page and case counts: expected at least 1 each")


# --- interactive probes -------------------------------------------------------------------------------------------


@dataclass
class Probe:
    """One closed loop of questions: latencies (ms), TTFT (ms, answers only), errors by kind."""

    kind: Literal["retrieval", "answer"]
    concurrency: int
    latencies_ms: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    overlap: bool = True
    """Whether the bulk workload still ran when the probe ended (always True idle)."""
    llm_answers: int = 0
    """HTTP asks only (`http_asks`): questions the LLM answered, whose LLM time is not in their latency."""

    def summary(self) -> dict[str, Any]:
        """p50/p95/p99 and n of the latencies (and TTFT), errors, overlap."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "concurrency": self.concurrency,
            "latency_ms": percentiles(self.latencies_ms),
            "errors": dict(self.errors),
            "overlap": self.overlap,
        }
        if self.kind == "answer":
            out["ttft_ms"] = percentiles(self.ttft_ms)
        if self.llm_answers:
            out["llm_answers"] = self.llm_answers
        return out


async def retrieval_once(app: RagApp, claim: str, probe: Probe) -> None:
    """One `RagApp.search`; its latency or its error kind (the exception's type) goes to `probe`."""
    start = time.perf_counter()
    try:
        await app.search(claim)
    except Exception as exc:  # noqa: BLE001 - a failed question is a measured outcome, never the bench's crash
        probe.errors[type(exc).__name__] += 1
        return
    probe.latencies_ms.append((time.perf_counter() - start) * 1000)


async def answer_once(app: RagApp, claim: str, probe: Probe) -> None:
    """One `RagApp.ask`; TTFT is the first visible text delta (`on_text`), latency the whole answer."""
    start = time.perf_counter()
    first: list[float] = []

    def on_text(_: str) -> None:
        if not first:
            first.append(time.perf_counter())

    try:
        await app.ask(AnswerRequest(claim, on_text=on_text))
    except Exception as exc:  # noqa: BLE001 - as above
        probe.errors[type(exc).__name__] += 1
        return
    end = time.perf_counter()
    probe.latencies_ms.append((end - start) * 1000)
    probe.ttft_ms.append(((first[0] if first else end) - start) * 1000)


async def run_probe(
    app: RagApp, kind: Literal["retrieval", "answer"], concurrency: int, requests: int, claims: Iterator[str]
) -> Probe:
    """`concurrency` clients sending `requests` questions in all, each its next as soon as its last ended."""
    probe = Probe(kind, concurrency)
    once = retrieval_once if kind == "retrieval" else answer_once
    left = itertools.count()

    async def client() -> None:
        while next(left) < requests:
            await once(app, next(claims), probe)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return probe


@dataclass
class ProbeClaims:
    """Where the questions come from: `retrieval` (retrieval probes, the steady stream, the upload server's asks)
    cycles the SciFact test claims; `answers` (whole-answer probes) cycles the train claims in an order shuffled by
    `seed`, so no answer probe finds its own prompt in vLLM's prefix cache from earlier in the run (or, with another
    seed, from a run before it), which would cut its TTFT to a fraction and make the ratios to idle meaningless.
    The eval workload answers test claims, so it warms no answer probe's prompt either."""

    seed: int
    retrieval: Iterator[str] = field(init=False)
    answers: Iterator[str] = field(init=False)

    def __post_init__(self) -> None:
        self.retrieval = itertools.cycle([c for c in claim_texts("test").values() if c.strip()])
        self.answers = itertools.cycle(answer_claims(self.seed))


def answer_claims(seed: int) -> list[str]:
    """The SciFact train claims, each text once and none that is also a test claim's (805 of 809), in the order
    `random.Random(seed)` shuffles them."""
    test = set(claim_texts("test").values())
    texts = sorted({c for c in claim_texts("train").values() if c.strip() and c not in test})
    random.Random(seed).shuffle(texts)
    return texts


async def probes(
    app: RagApp, params: MixedBenchParams, claims: ProbeClaims, running: Callable[[], bool]
) -> list[Probe]:
    """Every probe in turn (retrieval, then answers, each at every concurrency); a probe that ended after the
    workload did is marked `overlap=False`."""
    plan: list[tuple[Literal["retrieval", "answer"], int, int]] = [
        ("retrieval", c, max(params.retrieval_requests, 2 * c)) for c in params.concurrencies
    ]
    if params.answers:
        plan += [("answer", c, max(params.answer_requests, c)) for c in params.concurrencies]
    out = []
    for kind, concurrency, requests in plan:
        source = claims.retrieval if kind == "retrieval" else claims.answers
        probe = await run_probe(app, kind, concurrency, requests, source)
        probe.overlap = running()
        log.info("%s c=%d: %s", kind, concurrency, probe.summary()["latency_ms"])
        out.append(probe)
    return out


# --- bulk workloads -----------------------------------------------------------------------------------------------


@dataclass
class BulkRun:
    """One run of a bulk workload: what it did, how long, and whether it finished with everything stored."""

    workload: Workload
    units: str
    done: float = 0.0
    expected: float = 0.0
    wall_s: float = 0.0
    exit_code: int | None = None
    detail: str = ""
    http: dict[str, Any] = field(default_factory=dict)
    """Upload only: `/v1/ask` latency on the serving process, idle and while its job worker runs (`run_upload`)."""

    @property
    def rate(self) -> float:
        """Units (chunks or cases) per second of wall time."""
        return self.done / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The run as JSON, its rate rounded to 0.01 units/s."""
        return {**asdict(self), "rate": round(self.rate, 2)}


def cli_env(settings: Settings, **overrides: str) -> dict[str, str]:
    """This process' environment pointing a `rag` child at the same stack (overrides win)."""
    env = dict(os.environ)
    env.update(
        {
            "DATA_DIR": str(settings.data_dir),
            "TRITON_GRPC_URL": settings.triton_grpc_url,
            "LLM_BASE_URL": settings.llm_base_url,
            "LLM_MODEL": settings.llm_model,
            "VLLM_PORT": str(settings.vllm_port),
            "TRITON_HTTP_PORT": str(settings.triton_http_port),
            "TRITON_METRICS_PORT": str(settings.triton_metrics_port),
            "DATABASE_URL": settings.resolved_database_url(),
            "PYTHONUNBUFFERED": "1",
            "ANSWER_CACHE": "false",  # the bulk eval's answers and the server's are measured afresh
        }
    )
    env.update(overrides)
    return env


@contextlib.asynccontextmanager
async def child(argv: Sequence[str], env: dict[str, str], log_path: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """A `rag` child process in its own process group, stdout to a pipe, stderr to `log_path`; on exit (also on
    error or cancellation) the group is sent SIGINT, then SIGKILL after 30 s, by PID."""
    with log_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent",
            *argv,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()


async def fresh_database(settings: Settings, name: str = SCRATCH_DB) -> str:
    """Drop and create the scratch database `name` on the settings' Postgres; its URL."""
    url = settings.resolved_database_url()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
    return await ensure_database(url, name)


def ingest_corpus(work: Path, docs: int) -> Path:
    """The first `docs` SciFact abstracts as a BEIR `corpus.jsonl` under `work`."""
    path = work / "ingest" / "corpus.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for d in list(load_corpus(SCIFACT_DIR).values())[:docs]:
            handle.write(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
    return path


async def upload_pdfs(work: Path, files: int, pages: int) -> list[Path]:
    """`files` PDFs of `pages` SciFact abstracts each (one per page), printed by headless Chromium once."""
    from evals.render_docs import book_html, print_pdfs

    folder = work / "upload"
    folder.mkdir(parents=True, exist_ok=True)
    corpus = list(load_corpus(SCIFACT_DIR).values())
    out = [folder / f"abstracts-{i:02d}.pdf" for i in range(files)]
    todo = [(book_html(corpus[i * pages : (i + 1) * pages]), path) for i, path in enumerate(out) if not path.exists()]
    if todo:
        await print_pdfs(todo)
    return out


async def run_ingest(settings: Settings, corpus: Path, work: Path, tag: str) -> BulkRun:
    """`rag ingest --json` of `corpus` into a fresh scratch database; chunks/s from its report."""
    run = BulkRun("ingest", "chunks/s", expected=sum(1 for _ in corpus.open(encoding="utf-8")))
    url = await fresh_database(settings)
    env = cli_env(settings, DATABASE_URL=url)
    start = time.perf_counter()
    async with child(["ingest", str(corpus), "--json"], env, work / f"ingest-{tag}.log") as proc:
        out, _ = await asyncio.wait_for(proc.communicate(), 1800)
    run.wall_s, run.exit_code = time.perf_counter() - start, proc.returncode
    if proc.returncode == 0:
        report = json.loads(out)
        run.done, run.detail = float(report["chunks"]), f"{report['documents']} documents"
    return run


async def wait_ready(client: httpx.AsyncClient, proc: asyncio.subprocess.Process, timeout_s: float = 300.0) -> None:
    """Poll `GET /v1/documents?limit=1` every 0.5 s until 200 (the app is up with its store; `/health` would also
    wait for the LLM, which the upload does not use).

    Raises:
        RuntimeError: the server exited, or was not ready within `timeout_s` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"rag serve exited with code {proc.returncode} before it was ready")
        with contextlib.suppress(httpx.HTTPError):
            if (await client.get("/v1/documents", params={"limit": 1})).status_code == 200:
                return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"rag serve not ready within {timeout_s} s")


async def http_asks(client: httpx.AsyncClient, claims: Iterator[str], until: Callable[[], bool], most: int) -> Probe:
    """Sequential `POST /v1/ask` of SciFact claims until `until()` or `most` were sent; a non-200 answer counts as
    an error of kind `http_<status>`.

    This measures the server's event loop, embedding and search, not the LLM: on the upload's scratch database most
    questions are refused below the relevance threshold, and once the upload has stored a claim's abstracts its
    question is answered by the LLM, whose time (the response's `timings_ms.llm`, ms) is taken off that latency
    and counted in `llm_answers`."""
    probe = Probe("retrieval", 1)
    for _ in range(most):
        if until():
            break
        start = time.perf_counter()
        try:
            response = await client.post("/v1/ask", json={"question": next(claims)})
        except httpx.HTTPError as exc:
            probe.errors[type(exc).__name__] += 1
            continue
        if response.status_code != 200:
            kind = f"http_{response.status_code}"
            probe.errors[kind] += 1
            continue
        llm_ms = float((response.json().get("timings_ms") or {}).get("llm") or 0.0)
        probe.llm_answers += llm_ms > 0
        probe.latencies_ms.append((time.perf_counter() - start) * 1000 - llm_ms)
    return probe


async def run_upload(
    settings: Settings, files: Sequence[Path], work: Path, tag: str, timeout_s: float, claims: Iterator[str]
) -> BulkRun:
    """A `rag serve` (one job worker) over a fresh scratch database, sent `files` as one upload job and polled
    every 0.5 s until the job ends; chunks/s of the job from the upload to its end. Beside the job, questions are
    sent to the same server over HTTP (`http_asks`), and before it as many idle, so `http` in the run's detail says
    whether the job worker slows the server's event loop."""
    run = BulkRun("upload", "chunks/s", expected=len(files))
    env = cli_env(settings, DATABASE_URL=await fresh_database(settings), JOBS_SERVE_WORKERS="1")
    port = free_port()
    async with (
        child(["serve", "--port", str(port)], env, work / f"serve-{tag}.log") as proc,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120.0) as client,
    ):
        await wait_ready(client, proc)
        idle = await http_asks(client, claims, lambda: False, 20)
        start = time.perf_counter()
        parts = [("files", (p.name, p.read_bytes(), "application/pdf")) for p in files]
        accepted = await client.post("/v1/documents/files", files=parts)
        accepted.raise_for_status()
        status_url = accepted.json()["status_url"]
        job: dict[str, Any] = {"status": "queued"}

        async def poll() -> None:
            nonlocal job
            while job["status"] in ("queued", "running") and time.perf_counter() - start < timeout_s:
                await asyncio.sleep(0.5)
                job = (await client.get(status_url)).json()

        poller = asyncio.create_task(poll())
        during = await http_asks(client, claims, poller.done, 10_000)
        await poller
        run.wall_s = time.perf_counter() - start
    run.done = float(job.get("chunks") or 0)
    run.exit_code = 0 if job["status"] == "done" and not job.get("errors") else 1
    run.detail = f"job {job['status']}, {job.get('files_done', 0)} of {len(files)} files, errors {job.get('errors')}"
    run.http = {"idle": idle.summary(), "during_job": during.summary()}
    return run


EVAL_RUNS = ("alone", "beside-stream", "beside-probes")
"""The eval workload's runs in order (`beside`'s tags); run k answers the k-th slice of claims (`eval_claim_ids`)."""


def eval_claim_ids(cases: int, run: int, split: Split = "test") -> list[str]:
    """The claim ids of the eval workload's `run`-th run (0-based): `cases` consecutive ids of `split` (file order)
    from `run * cases`, wrapping round at the end (SciFact test has 300 claims, so up to 100 cases per run are
    disjoint).

    Raises:
        ValueError: `cases` or `run` below 1 or 0.
    """
    if cases < 1 or run < 0:
        raise ValueError(f"cases {cases}, run {run}: expected cases >= 1 and run >= 0")
    ids = list(claim_texts(split))
    return [ids[(run * cases + i) % len(ids)] for i in range(cases)]


async def run_eval(settings: Settings, params: MixedBenchParams, work: Path, tag: str) -> BulkRun:
    """`rag eval answers --concurrency N --id ... --json` of this run's slice of claims (`eval_claim_ids`) on the
    settings' store; cases/s."""
    run = BulkRun("eval", "cases/s", expected=params.eval_cases)
    ids = eval_claim_ids(params.eval_cases, EVAL_RUNS.index(tag) if tag in EVAL_RUNS else 0)
    argv = ["eval", "answers", "--concurrency", str(params.eval_concurrency)]
    argv += [arg for claim_id in ids for arg in ("--id", claim_id)]
    argv += ["--out", str(work / f"eval-{tag}"), "--json"]
    start = time.perf_counter()
    async with child(argv, cli_env(settings), work / f"eval-{tag}.log") as proc:
        out, _ = await asyncio.wait_for(proc.communicate(), params.bulk_timeout_s)
    run.wall_s, run.exit_code = time.perf_counter() - start, proc.returncode
    if proc.returncode in (0, 2):  # 2: some case failed; the summary still counts them
        summary = json.loads(out)
        run.done = float(summary["n"] - summary.get("errors", 0))
        run.detail = f"{summary['n']} cases, {summary.get('errors', 0)} failed"
    return run


def lost(run: BulkRun) -> bool:
    """Whether bulk work was lost: a failed run, or fewer documents or cases than asked for."""
    return run.exit_code not in (0, None) or run.done <= 0 or (run.workload == "eval" and run.done < run.expected)


async def _bulk(
    settings: Settings, params: MixedBenchParams, workload: Workload, work: Path, tag: str, claims: Iterator[str]
) -> BulkRun:
    if workload == "ingest":
        return await run_ingest(settings, ingest_corpus(work, params.ingest_docs), work, tag)
    if workload == "upload":
        files = await upload_pdfs(work, params.upload_files, params.upload_pages)
        return await run_upload(settings, files, work, tag, params.bulk_timeout_s, claims)
    return await run_eval(settings, params, work, tag)


async def beside(
    app: RagApp,
    settings: Settings,
    params: MixedBenchParams,
    workload: Workload,
    work: Path,
    claims: ProbeClaims,
    with_probes: bool,
) -> tuple[BulkRun, list[Probe], Probe]:
    """The workload with questions beside it: with `with_probes`, the probes first; then (or from the start) one
    retrieval every `question_gap_s` until it ends (a steady question stream, about 1/s). Returns its run, the
    probes (none without `with_probes`) and that stream."""
    tag = "beside-probes" if with_probes else "beside-stream"
    task = asyncio.create_task(_bulk(settings, params, workload, work, tag, claims.retrieval))
    try:
        measured: list[Probe] = []
        if with_probes:
            await asyncio.wait({task}, timeout=params.warmup_s)  # the child imports and connects first
            measured = await probes(app, params, claims, lambda: not task.done())
        stream = Probe("retrieval", 1)
        while not task.done():
            await retrieval_once(app, next(claims.retrieval), stream)
            await asyncio.wait({task}, timeout=params.question_gap_s)
        return await task, measured, stream
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base rounded to 0.01; None when either is missing or base is 0."""
    return round(value / base, 2) if value is not None and base else None


def _p50(probe: dict[str, Any], key: str = "latency_ms") -> float | None:
    value = probe.get(key, {}).get("p50")
    return float(value) if value is not None else None


def compare(idle: list[dict[str, Any]], busy: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each busy probe with its p50 (and TTFT p50) over the idle probe of the same kind and concurrency."""
    by_key = {(p["kind"], p["concurrency"]): p for p in idle}
    out = []
    for probe in busy:
        base = by_key.get((probe["kind"], probe["concurrency"]), {})
        probe = {**probe, "p50_over_idle": ratio(_p50(probe), _p50(base))}
        if probe["kind"] == "answer":
            probe["ttft_p50_over_idle"] = ratio(_p50(probe, "ttft_ms"), _p50(base, "ttft_ms"))
        out.append(probe)
    return out


def check_targets(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`TARGETS` against the report, at concurrency 1 (a workload or probe not run is left out).

    A probe that ended after its workload did was partly measured on an idle machine: its target is reported with
    `overlap: false` and not met (run more bulk work, e.g. `--eval-cases`, so the probes end first).
    """
    phases = {p["workload"]: p for p in report["phases"]}
    partial: set[str] = set()

    def probe(workload: str, kind: str) -> dict[str, Any]:
        probes_ = phases.get(workload, {}).get("probes", [])
        found: dict[str, Any] = next((p for p in probes_ if p["kind"] == kind and p["concurrency"] == 1), {})
        if found.get("overlap") is False:
            partial.add(f"{workload}/{kind}")
        return found

    sources = {
        "retrieval_p50_over_idle_during_ingest": "ingest/retrieval",
        "retrieval_p95_ms_during_ingest": "ingest/retrieval",
        "ttft_p50_over_idle_during_ingest": "ingest/answer",
        "ttft_p50_over_idle_during_eval": "eval/answer",
    }
    values: dict[str, Any] = {
        "retrieval_p50_over_idle_during_ingest": probe("ingest", "retrieval").get("p50_over_idle"),
        "retrieval_p95_ms_during_ingest": probe("ingest", "retrieval").get("latency_ms", {}).get("p95"),
        "ttft_p50_over_idle_during_ingest": probe("ingest", "answer").get("ttft_p50_over_idle"),
        "ttft_p50_over_idle_during_eval": probe("eval", "answer").get("ttft_p50_over_idle"),
        "ingest_rate_beside_over_alone": phases.get("ingest", {}).get("rate_beside_over_alone"),
        "failed_questions": sum(
            sum(p["errors"].values())
            for phase in [report["idle"], *[ph["probes"] for ph in report["phases"]]]
            for p in phase
        )
        + sum(sum(ph["stream"]["errors"].values()) for ph in report["phases"]),
        "lost_bulk_work": sum(ph["lost"] for ph in report["phases"]),
    }
    out = {}
    for name, target in TARGETS.items():
        value = values[name]
        if value is None:
            continue
        op, bound = target.split()
        met = {"<=": value <= float(bound), ">=": value >= float(bound)}[op]
        out[name] = {"value": round(value, 2), "target": target, "met": met}
        if sources.get(name) in partial:
            out[name].update(met=False, overlap=False)
    return out


async def run_mixed_bench(settings: Settings, params: MixedBenchParams) -> dict[str, Any]:
    """Idle probes, then each workload alone and beside the probes (module docstring); the report.

    The working folder (corpus, PDFs, the children's logs) is removed at the end, unless a bulk run lost work: then
    it stays and the report's `work_dir` names it (else None).

    Raises:
        SettingsError: no database (run `rag up`); the app's own start-up errors (Triton, Postgres, LLM).
    """
    seed = params.seed if params.seed is not None else random.SystemRandom().randrange(2**31)
    claims = ProbeClaims(seed)
    work = Path(tempfile.mkdtemp(prefix="rag-bench-mixed-"))
    report: dict[str, Any] = {
        "machine": machine_info({"embedder_model": settings.embedder_model, "llm_model": settings.llm_model}),
        "params": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(params).items()} | {"seed": seed},
        "settings": {
            "embedder_interactive_model": settings.embedder_interactive_model,
            "embedder_model": settings.embedder_model,
            "triton_max_in_flight": settings.triton_max_in_flight,
            "ingest_max_in_flight": settings.ingest_max_in_flight,
            "llm_bulk_priority": settings.llm_bulk_priority,
        },
        "phases": [],
    }
    # answers are measured afresh: a cached answer would skip the LLM whose contention is measured
    async with RagApp(settings.model_copy(update={"answer_cache": False})) as app:
        log.info("idle probes")
        report["idle"] = [p.summary() for p in await probes(app, params, claims, lambda: True)]
        for workload in params.workloads:
            log.info("%s alone", workload)
            alone = await _bulk(settings, params, workload, work, "alone", claims.retrieval)
            log.info("%s alone: %.2f %s; now beside a question a second", workload, alone.rate, alone.units)
            steady, _, stream = await beside(app, settings, params, workload, work, claims, with_probes=False)
            log.info("%s beside the stream: %.2f %s; now beside the probes", workload, steady.rate, steady.units)
            run, measured, _ = await beside(app, settings, params, workload, work, claims, with_probes=True)
            log.info("%s beside the probes: %.2f %s", workload, run.rate, run.units)
            report["phases"].append(
                {
                    "workload": workload,
                    "alone": alone.summary(),
                    "beside_stream": steady.summary(),
                    "beside": run.summary(),
                    "rate_beside_over_alone": ratio(steady.rate, alone.rate),
                    "rate_beside_probes_over_alone": ratio(run.rate, alone.rate),
                    "lost": int(lost(alone)) + int(lost(steady)) + int(lost(run)),
                    "probes": compare(report["idle"], [p.summary() for p in measured]),
                    "stream": stream.summary(),
                }
            )
    report["targets"] = check_targets(report)
    if any(phase["lost"] for phase in report["phases"]):
        report["work_dir"] = str(work)  # the children's logs say why
    else:
        shutil.rmtree(work, ignore_errors=True)
        report["work_dir"] = None
    return report


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """p50 and p95 latency of each probe at concurrency 1, idle and beside each workload (log scale)."""
    plt = pyplot()
    kinds = [("retrieval", "latency_ms", "retrieval"), ("answer", "ttft_ms", "answer TTFT")]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (kind, key, label) in zip(axes, kinds, strict=True):
        rows = [("idle", report["idle"])] + [(ph["workload"], ph["probes"]) for ph in report["phases"]]
        names, p50, p95 = [], [], []
        for name, probes_ in rows:
            probe = next((p for p in probes_ if p["kind"] == kind and p["concurrency"] == 1), None)
            if probe and probe.get(key, {}).get("n"):
                names.append(name)
                p50.append(probe[key]["p50"])
                p95.append(probe[key]["p95"])
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], p50, width=0.4, label="p50")
        ax.bar([x + 0.2 for x in xs], p95, width=0.4, label="p95")
        ax.set_xticks(list(xs), names)
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.set_title(f"{label}, concurrency 1", fontsize=9)
        ax.legend(fontsize=8)
    return save_figure(fig, path, "Questions beside bulk work (rag bench mixed)")


def _fmt(stats: dict[str, Any], key: str) -> str:
    value = stats.get(key)
    return "-" if value is None else f"{value:.0f}"


def render(report: dict[str, Any], console: Any) -> None:
    """Tables of the probes (idle and per workload), the workloads' rates, and the targets."""
    from rich.table import Table

    table = Table(title="Questions: latency ms (p50 / p95 / p99, n), ratio of p50 to idle")
    for column in ("while", "probe", "c", "latency", "TTFT", "x idle", "errors"):
        table.add_column(column)
    rows = [("idle", p) for p in report["idle"]]
    rows += [(ph["workload"], p) for ph in report["phases"] for p in ph["probes"]]
    for where, p in rows:
        lat = p["latency_ms"]
        ttft = p.get("ttft_ms", {})
        table.add_row(
            where + ("" if p["overlap"] else " (ended first)"),
            p["kind"],
            str(p["concurrency"]),
            f"{_fmt(lat, 'p50')} / {_fmt(lat, 'p95')} / {_fmt(lat, 'p99')} ({lat.get('n', 0)})",
            f"{_fmt(ttft, 'p50')} / {_fmt(ttft, 'p95')}" if ttft else "",
            str(p.get("ttft_p50_over_idle") or p.get("p50_over_idle") or ""),
            str(sum(p["errors"].values())),
        )
    console.print(table)
    bulk = Table(title="Bulk work: rate alone, beside a question a second, beside the probes")
    for column in ("workload", "alone", "beside 1 q/s", "ratio", "beside probes", "ratio", "lost"):
        bulk.add_column(column)
    for ph in report["phases"]:
        units = ph["alone"]["units"]
        bulk.add_row(
            ph["workload"],
            f"{ph['alone']['rate']} {units}",
            f"{ph['beside_stream']['rate']} {units}",
            str(ph["rate_beside_over_alone"]),
            f"{ph['beside']['rate']} {units}",
            str(ph["rate_beside_probes_over_alone"]),
            str(ph["lost"]),
        )
    console.print(bulk)
    for name, t in report["targets"].items():
        console.print(f"{'met ' if t['met'] else 'MISSED'} {name}: {t['value']} (target {t['target']})")


def run_mixed_bench_command(settings: Settings, params: MixedBenchParams, as_json: bool, output: Path) -> None:
    """`rag bench mixed`: run, write the JSON report and the plot beside it, print."""
    report = asyncio.run(run_mixed_bench(settings, params))
    report["plot"] = str(write_plot(report, output.with_suffix(".png")))
    emit_report(report, as_json, output, render)
