"""`rag bench support`: what the per-sentence support check adds to an answer, and the verifier's throughput on
Triton.

The answers: the local model's real answers to SciFact test claims, as the stored `rag eval answers` run recorded
them (`evals/results/answers-scifact-test/results.json`: `generated`, the model's text before the check, where the
run had the check on, else `answer`), each cut to its first
`max_sentences` sentences. For each, the claim is searched with the app's retrieval over the running stack (the
quickstart's SciFact store) for `top_k` passages, then `SupportChecker.check` runs on (claim, answer, passages)
exactly as the answer path runs it: candidates picked by the settings' `SUPPORT_CANDIDATES_BY` (BM25, or the
interactive embedder on Triton), the chosen pairs classified by the verifier on Triton. Reported, one answer at a
time (what one user waits): the check's added latency p50/p95/p99 (ms, `time.perf_counter` around `check`), and
within it the candidate step and the verifier call (ms), sentences and pairs per answer. Then the verifier alone:
the answers' pairs sent as one request per answer, `concurrency` answers at once, for its throughput (pairs/s) at
each concurrency.

Target (issue "Every sentence held to its source"): added latency p95 ≤ 150 ms per answer (5 passages, up to 8
sentences) on this CPU.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.config.settings import Settings
from evals.machine import machine_info
from evals.plots import emit_report
from tools.sentences import split_sentences
from tools.stats import percentiles
from tools.support import PairClassifier, SentenceSimilarity

ANSWERS = Path(__file__).resolve().parent / "results" / "answers-scifact-test" / "results.json"
"""The stored answer-eval run whose answers are checked."""

TARGETS = {"added_p95_ms": "<= 150"}
"""The support check's latency target per answer (5 passages, up to 8 sentences)."""


@dataclass(frozen=True)
class SupportBenchParams:
    """What one `rag bench support` run does.

    Attributes:
        answers: answers checked (the first of the stored run that are not refusals).
        top_k: passages retrieved per claim.
        max_sentences: each answer cut to its first this many sentences.
        concurrency: answers whose verifier requests run at once, for the throughput part (each a point).
        warmup: answers checked first and not measured.
    """

    answers: int = 100
    top_k: int = 5
    max_sentences: int = 8
    concurrency: tuple[int, ...] = (1, 4, 16)
    warmup: int = 5


class _TimedSimilarity:
    """The candidate step's similarity, timing each call (ms) into `times`."""

    def __init__(self, inner: SentenceSimilarity) -> None:
        self.inner, self.times = inner, list[float]()

    async def scores(self, queries: Sequence[str], sentences: Sequence[str]) -> npt.NDArray[np.float32]:
        start = time.perf_counter()
        try:
            return await self.inner.scores(queries, sentences)
        finally:
            self.times.append((time.perf_counter() - start) * 1000)


class _TimedClassifier:
    """The verifier, timing each call (ms) into `times` and keeping the pairs of the last call."""

    def __init__(self, inner: PairClassifier) -> None:
        self.inner, self.times = inner, list[float]()
        self.last: list[tuple[str, str]] = []

    async def classify(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        self.last = list(pairs)
        start = time.perf_counter()
        try:
            return await self.inner.classify(pairs)
        finally:
            self.times.append((time.perf_counter() - start) * 1000)


def stored_answers(path: Path, limit: int, max_sentences: int) -> list[tuple[str, str]]:
    """(claim, answer cut to `max_sentences` sentences) of the first `limit` answered, non-refused cases of a stored
    answer-eval run.

    Raises:
        FileNotFoundError: no such run file.
    """
    records = json.loads(path.read_text())
    out: list[tuple[str, str]] = []
    for record in records:
        output = record.get("output")
        if not output or output.get("refused") or not output.get("answer", "").strip():
            continue
        text = output.get("generated") or output["answer"]  # the model's text, before any support check
        spans = split_sentences(text)[:max_sentences]
        out.append((record["inputs"]["claim"], text[: spans[-1][1]] if spans else text))
        if len(out) == limit:
            break
    return out


async def run_support_bench(settings: Settings, params: SupportBenchParams) -> dict[str, Any]:
    """Measure the check on the running stack (module docstring).

    Raises:
        tools.errors.EmbedderError / tools.errors.StoreError: the stack is down; FileNotFoundError: no stored run.
    """
    from agent.core.wiring import Clients, build_retriever, build_support_checker, build_verifier

    cases = stored_answers(ANSWERS, params.answers + params.warmup, params.max_sentences)
    async with Clients(settings) as clients, build_verifier(settings) as verifier:
        retriever = build_retriever(clients.embedder, clients.store, settings, clients.reranker)
        classifier = _TimedClassifier(verifier)
        checker = build_support_checker(settings, clients.embedder, classifier)
        similarity = _TimedSimilarity(checker.similarity)
        checker.similarity = similarity
        added, candidates_ms, verify_ms, sentences, pairs = [], [], [], [], []
        pair_sets: list[list[tuple[str, str]]] = []
        for i, (claim, answer) in enumerate(cases):
            found = await retriever.search(claim, params.top_k)
            similarity.times.clear()
            classifier.times.clear()
            start = time.perf_counter()
            checked = await checker.check(claim, answer, found.passages, "flag")
            elapsed = (time.perf_counter() - start) * 1000
            if i < params.warmup:
                continue
            added.append(elapsed)
            candidates_ms.append(sum(similarity.times))
            verify_ms.append(sum(classifier.times))
            sentences.append(checked.report.supported + checked.report.unsupported)
            pairs.append(len(classifier.last) if classifier.times else 0)
            if classifier.last:
                pair_sets.append(classifier.last)
        throughput = [await _throughput(verifier, pair_sets, c) for c in params.concurrency]
    p95 = percentiles(added).get("p95")
    return {
        "command": f"rag bench support --answers {params.answers} --top-k {params.top_k}",
        "params": asdict(params),
        "machine": machine_info(),
        "verifier_model": settings.support_model,
        "candidates_by": settings.support_candidates_by,
        "embedder_model": settings.embedder_interactive_model,
        "answers_measured": len(added),
        "added_ms": _rounded(percentiles(added)),
        "candidates_ms": _rounded(percentiles(candidates_ms)),
        "verify_ms": _rounded(percentiles(verify_ms)),
        "sentences_per_answer": _rounded(percentiles([float(s) for s in sentences])),
        "pairs_per_answer": _rounded(percentiles([float(p) for p in pairs])),
        "verifier_throughput": throughput,
        "targets": TARGETS,
        "met": {"added_p95_ms": p95 is not None and p95 <= 150.0},
    }


async def _throughput(
    verifier: PairClassifier, pair_sets: Sequence[list[tuple[str, str]]], concurrency: int
) -> dict[str, Any]:
    """Pairs per second when the answers' verifier requests run `concurrency` at a time."""
    limiter = asyncio.Semaphore(concurrency)

    async def one(pairs: list[tuple[str, str]]) -> None:
        async with limiter:
            await verifier.classify(pairs)

    start = time.perf_counter()
    await asyncio.gather(*(one(p) for p in pair_sets))
    wall = time.perf_counter() - start
    total = sum(len(p) for p in pair_sets)
    return {
        "concurrency": concurrency,
        "requests": len(pair_sets),
        "pairs": total,
        "pairs_per_s": round(total / wall, 1) if wall > 0 else None,
    }


def _rounded(values: dict[str, float | int]) -> dict[str, float | int]:
    return {k: v if k == "n" else round(float(v), 1) for k, v in values.items()}


def render(report: dict[str, Any], console: Any) -> None:
    """The report as a few lines."""
    added = report["added_ms"]
    console.print(
        f"support check, {report['answers_measured']} answers: added p50 {added.get('p50')} ms, p95 {added.get('p95')} "
        f"ms, p99 {added.get('p99')} ms (target p95 <= 150 ms: {'met' if report['met']['added_p95_ms'] else 'not met'})"
    )
    console.print(
        f"  candidates ({report['candidates_by']}) p50 {report['candidates_ms'].get('p50')} ms, verify p50 "
        f"{report['verify_ms'].get('p50')} ms; sentences p50 {report['sentences_per_answer'].get('p50')}, pairs p50 "
        f"{report['pairs_per_answer'].get('p50')}"
    )
    for point in report["verifier_throughput"]:
        console.print(f"  verifier at concurrency {point['concurrency']}: {point['pairs_per_s']} pairs/s")


def run_support_bench_command(params: SupportBenchParams, as_json: bool, output: Path | None) -> None:
    """`rag bench support`: run and print (and write) the report."""
    report = asyncio.run(run_support_bench(Settings(), params))
    emit_report(report, as_json, output, render)
