"""Measure the refusal threshold (`REFUSAL_MIN_SCORE`) on SciFact train claims against the ingested store.

For every train claim, the score the agent's refusal rule uses is computed: the best dense cosine similarity among
the `top_k` passages retrieval returns. Claims split into *covered* (a gold abstract of the claim is stored) and
*not covered* (none is); `OFF_TOPIC` questions are a second not-covered set. The suggested threshold is the
`answer_rate` quantile's complement of the covered scores: the highest value that still answers `answer_rate` of the
covered claims (default 95 %); the output gives the refusal rates it implies on both not-covered sets and the
ROC AUC of the score (the probability that a covered claim scores higher than a not-covered one, ties
half: the Mann–Whitney form of the AUC).

    python -m evals.refusal --top-k 5 [--split train] [--answer-rate 0.95] [--json] [--out results.json]

`--out` writes the calibration with the command, the date and the machine (`evals.machine.machine_info`): the
calibration table of docs/agent.md is generated from `evals/results/refusal-calibration.json`.

Needs the stack (Triton, Postgres) and an ingested corpus; the LLM is not called.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, cast, get_args

import numpy as np
import typer

from agent.config.settings import Settings
from agent.core.app import RagApp
from evals.machine import machine_info
from evals.off_topic import OFF_TOPIC
from evals.scifact import Split, claim_texts, gold_doc_ids
from tools.retrieval_config import RetrievalMode
from tools.stats import percentiles


@dataclass
class Calibration:
    """Scores and the threshold they suggest; rates are fractions (0..1)."""

    split: str
    mode: str
    top_k: int
    covered: int
    not_covered: int
    threshold: float
    answer_rate_covered: float
    refusal_rate_not_covered: float
    refusal_rate_off_topic: float
    auc_covered_vs_not: float
    covered_quantiles: dict[str, float]
    not_covered_quantiles: dict[str, float]
    off_topic_quantiles: dict[str, float]


async def best_scores(app: RagApp, questions: list[str], top_k: int, concurrency: int = 4) -> list[float]:
    """Best dense cosine similarity among the `top_k` retrieved passages of each question (-1 when none has one)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(question: str) -> float:
        async with gate:
            passages = (await app.search(question, top_k)).passages
        return max((p.dense_score for p in passages if p.dense_score is not None), default=-1.0)

    return list(await asyncio.gather(*(one(q) for q in questions)))


async def stored_doc_ids(app: RagApp) -> set[str]:
    """Ids of every stored document."""
    return {d.doc_id for d in await app.list_documents()}


def quantiles(values: list[float]) -> dict[str, float]:
    """5th, 25th, 50th, 75th, 95th percentiles (`tools.stats.percentiles`: numpy, linear), rounded to 4 places."""
    summary = percentiles(values, (5, 25, 50, 75, 95))
    return {key: round(float(value), 4) for key, value in summary.items() if key != "n"}


async def calibrate(
    settings: Settings, split: Split, top_k: int, answer_rate: float, mode: RetrievalMode = "hybrid"
) -> Calibration:
    """Score every claim of `split` and the off-topic questions; pick the threshold (see module docstring).

    Args:
        mode: retrieval mode (the agent uses `hybrid`; `dense` gives the same best score when the best dense hit
            is in the hybrid top k).
    """
    qrels, claims = gold_doc_ids(split), claim_texts(split)
    async with RagApp(settings.model_copy(update={"retrieval_mode": mode, "answer_cache": False})) as app:
        stored = await stored_doc_ids(app)
        ids = sorted(qrels, key=int)
        covered_ids = [q for q in ids if qrels[q] & stored]
        other_ids = [q for q in ids if not qrels[q] & stored]
        covered = await best_scores(app, [claims[q] for q in covered_ids], top_k)
        other = await best_scores(app, [claims[q] for q in other_ids], top_k)
        off_topic = await best_scores(app, list(OFF_TOPIC), top_k)
    if not covered or not other:
        raise ValueError(f"split {split!r}: {len(covered)} covered and {len(other)} not-covered claims; need both")
    threshold = float(np.quantile(np.asarray(covered), 1.0 - answer_rate))
    c, o = np.asarray(covered)[:, None], np.asarray(other)[None, :]
    auc = float(np.mean(c > o) + 0.5 * np.mean(c == o))  # P(covered scores higher), ties count half
    return Calibration(
        split=split,
        mode=mode,
        top_k=top_k,
        covered=len(covered),
        not_covered=len(other),
        threshold=round(threshold, 4),
        answer_rate_covered=round(float(np.mean(np.asarray(covered) >= threshold)), 4),
        refusal_rate_not_covered=round(float(np.mean(np.asarray(other) < threshold)), 4),
        refusal_rate_off_topic=round(float(np.mean(np.asarray(off_topic) < threshold)), 4),
        auc_covered_vs_not=round(auc, 4),
        covered_quantiles=quantiles(covered),
        not_covered_quantiles=quantiles(other),
        off_topic_quantiles=quantiles(off_topic),
    )


def write_results(path: Path, results: dict[str, object], command: str) -> None:
    """Write `results` with the command that produced them, the date (UTC) and the machine, as JSON at `path`."""
    machine = machine_info()
    record = {"command": command, "date": str(machine["date_utc"])[:10], "machine": machine, **results}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


app = typer.Typer(help="Measure REFUSAL_MIN_SCORE on SciFact claims (needs Triton, Postgres, an ingested corpus).")


@app.command()
def main(
    split: Annotated[str, typer.Option("--split", help="qrels split: train (calibration) or test.")] = "train",
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100)] = 5,
    answer_rate: Annotated[float, typer.Option("--answer-rate", min=0.5, max=1.0)] = 0.95,
    mode: Annotated[str, typer.Option("--mode", help="hybrid (as the agent) or dense.")] = "hybrid",
    as_json: Annotated[bool, typer.Option("--json")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the results JSON here.")] = None,
) -> None:
    """Print the suggested threshold and the refusal rates it implies."""
    if split not in get_args(Split):
        raise typer.BadParameter(f"split {split!r}; expected one of {get_args(Split)}", param_hint="--split")
    if mode not in ("hybrid", "dense"):
        raise typer.BadParameter(f"mode {mode!r}; expected hybrid or dense", param_hint="--mode")
    retrieval_mode: RetrievalMode = "dense" if mode == "dense" else "hybrid"
    result = asyncio.run(calibrate(Settings(), cast(Split, split), top_k, answer_rate, retrieval_mode))
    if out is not None:
        write_results(out, asdict(result), f"python -m evals.refusal --top-k {top_k} --split {split}")
    if as_json:
        print(json.dumps(asdict(result)))
    else:
        for key, value in asdict(result).items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    app()
