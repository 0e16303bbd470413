"""How often each retrieval policy gives a cited answer on covered SciFact claims, and how often it refuses questions
the corpus does not cover, with the configured LLM.

Covered: test claims (first `--claims` of `qrels/test.tsv`) with a gold abstract stored. Not covered: the
`evals.off_topic.OFF_TOPIC` questions and test claims with no gold abstract stored (up to `--claims`).
Per policy and set it counts: cited answers (not refused, at least one citation), answers citing a gold abstract,
refusals, typed errors (by kind).

    python -m evals.policy_rates --claims 50 --concurrency 4 [--json]

Needs the whole stack (Triton, Postgres, the LLM) and an ingested corpus.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.config.settings import Policy, Settings
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.errors import AgentError
from evals.off_topic import OFF_TOPIC
from evals.refusal import stored_doc_ids, write_results
from evals.scifact import claim_texts, gold_doc_ids


async def run_set(
    app: RagApp, policy: Policy, questions: list[tuple[str, set[str]]], concurrency: int
) -> dict[str, Any]:
    """Ask every (question, gold doc ids) under `policy`; return counts and mean LLM time (ms)."""
    gate = asyncio.Semaphore(concurrency)
    counts: Counter[str] = Counter()
    llm_ms: list[float] = []

    async def one(question: str, gold: set[str]) -> None:
        async with gate:
            try:
                result = await app.ask(AnswerRequest(question, policy=policy))
            except AgentError as exc:
                counts[f"error:{exc.kind}"] += 1
                return
        llm_ms.append(result.timings_ms["llm"])
        if result.refused:
            counts["refused"] += 1
        elif result.citations:
            counts["cited"] += 1
            if {c.doc_id for c in result.citations} & gold:
                counts["cited_gold"] += 1
        else:
            counts["uncited"] += 1
        if result.searches:
            counts["searched"] += 1

    await asyncio.gather(*(one(q, g) for q, g in questions))
    total = len(questions)
    return {
        "n": total,
        **{key: counts[key] for key in sorted(counts)},
        "cited_rate": round(counts["cited"] / total, 3),
        "refusal_rate": round(counts["refused"] / total, 3),
        "mean_llm_ms": round(sum(llm_ms) / len(llm_ms), 1) if llm_ms else None,
    }


async def measure(settings: Settings, n_claims: int, concurrency: int, policies: list[Policy]) -> dict[str, Any]:
    """Counts per policy for the covered claims, the uncovered claims and the off-topic questions."""
    qrels, claims = gold_doc_ids("test"), claim_texts("test")
    async with RagApp.from_settings(settings.model_copy(update={"answer_cache": False})) as app:  # fresh answers
        stored = await stored_doc_ids(app)
        ids = sorted(qrels, key=int)
        covered = [(claims[q], qrels[q]) for q in ids if qrels[q] & stored][:n_claims]
        uncovered = [(claims[q], qrels[q]) for q in ids if not qrels[q] & stored][:n_claims]
        off_topic = [(q, set[str]()) for q in OFF_TOPIC]
        out: dict[str, Any] = {"llm_model": settings.llm_model, "refusal_min_score": settings.refusal_threshold()}
        for policy in policies:
            start = time.perf_counter()
            out[policy] = {
                "covered_claims": await run_set(app, policy, covered, concurrency),
                "uncovered_claims": await run_set(app, policy, uncovered, concurrency),
                "off_topic": await run_set(app, policy, off_topic, concurrency),
                "wall_s": 0.0,
            }
            out[policy]["wall_s"] = round(time.perf_counter() - start, 1)
    return out


app = typer.Typer(help="Cited-answer and refusal rates of the retrieval policies on SciFact test claims.")


@app.command()
def main(
    claims: Annotated[int, typer.Option("--claims", min=1, help="Covered (and uncovered) test claims to ask.")] = 50,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 4,
    policy: Annotated[list[str] | None, typer.Option("--policy", help="always and/or agentic (default both).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the results JSON here (docs table).")] = None,
) -> None:
    """Print the rates per policy."""
    chosen: list[Policy] = []
    for name in policy or ["always", "agentic"]:
        if name == "always":
            chosen.append("always")
        elif name == "agentic":
            chosen.append("agentic")
        else:
            raise typer.BadParameter(f"{name!r}; expected always or agentic", param_hint="--policy")
    result = asyncio.run(measure(Settings(), claims, concurrency, chosen))
    if out is not None:
        write_results(out, result, f"python -m evals.policy_rates --claims {claims} --concurrency {concurrency}")
    print(json.dumps(result, indent=None if as_json else 2))


if __name__ == "__main__":
    app()
