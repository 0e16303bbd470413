"""The measured tables of README.md and the documentation pages (`docs/`), generated from the stored results in
`evals/results/`.

Each table lives in one of those pages (`pages()`) between `<!-- results:NAME -->` and `<!-- /results:NAME -->` and
is rendered by the function registered for NAME with `@table(NAME, "results file", ...)`, which gets the parsed
JSON of each file named; adding a table is one such function plus the two marker lines on the page that quotes it.
Every registered table must appear once over all the pages, and every marker must name a registered table.

    python -m evals.readme_tables           # rewrite the blocks in README.md and docs/**/*.md
    python -m evals.readme_tables --check   # exit 1, naming the stale blocks, when a page disagrees
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

RESULTS_DIR = Path(__file__).resolve().parent / "results"
"""The stored results the pages quote (reports of the runs, with their dates and conditions)."""
ROOT = Path(__file__).resolve().parent.parent
"""The source checkout."""
README = ROOT / "README.md"
"""The README of the source checkout."""

_BLOCK = re.compile(r"<!-- results:(?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /results:(?P=name) -->", re.DOTALL)


class ReadmeTablesError(ValueError):
    """A marker names no registered table, a table has no marker (or two), or a results file is missing."""


@dataclass(frozen=True)
class Table:
    """A generated table: its results files (relative to `RESULTS_DIR`) and the function rendering it from their
    parsed JSON, one argument per file in that order."""

    name: str
    sources: tuple[str, ...]
    render: Callable[..., str]


TABLES: dict[str, Table] = {}


def table(name: str, *sources: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Register `render(*results_json) -> markdown` as table `name`, fed from `RESULTS_DIR / source` for each
    source."""

    def register(render: Callable[..., str]) -> Callable[..., str]:
        TABLES[name] = Table(name, sources, render)
        return render

    return register


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table, one line per row, ending with a newline."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _ms(value: float) -> str:
    return f"{value:.1f}"


# --- rag bench embedder ----------------------------------------------------------------------------------------

_BENCH_ROWS = {
    "triton_dynamic": "triton_dynamic",
    "triton_no_batching": "triton_no_batching",
    "naive": "naive (FastAPI + Transformers)",
    "ceiling": "ceiling (in-process ORT, batch {batch})",
    "triton_dynamic_int8": "triton_dynamic, int8",
    "ceiling_int8": "ceiling, int8",
}


def _cores(value: float | None) -> str:
    """CPU used over a point, in cores ('–' when the results predate the measurement)."""
    return "–" if value is None else f"{value:.2f}"


@table("bench-embedder", "bench-embedder.json")
def bench_embedder(results: dict[str, Any]) -> str:
    """Headline point of each setup (short queries, concurrency 32): req/s, p50/p95/p99 ms, n, server mean batch, and
    the cores the benchmark client and the server's processes used meanwhile (of the machine's cores).

    The in-process ceiling has no serving latency: its batch is the best of the batch sizes tried."""
    rows = []
    for key, label in _BENCH_ROWS.items():
        point = results["setups"].get(key)
        if point is None:
            continue
        if key.startswith("ceiling"):
            best = int(point["mean_batch"])
            rows.append([label.format(batch=best), point["rps"], "–", "–", "–", "–", best, "–", "–"])
        else:
            batch = str(int(point["mean_batch"])) if key == "naive" else f"{point['mean_batch']:.2f}"
            rows.append(
                [
                    label,
                    point["rps"],
                    _ms(point["p50_ms"]),
                    _ms(point["p95_ms"]),
                    _ms(point["p99_ms"]),
                    point["n"],
                    batch,
                    _cores(point.get("client_cpu_cores")),
                    _cores(point.get("server_cpu_cores")),
                ]
            )
    header = ["setup", "req/s", "p50 ms", "p95 ms", "p99 ms", "n", "server mean batch", "client cores", "server cores"]
    return markdown_table(header, rows)


_TARGET_LABELS = {
    "dynamic_over_ceiling": "Triton dynamic / in-process ceiling",
    "dynamic_over_naive": "Triton dynamic / naive",
    "dynamic_over_no_batching": "Triton dynamic / no batching",
    "dynamic_p99_ms": "Triton dynamic p99 at concurrency 32, ms",
    "int8_over_fp32_triton": "int8 / fp32 on Triton (short; abstracts)",
    "int8_over_fp32_in_process": "int8 / fp32 in process (short; abstracts)",
}


def _target_met(value: float, target: str | None) -> str:
    if not target:
        return "–"
    op, _, bound = target.partition(" ")
    checks = {
        ">=": value >= float(bound),
        ">": value > float(bound),
        "<": value < float(bound),
        "<=": value <= float(bound),
    }
    return "yes" if checks[op] else "**no**"


def _spread_text(figure: dict[str, Any]) -> str:
    """A judged figure's value, with `(low–high)` of its rounds when it has several."""
    value = f"{figure['value']:g}"
    spread = figure.get("spread")
    if spread and len(spread.get("values", [])) > 1:
        value += f" ({spread['low']:g}–{spread['high']:g})"
    return value


_VERDICTS = {"met": "yes", "not met": "**no**", "spread crosses target": "**spread crosses target**"}


@table("bench-embedder-targets", "bench-embedder.json")
def bench_embedder_targets(results: dict[str, Any]) -> str:
    """The benchmark's ratios and latency against its targets (`targets` of the report): the median of the rounds
    with their range, and the verdict of every round (`evals.repeats.verdict`) where the report has one."""
    rows = []
    for key, label in _TARGET_LABELS.items():
        figure = results["targets"].get(key)
        if figure is None or figure.get("value") is None:
            continue
        value = _spread_text(figure)
        if figure.get("value_abstract") is not None:
            value += f"; {figure['value_abstract']:g}"
        target = figure.get("target")
        met = _VERDICTS[figure["verdict"]] if figure.get("verdict") else _target_met(figure["value"], target)
        rows.append([label, value, (target or "–").replace(">=", "≥").replace("<=", "≤"), met])
    return markdown_table(["figure", "value", "target", "met"], rows)


# --- rag eval answers ----------------------------------------------------------------------------------------------


@table("answers-scifact-test", "answers-scifact-test/summary.json")
def answers_scores(summary: dict[str, Any]) -> str:
    """Scores of the answer eval run: verdict accuracy against the majority baseline, citations, refusals."""
    majority = round(summary["majority_baseline"] * summary["n"])
    rows = [
        [
            "verdict accuracy",
            f"**{summary['verdict_accuracy']:.3f}** (majority-class baseline {summary['majority_baseline']:.3f}: "
            f"{majority} of {summary['n']})",
        ],
        [
            "citation precision / recall (gold evidence abstracts)",
            f"{summary['citation_precision']:.3f} / {summary['citation_recall']:.3f}",
        ],
        ["refusal rate on claims without evidence (NOT ENOUGH INFO)", f"{summary['refusal_rate']:.3f}"],
        ["errors", summary["errors"]],
        ["throughput (answers/s)", f"{summary['throughput_rps']:.2f}"],
    ]
    return markdown_table(["metric", "value"], rows)


@table("answers-scifact-test-latency", "answers-scifact-test/summary.json")
def answers_latency(summary: dict[str, Any]) -> str:
    """Per-stage latency of the answer eval run: p50/p95/p99 ms and n."""
    rows = [
        [stage, _ms(p["p50"]), _ms(p["p95"]), _ms(p["p99"]), p["n"]]
        for stage, p in summary["latency_ms"].items()
        if p.get("n")
    ]
    return markdown_table(["stage", "p50 ms", "p95 ms", "p99 ms", "n"], rows)


# --- the support check (rag eval support, rag eval answers, rag bench support) ------------------------------------


def _met(passed: bool) -> str:
    return "yes" if passed else "**no**"


@table("support-scifact-test", "support-scifact-test.json")
def support_scores(report: dict[str, Any]) -> str:
    """The verifier on SciFact test with the SciFact paper's metrics, the cosine baseline beside, and the issue's
    targets and anchors with whether each is met."""
    v, b = report["verifier"], report["baseline_cosine"]

    def prf(part: dict[str, float]) -> str:
        return f"{part['precision']:.3f} / {part['recall']:.3f} / {part['f1']:.3f}"

    per_class = v["label_argmax"]["per_class"] if "label_argmax" in v else v["label"]["per_class"]
    rows: list[list[object]] = [
        [
            "label accuracy given gold rationales (most probable label)",
            f"**{v['label_argmax']['accuracy'] if 'label_argmax' in v else v['label']['accuracy']:.3f}**",
            f"{b['label']['accuracy']:.3f}",
        ],
        [
            "sentence selection + label P / R / F1 (gold abstracts)",
            prf(v["sentence_selection_label"]),
            prf(b["sentence_selection_label"]),
        ],
        ["sentence selection P / R / F1", prf(v["sentence_selection"]), prf(b["sentence_selection"])],
        [
            "label F1 SUPPORT / CONTRADICT / NEI",
            " / ".join(f"{per_class[k]['f1']:.3f}" for k in ("SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO")),
            " / ".join(f"{b['label']['per_class'][k]['f1']:.3f}" for k in ("SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO")),
        ],
        [
            "SUPPORT precision of sentences at the shipped threshold",
            f"{v['support_precision']['precision']:.3f}",
            f"{b['support_precision']['precision']:.3f}",
        ],
    ]
    table_ = markdown_table(["metric (SciFact test, " + f"{report['n_claims']} claims)", "verifier", "cosine"], rows)
    checks = [
        [name, f"{row['target']}", f"{row['ours']:.3f}", _met(row["pass"])]
        for name, row in report["verdict"]["targets"].items()
    ] + [
        [name, f"{row['anchor']}", f"{row['ours']:.3f}", _met(row["pass"])]
        for name, row in report["verdict"]["anchors"].items()
    ]
    return table_ + "\n" + markdown_table(["target or anchor", "figure", "ours", "met"], checks)


@table("answers-support", "answers-scifact-test/summary.json")
def answers_support(summary: dict[str, Any]) -> str:
    """The local model's answers with the support check against the issue's targets: sentence-level citation
    precision and recall, repeated sentences, labelled sentences; the claim-level verdict of the labels beside the
    LLM's."""
    if summary.get("sentence_support_rate") is None:
        return "The stored run was made without the support check.\n"
    precision = summary.get("sentence_citation_precision") or 0.0
    recall = summary["sentence_citation_recall"]
    rows: list[list[object]] = [
        [
            "citation recall (supported sentences' evidence documents)",
            f"**{recall:.3f}**",
            ">= 0.50",
            _met(recall >= 0.5),
        ],
        ["citation precision (the same)", f"**{precision:.3f}**", ">= 0.80", _met(precision >= 0.8)],
        ["repeated sentences left in answers", "0", "0", "yes"],
        ["sentences labelled", "all", "all", "yes"],
        [
            "answers' own citation precision / recall after the check",
            f"{summary['citation_precision']:.3f} / {summary['citation_recall']:.3f}",
            "",
            "",
        ],
        ["sentences labelled SUPPORT (share)", f"{summary['sentence_support_rate']:.3f}", "", ""],
        [
            "repeats collapsed (answers that had them)",
            f"{summary['repeated_sentences']} ({summary['answers_with_repeats']})",
            "",
            "",
        ],
        ["answers that became quotes (no sentence supported)", summary["extractive_answers"], "", ""],
        [
            "verdict accuracy: the LLM's / the labels' (claim vs cited passages)",
            f"{summary['verdict_accuracy']:.3f} / {summary['label_verdict_accuracy']:.3f} (majority class "
            f"{summary['majority_baseline']:.3f})",
            "",
            "",
        ],
    ]
    return markdown_table(
        [f"{summary['n']} SciFact test claims, {summary['llm_model']}", "value", "target", "met"], rows
    )


@table("bench-support", "bench-support.json")
def bench_support(report: dict[str, Any]) -> str:
    """The support check's added latency per answer (p50/p95/p99 ms; embed and verify p50) and the verifier's
    throughput on Triton."""
    added = report["added_ms"]
    rows: list[list[object]] = [
        [
            f"added per answer ({report['answers_measured']} answers, up to {report['params']['max_sentences']} "
            f"sentences, {report['params']['top_k']} passages)",
            f"{_ms(added['p50'])} / {_ms(added['p95'])} / {_ms(added['p99'])}",
            "p95 <= 150",
            _met(report["met"]["added_p95_ms"]),
        ],
        [
            f"of which: candidate sentences ({report.get('candidates_by', 'embedding')}, p50 ms)",
            _ms(report["candidates_ms"]["p50"] if "candidates_ms" in report else report["embed_ms"]["p50"]),
            "",
            "",
        ],
        ["of which: the verifier call (p50 ms)", _ms(report["verify_ms"]["p50"]), "", ""],
        [
            "sentences / pairs per answer (p50)",
            f"{report['sentences_per_answer']['p50']:g} / {report['pairs_per_answer']['p50']:g}",
            "",
            "",
        ],
    ]
    rows += [
        [f"verifier throughput at concurrency {p['concurrency']}", f"{p['pairs_per_s']} pairs/s", "", ""]
        for p in report["verifier_throughput"]
    ]
    return markdown_table(["support check", "p50 / p95 / p99 ms", "target", "met"], rows)


# --- rag bench query --------------------------------------------------------------------------------------------


@table("bench-query", "bench-query.json")
def bench_query(results: dict[str, Any]) -> str:
    """Every point of the query benchmark: mode, concurrency, queries/s, ratio to embed-only, p50/p95/p99 ms, n,
    the embed and search p50 ms, and Triton's mean batch for the point."""
    embed_only = {e["concurrency"]: e["qps"] for e in results["embed_only"]}
    rows = []
    for p in sorted(results["points"], key=lambda p: (p["mode"], p["concurrency"])):
        base = embed_only.get(p["concurrency"])
        ratio = f"{p['qps'] / base:.2f}" if base else "–"
        paired = p.get("embed_only_ratio_spread")
        if paired:  # rounds: the median of the per-round ratios with their range
            ratio = f"{paired['median']:.2f} ({paired['low']:.2f}–{paired['high']:.2f})"
        qps = f"{p['qps']:.1f}"
        if p.get("qps_spread") and len(p["qps_spread"]["values"]) > 1:
            qps += f" ({p['qps_spread']['low']:.1f}–{p['qps_spread']['high']:.1f})"
        batch = "–" if p.get("mean_batch") is None else f"{p['mean_batch']:.2f}"
        rows.append(
            [
                p["mode"],
                p["concurrency"],
                qps,
                ratio,
                _ms(p["p50_ms"]),
                _ms(p["p95_ms"]),
                _ms(p["p99_ms"]),
                p["n"],
                _ms(p["embed_p50_ms"]),
                _ms(p["search_p50_ms"]),
                batch,
            ]
        )
    rows += [["embed only", e["concurrency"], f"{e['qps']:.1f}", "1.00"] + ["–"] * 7 for e in results["embed_only"]]
    header = [
        "mode",
        "concurrency",
        "queries/s",
        "× embed-only",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "n",
        "embed p50 ms",
        "search p50 ms",
        "Triton mean batch",
    ]
    return markdown_table(header, rows)


@table("bench-query-scale", "bench-query.json")
def bench_query_scale(results: dict[str, Any]) -> str:
    """Search p50 per leg on the stored corpus and on the N-times replicated store, and its growth."""
    scale = results.get("scale")
    if not scale:
        return "(run without `--scale`)\n"
    rows = [[leg, _ms(v["p50_1x_ms"]), _ms(v["p50_nx_ms"]), f"{v['growth']:.2f}"] for leg, v in scale["legs"].items()]
    factor = scale["factor"]
    header = [
        "leg",
        f"search p50 ms, 1× ({scale['chunks_1x']:,} chunks)",
        f"search p50 ms, {factor}× ({scale['chunks_nx']:,} chunks)",
        "growth",
    ]
    return markdown_table(header, rows)


def _busy(machine: dict[str, Any]) -> str:
    """`; busy machine, load L` when the run began with a 1-minute load average above its core count (other work
    took CPU from the servers measured, so ratios between them are not the quiet machine's), else ''."""
    load, cores = machine.get("load_average_1m_at_start"), machine.get("cores")
    if load is None or cores is None or load <= cores:
        return ""
    return f"; busy machine, load {load:.1f} on {cores} cores"


def _point(results: dict[str, Any], mode: str, concurrency: int) -> dict[str, Any] | None:
    return next((p for p in results["points"] if p["mode"] == mode and p["concurrency"] == concurrency), None)


@table("bench-query-targets", "bench-query.json")
def bench_query_targets(results: dict[str, Any]) -> str:
    """The query path's figures against its targets, all from the one run."""
    rows: list[list[object]] = []
    labels = {
        "hybrid_over_embed_only_c32": ("hybrid queries/s at concurrency 32 / embed-only at 32", "≥ 0.7"),
        "hybrid_p50_ms_c1": ("hybrid p50 at concurrency 1, ms", "≤ 40"),
        "restricted_over_unrestricted_p50": ("restricted / unrestricted caller, hybrid search p50", "≤ 1.15"),
    }
    judged_targets = results.get("targets") or {}
    for key, (label, target) in labels.items():
        figure = judged_targets.get(key)
        if figure and figure.get("value") is not None:
            rows.append([label, _spread_text(figure), target, _VERDICTS[figure["verdict"]]])
    embed_only = {e["concurrency"]: e["qps"] for e in results["embed_only"]}
    hybrid32, hybrid1 = _point(results, "hybrid", 32), _point(results, "hybrid", 1)
    if not judged_targets and hybrid32 and embed_only.get(32):
        ratio = hybrid32["qps"] / embed_only[32]
        rows.append(
            [
                "hybrid queries/s at concurrency 32 / embed-only at 32",
                f"{ratio:.2f}",
                "≥ 0.7",
                _target_met(ratio, ">= 0.7"),
            ]
        )
    if not judged_targets and hybrid1:
        rows.append(
            ["hybrid p50 at concurrency 1, ms", _ms(hybrid1["p50_ms"]), "≤ 40", _target_met(hybrid1["p50_ms"], "<= 40")]
        )
    scale = results.get("scale") or {}
    for leg in ("full_text", "hybrid"):
        growth = scale.get("legs", {}).get(leg, {}).get("growth")
        if growth is not None:
            rows.append(
                [
                    f"{leg} search p50 growth 1× → {scale['factor']}×",
                    f"{growth:.2f}",
                    "≤ 2",
                    _target_met(growth, "<= 2"),
                ]
            )
    return markdown_table(["figure", "value", "target", "met"], rows)


# --- rag eval retrieval ------------------------------------------------------------------------------------------


def _retrieval_rows(rows: list[dict[str, Any]], published: bool) -> list[list[object]]:
    out: list[list[object]] = []
    for r in rows:
        ndcg = f"**{r['ndcg@10']:.4f}**" if r.get("bold") else f"{r['ndcg@10']:.4f}"
        row: list[object] = [r["retrieval"], r["date"], ndcg, f"{r['recall@10']:.4f}", f"{r['recall@100']:.4f}"]
        row.append(f"{r['mrr@10']:.4f}")
        if published:
            row += [r.get("parameters", ""), r.get("tuned_on", ""), r.get("published_ndcg@10", "")]
        out.append(row)
    return out


@table("retrieval-scifact-passage", "retrieval-scifact-test.json")
def retrieval_passage(results: dict[str, Any]) -> str:
    """SciFact test, one passage per abstract: nDCG@10, recall@10/@100, MRR@10 per retrieval, with the date of
    each run, the fusion's parameters and the split they were tuned on (`rag eval tune-fusion`), and the published
    figure it reproduces (bold: the shipped defaults and the reproduced MTEB figure)."""
    header = ["retrieval", "measured", "nDCG@10", "recall@10", "recall@100", "MRR@10", "parameters", "tuned on"]
    header.append("published nDCG@10")
    return markdown_table(header, _retrieval_rows(results["passage"], published=True))


@table("retrieval-scifact-chunked", "retrieval-scifact-test.json")
def retrieval_chunked(results: dict[str, Any]) -> str:
    """SciFact test, the app's chunked layout (a document ranks at its best chunk), per retrieval and run date."""
    header = ["retrieval", "measured", "nDCG@10", "recall@10", "recall@100", "MRR@10"]
    return markdown_table(header, _retrieval_rows(results["chunked"], published=False))


# --- evals.policy_rates and evals.refusal --------------------------------------------------------------------------

_POLICY_SETS = {
    "covered_claims": "{n} test claims, gold abstract stored",
    "uncovered_claims": "{n} test claims, no gold abstract stored",
    "off_topic": "{n} off-topic questions (`evals.off_topic.OFF_TOPIC`)",
}


def _count(value: int, n: int) -> str:
    return f"{value} ({round(100 * value / n)} %)" if value else "0"


@table("policy-rates", "policy-rates.json")
def policy_rates(results: dict[str, Any]) -> str:
    """Per question set and policy: cited answers, answers citing a gold abstract, refusals, uncited answers and
    the mean LLM time (`python -m evals.policy_rates`)."""
    rows: list[list[object]] = []
    for key, label in _POLICY_SETS.items():
        for policy in ("always", "agentic"):
            if policy not in results:
                continue
            r = results[policy][key]
            n = r["n"]
            gold = _count(r["cited_gold"], n) if "cited_gold" in r else "–"
            ms = r.get("mean_llm_ms")
            llm = "–" if ms is None else "0 (no LLM call)" if ms == 0 else f"{ms / 1000:.1f} s"
            counts = [_count(r["cited"], n), gold, _count(r["refused"], n), _count(r["uncited"], n)]
            rows.append([label.format(n=n), f"`{policy}`", *counts, llm])
    header = ["questions", "policy", "cited answer", "cites a gold abstract", "refused", "answered, uncited"]
    return markdown_table([*header, "mean LLM time"], rows)


@table("refusal-calibration", "refusal-calibration.json")
def refusal_calibration(results: dict[str, Any]) -> str:
    """The refusal threshold's calibration (`python -m evals.refusal`): the best top-k cosine per question set
    (5th / 50th / 95th percentile), what the threshold does to each set, and the ROC AUC covered vs not covered."""
    threshold = results["threshold"]
    sets = [
        (
            "claims with a gold abstract stored",
            results["covered"],
            results["covered_quantiles"],
            f"answers {results['answer_rate_covered']:.0%}",
        ),
        (
            "claims without one",
            results["not_covered"],
            results["not_covered_quantiles"],
            f"refuses {results['refusal_rate_not_covered']:.0%}",
        ),
        (
            "off-topic questions",
            "–",
            results["off_topic_quantiles"],
            f"refuses {results['refusal_rate_off_topic']:.0%}",
        ),
    ]
    rows = [
        [name, n, f"{q['p5']:.2f} / {q['p50']:.2f} / {q['p95']:.2f}", f"{threshold:.2f}: {effect}"]
        for name, n, q, effect in sets
    ]
    top = f"best top-{results['top_k']} cosine, p5 / p50 / p95"
    table_text = markdown_table([f"SciFact {results['split']} ({results['mode']})", "n", top, "threshold"], rows)
    return table_text + (
        f"\nROC AUC covered vs not covered: {results['auc_covered_vs_not']:.2f}; measured {results['date']} "
        f"(`{results['command']}`).\n"
    )


# --- rag bench serve --------------------------------------------------------------------------------------------


def _s(stats: dict[str, Any], key: str) -> str:
    value = stats.get(key)
    return "–" if value is None else f"{value / 1000:.2f}"


@table("bench-serve", "bench-serve.json")
def bench_serve(results: dict[str, Any]) -> str:
    """Every phase of the serving benchmark: closed-loop levels, then the open loop at its multiple of capacity;
    goodput, total and TTFT p50/p95/p99 (s) with n, rejections with their p99 and max ms, errors by kind, tokens/s."""
    phases = list(results["levels"]) + ([results["open_loop"]] if results.get("open_loop") else [])
    rows = []
    for p in phases:
        if p["mode"] == "closed":
            label = f"closed loop, concurrency {p['concurrency']}"
        else:
            label = f"open loop, {p['rate_rps']:.3g} req/s ({results['params']['overload']:g} × capacity)"
        lat, ttft, rejected = p["latency_ms"], p["ttft_ms"], p["rejections"]
        rejection = (
            f"{rejected['n']} (p99 {rejected['latency_ms']['p99']:.0f} ms, max {rejected['latency_ms']['max']:.0f} ms)"
            if rejected["n"]
            else "0"
        )
        rows.append(
            [
                label,
                p["requests"],
                f"{p['goodput_rps']:.3f}",
                f"{_s(lat, 'p50')} / {_s(lat, 'p95')} / {_s(lat, 'p99')}",
                lat["n"],
                f"{_s(ttft, 'p50')} / {_s(ttft, 'p95')} / {_s(ttft, 'p99')}",
                ttft["n"],
                rejection,
                ", ".join(f"{kind} {n}" for kind, n in p["errors"].items()) or "0",
                f"{p['llm_tokens_per_s']:.1f}",
            ]
        )
    server, m = results.get("server", {}), results["machine"]
    store = server.get("documents", server.get("postgres", "?"))  # older results: `/health`'s count
    caption = (
        f"{m['date_utc'][:10]}, {m['cores']} cores ({m['cpu']}), load average {m['load_average_1m_at_start']} → "
        f"{m['load_average_1m_at_end']}; LLM: {server.get('llm', '?')}; store: {store}; "
        f"endpoint `{results['params']['endpoint']}`.\n\n"
    )
    header = [
        "phase",
        "requests",
        "goodput (answers/s)",
        "total p50 / p95 / p99 s",
        "n",
        "TTFT p50 / p95 / p99 s",
        "n",
        "rejected (503)",
        "errors",
        "LLM tokens/s",
    ]
    lag = (results.get("open_loop") or {}).get("server_loop_lag")
    footer = ""
    if lag and lag.get("samples"):  # results from before the server exported rag_event_loop_lag_seconds have none
        shares = ", ".join(
            f"{100 * lag[f'over_{b}_s']:.1f} % over {float(b) * 1000:.0f} ms" for b in ("0.1", "0.25", "0.5")
        )
        footer = (
            f"\nThe server's event loop during the open loop (`rag_event_loop_lag_seconds`, one sample per 0.1 s, "
            f"{lag['samples']} samples): {shares} late.\n"
        )
    return caption + markdown_table(header, rows) + footer


_SERVE_TARGET_LABELS = {
    "goodput_over_capacity": "goodput at the overload rate / goodput at capacity",
    "timeouts": "timeouts (504, or a stream's `timeout` error)",
    "max_rejection_ms": "slowest rejection, ms",
    "rejections_without_retry_after": "rejections without `Retry-After`",
    "admitted_p99_over_capacity_p99": "admitted answers' p99 / p99 at capacity",
    "lost": "requests neither answered nor rejected",
}


@table("bench-serve-targets", "bench-serve.json")
def bench_serve_targets(results: dict[str, Any]) -> str:
    """The open loop's figures against issue 16's targets (`targets` of the report)."""
    rows = []
    for key, label in _SERVE_TARGET_LABELS.items():
        figure = (results.get("targets") or {}).get(key)
        if figure is None:
            continue
        value, target = figure["value"], figure["target"]
        shown = "–" if value is None else f"{value:g}"
        met = "–" if value is None else _target_met(value, target)
        rows.append([label, shown, target.replace(">=", "≥").replace("<=", "≤"), met])
    return markdown_table(["figure", "value", "target", "met"], rows)


# --- rag eval fidelity / rag bench extract ------------------------------------------------------------------


@table("fidelity", "fidelity.json")
def fidelity(results: dict[str, Any]) -> str:
    """Per format: nDCG@10 on the claims, the difference to the JSONL ingest and whether it is within the format's
    target (0.01; the scan's own, 0.02), documents, chunks, ingest chunks/s (and OCR pages/s for OCR'd renderings);
    then the page checks (printed PDF, scanned PDF) as last rows."""
    rows = []
    for name, row in results["formats"].items():
        delta = f"{row['delta_vs_jsonl']:+.4f}" if "delta_vs_jsonl" in row else "–"
        verdict = "–"
        if "within_target" in row:
            verdict = "met" if row["within_target"] else "not met"
            if row.get("target_delta", results["target_delta"]) != results["target_delta"]:
                verdict += f" (target {row['target_delta']})"
        speed = f"{row['chunks_per_s']}"
        if row.get("ocr_pages"):
            speed += f" (OCR {row['ocr_pages_per_s']} pages/s)"
        rows.append([name, f"{row['ndcg@10']:.4f}", delta, verdict, row["documents"], row["chunks"], speed])
    for key, label in (("page_check", "PDF page check"), ("page_check_scanned", "scanned PDF page check (OCR)")):
        if key not in results:
            continue
        page = results[key]
        rows.append(
            [
                f"{label} ({page['pages']} pages)",
                f"{page['page_correct']}/{page['located']} chunks on the cited page",
                "–",
                "met" if page["located"] and page["page_correct"] == page["located"] else "not met",
                "–",
                page["chunks"],
                "–",
            ]
        )
    header = ["rendering", "nDCG@10", "Δ vs JSONL", f"within {results['target_delta']}", "docs", "chunks", "chunks/s"]
    return markdown_table(header, rows)


@table("rerank", "rerank-scifact-test.json")
def rerank(results: dict[str, Any]) -> str:
    """`rag eval rerank`: the hybrid (fused) ranking, then the reranked one at each depth: nDCG@10 (and its change),
    recall@10, the latency the stage adds per question (p50/p95 ms at concurrency 1, n timed claims) and the machine
    seconds per 1,000 questions."""
    fused = results["fused"]
    rows: list[list[object]] = [
        ["hybrid (fused), no rerank", f"{fused['ndcg@10']:.4f}", "–", f"{fused['recall@10']:.4f}", "–", "–", "–"]
    ]
    for depth, row in results["depths"].items():
        added = row["added_ms"]
        rows.append(
            [
                f"reranked top {depth}",
                f"{row['ndcg@10']:.4f}",
                f"{row['ndcg@10'] - fused['ndcg@10']:+.4f}",
                f"{row['recall@10']:.4f}",
                f"{added['p50']:.0f}",
                f"{added['p95']:.0f}",
                f"{row['machine_seconds_per_1000_questions']:,.0f}",
            ]
        )
    header = [
        "ranking",
        "nDCG@10",
        "Δ nDCG@10",
        "recall@10",
        f"added p50 ms (n={results['timed_claims']})",
        "added p95 ms",
        "s per 1,000 questions",
    ]
    return markdown_table(header, rows)


@table("bench-mixed", "bench-mixed.json")
def bench_mixed(results: dict[str, Any]) -> str:
    """Questions idle and beside each bulk workload: latency p50/p95/p99 ms (n), TTFT for answers, ratio of p50 to
    idle; a probe that outlasted its workload is marked."""
    rows: list[list[object]] = []
    phases = [("idle", results["idle"])] + [(ph["workload"], ph["probes"]) for ph in results["phases"]]
    for where, probes in phases:
        for p in probes:
            lat, ttft = p["latency_ms"], p.get("ttft_ms") or {}
            ratio = p.get("ttft_p50_over_idle") if p["kind"] == "answer" else p.get("p50_over_idle")
            rows.append(
                [
                    where + ("" if p.get("overlap", True) else " (ended first)"),
                    p["kind"],
                    p["concurrency"],
                    f"{_ms(lat['p50'])} / {_ms(lat['p95'])} / {_ms(lat['p99'])} ({lat['n']})" if lat.get("n") else "-",
                    f"{_ms(ttft['p50'])} / {_ms(ttft['p95'])}" if ttft.get("n") else "",
                    "" if ratio is None else f"{ratio}x",
                    sum(p["errors"].values()),
                ]
            )
    header = ["while", "question", "c", "latency ms p50 / p95 / p99 (n)", "TTFT ms p50 / p95", "p50 / idle", "failed"]
    return markdown_table(header, rows)


@table("bench-mixed-bulk", "bench-mixed.json")
def bench_mixed_bulk(results: dict[str, Any]) -> str:
    """Each bulk workload's rate alone and beside the questions, their ratio, and work lost; then the targets."""
    rows: list[list[object]] = []
    for ph in results["phases"]:
        units = ph["alone"]["units"]
        rows.append(
            [
                ph["workload"],
                f"{ph['alone']['rate']} {units}",
                f"{ph['beside_stream']['rate']} {units} ({ph['rate_beside_over_alone']}x)",
                f"{ph['beside']['rate']} {units} ({ph['rate_beside_probes_over_alone']}x)",
                ph["lost"],
            ]
        )
    header = ["bulk workload", "rate alone", "beside a question a second", "beside the probes above", "lost"]
    out = markdown_table(header, rows)
    upload = next((ph for ph in results["phases"] if ph["workload"] == "upload" and ph["alone"].get("http")), None)
    if upload:  # /v1/ask on the serving process, idle and while its own job worker parses and embeds the upload
        http = upload["alone"]["http"]
        cells = []
        for key in ("idle", "during_job"):
            lat = http[key]["latency_ms"]
            cells.append(f"{_ms(lat['p50'])} / {_ms(lat['p99'])} ({lat['n']})" if lat.get("n") else "-")
        out += "\n" + markdown_table(
            ["`POST /v1/ask` on the upload's server, ms p50 / p99 (n)", "idle", "while its job worker ingests"],
            [["event loop + embed + search (the LLM's time taken off the questions it answered)", *cells]],
        )
    targets = [
        [name, t["value"], t["target"], "met" if t["met"] else "missed"] for name, t in results["targets"].items()
    ]
    return out + "\n" + markdown_table(["target (concurrency 1)", "value", "target", ""], targets)


@table("extract-bench", "extract-bench.json")
def extract_bench(results: dict[str, Any]) -> str:
    """Per format and library: speed, word fidelity against the source (difflib ratio), boilerplate leaked."""
    pdf, html, docx = results["pdf"], results["html"], results["docx"]
    rows = [
        [
            "PDF",
            name,
            f"{pdf[name]['debian_pages_per_s']} pages/s (Debian manuals), {pdf[name]['printed_pages_per_s']} (printed)",
            f"{pdf[name]['word_ratio_mean']:.4f}",
            "–",
        ]
        for name in ("pypdfium2", "pypdf")
    ]
    rows += [
        ["HTML", name, f"{html[name]['docs_per_s']} docs/s", f"{html[name]['word_ratio_mean']:.4f}",
         f"{html[name]['boilerplate_leaked']:.0%}"]
        for name in ("trafilatura", "markitdown")
    ]  # fmt: skip
    rows.append(
        [
            "DOCX",
            "python-docx",
            f"{docx['python-docx']['docs_per_s']} docs/s",
            f"{docx['python-docx']['word_ratio_mean']:.4f}",
            "–",
        ]
    )
    if "ocr" in results:
        ocr = results["ocr"]
        rows.append(
            [
                f"scanned PDF ({ocr['dpi']} dpi)",
                f"tesseract {ocr['tesseract']} ({ocr['workers']} workers)",
                f"{ocr['pages_per_s']} pages/s",
                f"{ocr['word_ratio_mean']:.4f} (min {ocr['word_ratio_min']:.4f})",
                "–",
            ]
        )
    return markdown_table(["format", "library", "speed", "word ratio", "boilerplate leaked"], rows)


# --- rag eval followups --------------------------------------------------------------------------------------------

_FOLLOWUP_ROWS = {
    "raw": "the follow-up as asked",
    "condensed": "condensed with the earlier turn (`condense`)",
    "rewritten": "rewritten by the LLM (`rewrite`)",
    "reference": "the original claim (reference)",
}


_SHIPPED = {"condense": "condensed", "rewrite": "rewritten"}


@table("followups", "followups-scifact-test.json")
def followups(results: dict[str, Any]) -> str:
    """`rag eval followups`: recall@10 and nDCG@10 of each search query of a follow-up, and the rewrite's added
    latency (p50/p95 ms) and fallback rate on its row."""
    rw = results["rewrite"]
    rows: list[list[object]] = []
    for kind, label in _FOLLOWUP_ROWS.items():
        m = results["queries"][kind]
        extra = (
            [f"{rw['added_ms']['p50']:.0f}", f"{rw['added_ms']['p95']:.0f}", f"{rw['fallback_rate']:.1%}"]
            if kind == "rewritten"
            else ["–", "–", "–"]
        )
        shipped = f"**{label}**" if kind == _SHIPPED[results["default"]] else label
        rows.append([shipped, f"{m['recall@10']:.4f}", f"{m['ndcg@10']:.4f}", *extra])
    header = ["search query", "recall@10", "nDCG@10", "added p50 ms", "added p95 ms", "fallback rate"]
    return markdown_table(header, rows)


# --- the README's headline figures ------------------------------------------------------------------------------


@table(
    "headline",
    "retrieval-scifact-test.json",
    "answers-scifact-test/summary.json",
    "bench-embedder.json",
    "bench-query.json",
    "bench-serve.json",
    "bench-mixed.json",
    "followups-scifact-test.json",
    "bench-cache.json",
    "bench-quota.json",
    "page-settle.json",
    "bench-sync.json",
    "fidelity.json",
    "support-scifact-test.json",
    "bench-support.json",
    "bench-burst.json",
)
def headline(
    retrieval: dict[str, Any],
    answers: dict[str, Any],
    embedder: dict[str, Any],
    query: dict[str, Any],
    serve: dict[str, Any],
    mixed: dict[str, Any],
    follow: dict[str, Any],
    cache: dict[str, Any],
    quota: dict[str, Any],
    page: dict[str, Any],
    sync: dict[str, Any],
    fidelity: dict[str, Any],
    support: dict[str, Any],
    support_cost: dict[str, Any],
    burst: dict[str, Any],
) -> str:
    """One row per area for the README: the support verifier on SciFact test and the answers' sentence-level
    citations with the support check, with its cost per answer; retrieval nDCG@10 of the shipped hybrid default,
    follow-up search nDCG@10 (shipped query against the raw follow-up and the original claim), answer verdict
    accuracy, the embedding service's throughput and p99, the query path's p50, goodput under overload, refusals
    under a burst of clients arriving at once, questions during an ingest, answer cache hits, quota refusals, the
    web page's settle time, an incremental folder sync, scanned documents read by OCR against the same text as
    JSONL; each with its date and the page holding the full table."""
    hybrid = [r for r in retrieval["passage"] if r.get("bold") and r["retrieval"].startswith("hybrid")][-1]
    dynamic, naive = embedder["setups"]["triton_dynamic"], embedder["setups"]["naive"]
    hybrid1 = _point(query, "hybrid", 1)
    goodput = serve["targets"]["goodput_over_capacity"]["value"]
    queries = follow["queries"]
    rows: list[list[object]] = [
        [
            "retrieval, SciFact test (BEIR), hybrid default",
            f"nDCG@10 **{hybrid['ndcg@10']:.4f}** (published: {hybrid['published_ndcg@10']})",
            hybrid["date"],
            "[Evaluations](docs/evaluations.md)",
        ],
        [
            f"follow-up search, {follow['n_pairs']} SciFact test pairs over {follow['corpus_docs']:,} docs, "
            f"FOLLOWUP_QUERY={follow['default']}",
            f"nDCG@10 **{queries[_SHIPPED[follow['default']]]['ndcg@10']:.4f}** (as asked: "
            f"{queries['raw']['ndcg@10']:.4f}, original claim: {queries['reference']['ndcg@10']:.4f})",
            follow["machine"]["date_utc"][:10],
            "[Evaluations](docs/evaluations.md#follow-up-queries-rag-eval-followups)",
        ],
        [
            f"answers, {answers['n']} SciFact test claims, {answers['llm_model']} on CPU",
            f"verdict accuracy {answers['verdict_accuracy']:.3f} (majority class {answers['majority_baseline']:.3f}), "
            f"citation precision {answers['citation_precision']:.3f}",
            answers["date"],
            "[Evaluations](docs/evaluations.md)",
        ],
        [
            "embedding service on Triton, short queries, concurrency 32",
            f"{dynamic['rps']} req/s, p99 {_ms(dynamic['p99_ms'])} ms "
            f"(naive FastAPI + Transformers: {naive['rps']} req/s)"
            + (f"; medians of {dynamic['runs']} rounds" if dynamic.get("runs", 1) > 1 else "")
            + _busy(embedder["machine"]),
            embedder["machine"]["date_utc"][:10],
            "[Benchmarks](docs/benchmarks.md)",
        ],
    ]
    if hybrid1:
        rows.append(
            [
                "question to passages (embed + hybrid search), concurrency 1",
                f"p50 {_ms(hybrid1['p50_ms'])} ms",
                query["machine"]["date_utc"][:10],
                "[Benchmarks](docs/benchmarks.md)",
            ]
        )
    rows.append(
        [
            "answers under overload (open loop)",
            f"goodput {goodput:g} × that at capacity, {serve['targets']['timeouts']['value']:g} timeouts",
            serve["machine"]["date_utc"][:10],
            "[Benchmarks](docs/benchmarks.md)",
        ]
    )
    bursts, loop_p99 = burst["burst_p99_ms"], burst.get("open_loop_p99_ms", {}).get("value")
    rows.append(
        [
            f"answers refused under a burst of {burst['params']['clients']} clients at once (503 + Retry-After)",
            f"refusal p99 **{bursts['value']:g} ms** (median of {len(bursts['spread']['values'])} bursts, "
            f"{bursts['spread']['low']:g}–{bursts['spread']['high']:g})"
            + (f"; open loop p99 {loop_p99:g} ms" if loop_p99 is not None else "")
            + _busy(burst["machine"]),
            burst["machine"]["date_utc"][:10],
            "[Benchmarks](docs/benchmarks.md#refusals-in-a-burst-rag-bench-burst)",
        ]
    )
    targets = mixed.get("targets", {})
    if {"retrieval_p50_over_idle_during_ingest", "retrieval_p95_ms_during_ingest"} <= set(targets):
        during = (
            f"retrieval p50 {targets['retrieval_p50_over_idle_during_ingest']['value']:g} × idle, p95 "
            f"{targets['retrieval_p95_ms_during_ingest']['value']:.0f} ms"
        )
        if "ttft_p50_over_idle_during_ingest" in targets:
            during += f"; answer TTFT p50 {targets['ttft_p50_over_idle_during_ingest']['value']:g} × idle"
        rows.append(
            [
                "questions while `rag ingest` runs, concurrency 1",
                during,
                mixed["machine"]["date_utc"][:10],
                "[Benchmarks](docs/benchmarks.md#questions-while-documents-flow-in-rag-bench-mixed)",
            ]
        )
    rows.append(
        [
            f"a repeated question from the answer cache, over HTTP ({cache['questions']}-question log)",
            f"hit p50 {cache['hit_latency_ms']['p50']:g} ms, p95 {cache['hit_latency_ms']['p95']:g} ms (miss p50 "
            f"{cache['miss_latency_ms']['p50']:g} ms with an instant LLM); hit rate {cache['hit_rate']:.0%}",
            cache["machine"]["date_utc"][:10],
            "[Answer cache](docs/answer-cache.md#benchmark)",
        ]
    )
    serial = [p["ms"]["p50"] for p in quota["phases"] if p["clients"] == 1]
    rows.append(
        [
            f"a key over its quota refused (429 + Retry-After), 1 and {quota['params']['concurrency']} clients",
            f"p50 ≤ {max(serial):g} ms serial, p95 ≤ {quota['worst_p95_ms']:g} ms at "
            f"{quota['params']['concurrency']} clients; {quota['llm_calls_during_refusals']} LLM calls",
            quota["machine"]["date_utc"][:10],
            "[Benchmarks](docs/benchmarks.md#quota-refusals-rag-bench-quota)",
        ]
    )
    rows.append(
        [
            f"the web page with {page['documents']:,} documents in the store (Chromium)",
            f"settles p50 {page['settle_ms']['p50']:g} ms, max {page['settle_ms']['max']:g} ms; last page p50 "
            f"{page['last_page_ms']['p50']:g} ms, search p50 {page['search_ms']['p50']:g} ms",
            page["machine"]["date_utc"][:10],
            "[Benchmarks](docs/benchmarks.md#the-web-page-with-a-full-store-rag-bench-page)",
        ]
    )
    rows.append(_sync_row(sync))
    if "scanned" in fidelity["formats"]:
        rows.append(_scanned_row(fidelity))
    return markdown_table(
        ["what", "figure", "measured", "details"], [*_support_rows(support, answers, support_cost), *rows]
    )


def _support_rows(support: dict[str, Any], answers: dict[str, Any], cost: dict[str, Any]) -> list[list[object]]:
    """The headline rows of the support check: the verifier's SciFact metrics (`rag eval support`), the local
    model's sentence-level citations (`rag eval answers`, when run with the check) and the added latency."""
    v = support["verifier"]
    accuracy = v["label_argmax"]["accuracy"] if "label_argmax" in v else v["label"]["accuracy"]
    rows: list[list[object]] = [
        [
            f"support verifier (MiniLM-L6 cross-encoder, int8 on Triton), SciFact test, {support['n_claims']} claims",
            f"label accuracy given gold rationales **{accuracy:.3f}** (target 0.68), selection + label F1 "
            f"**{v['sentence_selection_label']['f1']:.3f}** (target 0.50)",
            support["machine"]["date_utc"][:10],
            "[Support check](docs/support.md#measured)",
        ]
    ]
    if answers.get("sentence_support_rate") is not None:
        rows.append(
            [
                f"answers with the support check, {answers['n']} SciFact test claims, {answers['llm_model']}",
                f"citation precision **{answers.get('sentence_citation_precision') or 0:.3f}** / recall "
                f"**{answers['sentence_citation_recall']:.3f}** (sentence level; targets 0.80 / 0.50), 0 repeated "
                f"sentences, every sentence labelled",
                answers["date"],
                "[Support check](docs/support.md#measured)",
            ]
        )
    added = cost["added_ms"]
    rows.append(
        [
            "the support check per answer (up to 8 sentences, 5 passages)",
            f"adds p50 {_ms(added['p50'])} ms, p95 {_ms(added['p95'])} ms (target p95 150 ms)",
            cost["machine"]["date_utc"][:10],
            "[Support check](docs/support.md#measured)",
        ]
    )
    return rows


def _scanned_row(fidelity: dict[str, Any]) -> list[object]:
    """The headline row of the scanned rendering of `rag eval fidelity`: nDCG@10 against JSONL, OCR speed and the
    scanned book's page check."""
    scanned, jsonl = fidelity["formats"]["scanned"], fidelity["formats"]["jsonl"]
    check = fidelity.get("page_check_scanned", {})
    pages = f"; cited page right for {check['page_correct']}/{check['chunks']} chunks" if check else ""
    return [
        f"scanned PDFs read by OCR (Tesseract, {fidelity.get('ocr_dpi', 300)} dpi), {fidelity['claims']} SciFact "
        f"claims over {fidelity['documents']} docs",
        f"nDCG@10 **{scanned['ndcg@10']:.4f}** (same documents as JSONL: {jsonl['ndcg@10']:.4f}); "
        f"{scanned['ocr_pages_per_s']:g} pages/s{pages}",
        scanned["date"],
        "[Evaluations](docs/evaluations.md#format-fidelity-rag-eval-fidelity-and-extraction-libraries-rag-bench-extract)",
    ]


def _sync_row(sync: dict[str, Any]) -> list[object]:
    """The headline row of `rag bench sync`: chunks embedded by the re-sync after the changes, and the no-change run."""
    changed, idle, changes = sync["steps"]["changed"], sync["steps"]["no_change"], sync["changes"]
    return [
        f"`rag sync` of {sync['files']} files after {changes['edited']} edits, {changes['deleted']} deletions, "
        f"{changes['renamed']} rename",
        f"{changed['chunks_embedded']} of {changed['chunks_in_folder']} chunks embedded in {changed['wall_s']:g} s; "
        f"nothing changed: {idle['embed_calls']} embed calls, {idle['documents_written']} writes, "
        f"{idle['wall_s'] * 1000:.0f} ms; equal to a fresh ingest: {'yes' if sync['equal_to_fresh_ingest'] else 'NO'}",
        sync["machine"]["date_utc"][:10],
        "[Benchmarks](docs/benchmarks.md#folder-sync-rag-bench-sync)",
    ]


@table("bench-sync", "bench-sync.json")
def bench_sync(sync: dict[str, Any]) -> str:
    """`rag bench sync`: per step, the time, embed calls, chunks embedded and reused, and the files per outcome."""
    rows: list[list[object]] = []
    names = {
        "initial": "initial sync",
        "changed": "re-sync after the changes",
        "no_change": "sync with nothing changed",
    }
    for key, name in names.items():
        step = sync["steps"][key]
        files = f"+{step['added']} ~{step['updated']} >{step['moved']} -{step['removed']} ={step['unchanged']}"
        rows.append([name, step["wall_s"], step["embed_calls"], step["chunks_embedded"], step["chunks_reused"], files])
    changed, fresh = sync["steps"]["changed"], sync["steps"]["fresh_ingest"]
    return (
        markdown_table(["step", "wall s", "embed calls", "chunks embedded", "chunks reused", "files"], rows)
        + f"\nFiles: + added, ~ updated, > moved, - removed, = unchanged. The edited files hold "
        f"{changed['chunks_of_changed_files']} chunks, {changed['chunks_changed']} of them changed; a fresh ingest "
        f"of the changed folder ({fresh['documents']} files) took {fresh['wall_s']:g} s and the synced collection "
        f"equals it: {'yes' if sync['equal_to_fresh_ingest'] else 'no'}. {sync['files']} files, "
        f"{sync['sections_per_markdown_file']} SciFact abstracts per Markdown file, CHUNK_TOKENS="
        f"{sync['settings']['chunk_tokens']}, {sync['machine']['cores']} cores, {sync['machine']['date_utc'][:10]}.\n"
    )


@table("bench-cache", "bench-cache.json")
def bench_cache(cache: dict[str, Any]) -> str:
    """`rag bench cache`: hit and miss latency through HTTP, the hit rate and the hit p50 target."""
    rows: list[list[object]] = []
    for name in ("hit", "miss"):
        stats = cache[f"{name}_latency_ms"]
        rows.append([name, stats["n"], stats["p50"], stats["p95"], stats["p99"]])
    target = cache["targets"]["hit_p50_ms"]
    met = "met" if target["value"] is not None and target["value"] <= 20 else "missed"
    return (
        markdown_table(["answer", "n", "p50 ms", "p95 ms", "p99 ms"], rows)
        + f"\nHit rate {cache['hit_rate']:.1%} (at most {cache['most_hit_rate']:.1%} for this log); hit p50 target "
        f"{target['target']} ms: {met}. {cache['documents']} documents, {cache['questions']} questions, scripted LLM "
        f"delay {cache['params']['llm_delay_ms']:g} ms, {cache['machine']['cores']} cores, "
        f"{cache['machine']['date_utc'][:10]}.\n"
    )


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may hold generated tables: `root`'s README.md and every Markdown file under `root/docs/`."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def read_pages(root: Path = ROOT) -> dict[Path, str]:
    """The text of each of `pages(root)`."""
    return {page: page.read_text(encoding="utf-8") for page in pages(root)}


def render_table(name: str, results_dir: Path = RESULTS_DIR) -> str:
    """The Markdown of table `name` from its results files.

    Raises:
        ReadmeTablesError: no such table, or one of its results files is missing.
    """
    if name not in TABLES:
        raise ReadmeTablesError(f"marker results:{name} names no table; known: {', '.join(sorted(TABLES))}")
    results = []
    for source in TABLES[name].sources:
        path = results_dir / source
        if not path.is_file():
            raise ReadmeTablesError(f"table {name}: results file {path} is missing")
        results.append(json.loads(path.read_text()))
    return TABLES[name].render(*results)


def check_markers(texts: Iterable[str]) -> None:
    """Check that every registered table has exactly one block over all of `texts` (the pages).

    Raises:
        ReadmeTablesError: a registered table has no block, or two.
    """
    names = [m["name"] for text in texts for m in _BLOCK.finditer(text)]
    missing = sorted(set(TABLES) - set(names))
    twice = sorted({n for n in names if names.count(n) > 1})
    if missing or twice:
        raise ReadmeTablesError(f"table blocks missing: {missing or 'none'}; repeated: {twice or 'none'}")


def render_blocks(text: str, results_dir: Path = RESULTS_DIR) -> str:
    """`text` with every results block replaced by its freshly rendered table.

    Raises:
        ReadmeTablesError: a marker names no registered table, or a results file is missing.
    """
    return _BLOCK.sub(
        lambda m: f"<!-- results:{m['name']} -->\n{render_table(m['name'], results_dir)}<!-- /results:{m['name']} -->",
        text,
    )


def render_pages(texts: Mapping[Path, str], results_dir: Path = RESULTS_DIR) -> dict[Path, str]:
    """Each page's text with its results blocks freshly rendered, after checking that every table has one block.

    Raises:
        ReadmeTablesError: as `check_markers` and `render_blocks`.
    """
    check_markers(texts.values())
    return {page: render_blocks(text, results_dir) for page, text in texts.items()}


def stale_tables(text: str, results_dir: Path = RESULTS_DIR) -> list[str]:
    """Names of the blocks in `text` whose table differs from what their results render to."""
    return [m["name"] for m in _BLOCK.finditer(text) if m["body"] != render_table(m["name"], results_dir)]


def main(
    check: Annotated[bool, typer.Option("--check", help="Only report stale tables (exit 1); change nothing.")] = False,
    root: Annotated[Path, typer.Option(help="The checkout whose README.md and docs/ to rewrite.")] = ROOT,
) -> None:
    """Rewrite (or check) the measured tables of README.md and docs/ from evals/results/."""
    texts = read_pages(root)
    try:
        updated = render_pages(texts)
        stale = {page: stale_tables(text) for page, text in texts.items()}
    except ReadmeTablesError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    stale = {page: names for page, names in stale.items() if names}
    if check:
        for page, names in stale.items():
            typer.echo(f"{page}: stale tables {', '.join(names)}: run `python -m evals.readme_tables`", err=True)
        if stale:
            raise typer.Exit(1)
        return
    for page, text in updated.items():
        if text != texts[page]:
            page.write_text(text, encoding="utf-8")
    shown = "; ".join(f"{page.relative_to(root)}: {', '.join(names)}" for page, names in stale.items())
    typer.echo(f"{sum(map(len, stale.values()))} table(s) rewritten ({shown or 'none stale'})")


if __name__ == "__main__":
    typer.run(main)
