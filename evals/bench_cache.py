"""`rag bench cache`: the answer cache's latency and hit rate through HTTP, replaying a question log with repeats.

Set-up: a scratch database (`rag_bench_cache`, dropped and made afresh) on the settings' Postgres, holding the gold
abstracts of `claims` SciFact test claims (drawn with the seed) and the first `distractors` abstracts, embedded by the
settings' Triton; a `rag serve` app (`agent.http.create_app`) on a free loopback port in this process, with the
answer cache on and a fast scripted LLM (pydantic-ai `FunctionModel`: one fixed cited sentence after `llm_delay_ms`),
so that a miss costs admission, embedding, search and the prompt, and the LLM's own time is a parameter. Refusals are
off (`REFUSAL_MIN_SCORE=-1`): every miss reaches the LLM.

The log: `questions` claims drawn with replacement from those claims (numpy's seeded generator), sent one at a time to
`POST /v1/ask` over loopback HTTP (httpx). Reported: latency p50/p95/p99 (ms, client-side, from sending the request to
the parsed JSON) of hits (`cached: true`) and misses, the hit rate against the most the log allows (1 − distinct
questions / questions: each first occurrence misses), and the target: hit p50 ≤ 20 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.wiring import build_services
from agent.http import create_app
from evals.bench_mixed import fresh_database
from evals.machine import machine_info
from evals.plots import emit_report
from evals.scifact import claim_texts, gold_doc_ids, load_corpus
from infra.processes import free_port
from tools.ingest import SourceDocument
from tools.stats import percentiles

log = logging.getLogger(__name__)

SCRATCH_DB = "rag_bench_cache"
"""The scratch database of the benchmark (dropped and made afresh each run)."""

ANSWER = "The passages address this claim [1]."
"""The scripted LLM's answer."""

TARGETS = {"hit_p50_ms": "<= 20"}
"""The answer cache's latency target: a hit through HTTP in at most 20 ms at the median."""


@dataclass(frozen=True)
class CacheBenchParams:
    """What one `rag bench cache` run does.

    Attributes:
        claims: distinct SciFact test claims the log draws from (each with a gold abstract in the corpus).
        questions: length of the question log (draws with replacement).
        distractors: abstracts stored besides the gold ones (the first of the corpus file).
        llm_delay_ms: the scripted LLM's time per answer, ms.
        seed: numpy seed of the claims and the log.
    """

    claims: int = 60
    questions: int = 300
    distractors: int = 200
    llm_delay_ms: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.claims < 1 or self.questions < 1 or self.distractors < 0 or self.llm_delay_ms < 0:
            raise ValueError(
                f"claims={self.claims}, questions={self.questions}, distractors={self.distractors}, "
                f"llm_delay_ms={self.llm_delay_ms}: expected >= 1, >= 1, >= 0 and >= 0"
            )


def question_log(params: CacheBenchParams) -> tuple[list[str], list[str]]:
    """(the claims' gold doc ids, the log of claim texts): `claims` test claims with a gold abstract drawn without
    replacement, then `questions` of them drawn with replacement, both from numpy's generator seeded `seed`.

    Raises:
        ValueError: fewer test claims than `claims`.
    """
    gold, texts = gold_doc_ids("test"), claim_texts("test")
    ids = sorted((q for q in gold if q in texts), key=int)
    if params.claims > len(ids):
        raise ValueError(f"claims={params.claims}: SciFact's test split has {len(ids)} claims with gold abstracts")
    rng = np.random.default_rng(params.seed)
    chosen = [ids[i] for i in rng.choice(len(ids), size=params.claims, replace=False)]
    drawn = rng.choice(len(chosen), size=params.questions, replace=True)
    docs = sorted({d for q in chosen for d in gold[q]})
    return docs, [texts[chosen[i]] for i in drawn]


def scripted_model(delay_ms: float) -> FunctionModel:
    """The fast LLM: `ANSWER`, streamed in one piece after `delay_ms`."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        yield ANSWER

    return FunctionModel(stream_function=stream, model_name="bench-cache-scripted")


@contextlib.asynccontextmanager
async def serving(settings: Settings, rag: RagApp) -> AsyncIterator[str]:
    """`rag` served by uvicorn on a free loopback port in this event loop (its lifespan opens `rag`); the base
    URL."""
    port = free_port()
    config = uvicorn.Config(create_app(settings, rag), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the benchmark's server stopped before it started")
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def _ms(seconds: list[float]) -> dict[str, float | int]:
    stats = percentiles(np.asarray(seconds, dtype=np.float64) * 1000)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in stats.items()}


def summarize(samples: list[tuple[float, bool]], distinct: int) -> dict[str, Any]:
    """The report's figures from (latency s, cached) per question and the number of distinct questions."""
    hits = [s for s, cached in samples if cached]
    misses = [s for s, cached in samples if not cached]
    hit_ms = _ms(hits)
    return {
        "questions": len(samples),
        "distinct_questions": distinct,
        "hits": len(hits),
        "hit_rate": round(len(hits) / len(samples), 4) if samples else 0.0,
        "most_hit_rate": round(1 - distinct / len(samples), 4) if samples else 0.0,
        "hit_latency_ms": hit_ms,
        "miss_latency_ms": _ms(misses),
        "targets": {"hit_p50_ms": {"value": hit_ms.get("p50"), "target": TARGETS["hit_p50_ms"]}},
    }


async def run_cache_bench(settings: Settings, params: CacheBenchParams) -> dict[str, Any]:
    """Ingest the corpus into a scratch database, serve the app, replay the log; the `--json` report.

    Raises:
        SettingsError: no database (run `rag up --only postgres --only triton`); Triton or Postgres errors.
    """
    docs, questions = question_log(params)
    url = await fresh_database(settings, SCRATCH_DB)
    bench = settings.model_copy(update={"database_url": url, "answer_cache": True, "refusal_min_score": -1.0})
    scripted = scripted_model(params.llm_delay_ms)
    services = replace(build_services(bench), model=scripted, tool_check=None, context=None)  # no window to fit
    rag = RagApp(bench, services)
    corpus = load_corpus()
    stored = list(dict.fromkeys([*docs, *list(corpus)[: params.distractors]]))
    samples: list[tuple[float, bool]] = []
    async with serving(bench, rag) as base_url:
        log.info("storing %d abstracts", len(stored))
        sources = [SourceDocument(d, corpus[d].title, corpus[d].text, "scifact", {}) for d in stored if d in corpus]
        await rag.add_documents(sources)
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
            await client.post("/v1/ask", json={"question": "warm-up: does the service answer?"})
            log.info("replaying %d questions", len(questions))
            for question in questions:
                start = time.perf_counter()
                response = await client.post("/v1/ask", json={"question": question})
                body = response.json()
                elapsed = time.perf_counter() - start
                if response.status_code != 200:
                    raise RuntimeError(f"/v1/ask answered HTTP {response.status_code}: {body}")
                samples.append((elapsed, bool(body["cached"])))
    report = summarize(samples, len(set(questions)))
    report["documents"] = len(sources)
    report["machine"] = machine_info({"embedder_model": settings.embedder_model})
    report["params"] = asdict(params)
    return report


def render(report: dict[str, Any], console: Any) -> None:
    """The report as a table."""
    from rich.table import Table

    table = Table(title=f"rag bench cache: {report['questions']} questions, {report['documents']} documents")
    for column in ("", "n", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(column, justify="right" if column else "left")
    for name in ("hit", "miss"):
        stats = report[f"{name}_latency_ms"]
        table.add_row(name, str(stats["n"]), *(str(stats.get(p, "-")) for p in ("p50", "p95", "p99")))
    console.print(table)
    target = report["targets"]["hit_p50_ms"]
    console.print(
        f"hit rate {report['hit_rate']:.1%} (at most {report['most_hit_rate']:.1%} for this log); "
        f"hit p50 {target['value']} ms, target {target['target']} ms"
    )


def run_cache_bench_command(settings: Settings, params: CacheBenchParams, as_json: bool, output: Path | None) -> None:
    """`rag bench cache`: run, write the JSON report (`output`), print a table or (`as_json`) the JSON object."""
    log.setLevel(logging.INFO)
    emit_report(asyncio.run(run_cache_bench(settings, params)), as_json, output, render)
