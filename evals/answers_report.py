"""Readable reports of an answer-eval run: Markdown with a latency CDF per stage and score bars (matplotlib), and
the comparison of two runs (`rag eval compare`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCORE_KEYS = (
    "verdict_accuracy",
    "majority_baseline",
    "citation_precision",
    "citation_recall",
    "refusal_rate",
    "label_verdict_accuracy",
    "sentence_support_rate",
    "sentence_citation_precision",
    "sentence_citation_recall",
)
"""Scores between 0 and 1 (bars and table rows); the support check's are absent when it was off."""

COUNT_KEYS = ("repeated_sentences", "answers_with_repeats", "extractive_answers", "truncated", "errors", "n")
"""Counts in the table."""


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def plot_latency_cdf(records: list[dict[str, Any]], path: Path) -> None:
    """Empirical CDF of each stage's latency (ms, log x-axis) over the successful cases."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4))
    stages: dict[str, list[float]] = {}
    for record in records:
        if record["output"]:
            for stage, ms in record["output"]["timings_ms"].items():
                if not (record["output"]["refused"] and stage.startswith("llm") and ms == 0):
                    stages.setdefault(stage, []).append(float(ms))
    for stage, values in stages.items():
        xs = np.sort(np.asarray(values))
        ax.step(np.maximum(xs, 1e-3), np.arange(1, len(xs) + 1) / len(xs), where="post", label=f"{stage} (n={len(xs)})")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of answers")
    ax.set_title("Latency per stage (empirical CDF)")
    ax.grid(True, alpha=0.3)
    if stages:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_scores(summary: dict[str, Any], path: Path) -> None:
    """Bar chart of the run's scores, the majority-class baseline beside verdict accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k in SCORE_KEYS if summary.get(k) is not None]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bars = ax.bar(
        names, [summary[k] for k in names], color=["#4c72b0" if k != "majority_baseline" else "#aaaaaa" for k in names]
    )
    ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Answer quality, n={summary['n']} ({summary.get('llm_model')})")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_summary(summary: dict[str, Any]) -> str:
    """Markdown tables of the scores and of latency per stage (p50/p95/p99 with n)."""
    lines = ["| metric | value |", "| --- | --- |"]
    lines += [f"| {k} | {_fmt(summary.get(k))} |" for k in (*SCORE_KEYS, *COUNT_KEYS) if k in summary]
    lines += [f"| throughput (answers/s) | {_fmt(summary.get('throughput_rps'), 3)} |"]
    lines += [f"| wall time (s) | {_fmt(summary.get('wall_s'), 1)} |"]
    lines += ["", "| stage | p50 ms | p95 ms | p99 ms | n |", "| --- | --- | --- | --- | --- |"]
    for stage, p in summary["latency_ms"].items():
        cells = " | ".join(_fmt(p.get(k), 1) for k in ("p50", "p95", "p99"))
        lines.append(f"| {stage} | {cells} | {p['n']} |")
    return "\n".join(lines)


def _change_line(record: dict[str, Any]) -> str:
    """One case from feedback: its rating and what changed (retrieved, cited, refusal), for `report.md`."""
    changes = record["changed_since_rated"]
    rating = (record.get("gold") or {}).get("rated", {}).get("rating", "?")
    if not changes["changed"]:
        return f"- `{record['name']}` ({rating}): unchanged"
    parts = []
    for key in ("retrieved_chunk_ids", "cited_doc_ids"):
        diff = changes[key]
        if diff["added"] or diff["removed"]:
            parts.append(f"{key.split('_')[0]} +{diff['added']} -{diff['removed']}")
    refused = changes["refused"]
    if refused["then"] != refused["now"]:
        parts.append(f"refused {refused['then']} → {refused['now']}")
    return f"- `{record['name']}` ({rating}): " + "; ".join(parts)


def write_report(out_dir: Path, summary: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    """Write `latency_cdf.png`, `scores.png` and `report.md` into `out_dir`; return the report's path."""
    plot_latency_cdf(records, out_dir / "latency_cdf.png")
    plot_scores(summary, out_dir / "scores.png")
    failed = [r for r in records if r["error"]]
    text = [
        f"# Answer eval: {summary['n']} SciFact claims, {summary['errors']} of {summary['n']} cases failed",
        "",
        "A failed case scores 0 in every score that applies to it (failed cases count in every denominator).",
        "",
        f"Date {summary['date']}; LLM `{summary['llm_model']}`; embedder `{summary['embedder_model']}`.",
        "",
        markdown_summary(summary),
        "",
        "![latency CDF](latency_cdf.png)",
        "",
        "![scores](scores.png)",
        "",
    ]
    rated = [r for r in records if "changed_since_rated" in r]
    if rated:
        text += ["## What changed since the rated answers", ""] + [_change_line(r) for r in rated] + [""]
    if failed:
        text += ["## Failed cases", ""] + [f"- `{r['name']}`: {r['error']}" for r in failed] + [""]
    path = out_dir / "report.md"
    path.write_text("\n".join(text))
    return path


def load_summary(run: Path) -> dict[str, Any]:
    """`summary.json` of a run directory (or the file itself).

    Raises:
        ValueError: no summary there.
    """
    path = run / "summary.json" if run.is_dir() else run
    if not path.is_file():
        raise ValueError(f"{run}: no summary.json (expected a directory written by `rag eval answers --out`)")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any, float | None]]:
    """Rows (metric, A, B, B - A) for the scores and each stage's p50/p95 latency."""
    rows: list[tuple[str, Any, Any, float | None]] = []

    def add(name: str, va: Any, vb: Any) -> None:
        delta = vb - va if isinstance(va, int | float) and isinstance(vb, int | float) else None
        rows.append((name, va, vb, delta))

    for key in (*SCORE_KEYS, "errors", "throughput_rps"):
        add(key, a.get(key), b.get(key))
    for stage in sorted(set(a.get("latency_ms", {})) | set(b.get("latency_ms", {}))):
        for p in ("p50", "p95"):
            add(
                f"latency {stage} {p} (ms)",
                a["latency_ms"].get(stage, {}).get(p),
                b["latency_ms"].get(stage, {}).get(p),
            )
    return rows
