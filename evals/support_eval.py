"""The support eval: the served verifier on SciFact test against the SciFact paper's metrics.

`rag eval support` (needs the local Triton with the verifier: `rag up --only triton`). On the 300 test claims
(SciFact's dev split, the one Wadden et al., "Fact or Fiction: Verifying Scientific Claims", EMNLP 2020, report on),
with oracle abstracts (each claim's cited abstracts, NEI claims' included, as VeriSci's `abstract_retrieval/oracle.py
--include-nei`):

1. sentence selection and selection + label (`evals.support_metrics`): every sentence of every cited abstract is
   scored with its claim through `tools.embedder.verifier.TritonVerifier` on Triton; the prediction per abstract is
   `support_metrics.predict_abstract` at the shipped thresholds (at most 3 sentences); P/R/F1 by the official
   scorer's rules (`verisci/evaluate/lib/metrics.py`), abstract-level figures beside;
2. label accuracy given gold inputs (`verisci/evaluate/label_accuracy_gold_inputs.py`, inputs as
   `script/label-prediction.sh` makes them): per (claim, cited abstract), the claim and its gold rationale
   sentences joined (NEI: the oracle TF-IDF top 2), labelled by the most probable label (as VeriSci's label
   predictor, `verisci/inference/label_prediction/transformer.py`, takes the argmax) and, beside, by `label_of` at
   the shipped thresholds (which are tuned for sentence selection); per-class precision/recall/F1;
3. SUPPORT precision at the shipped threshold: of the (claim, sentence) pairs labelled SUPPORT, the share whose
   sentence lies in a gold SUPPORT rationale of that abstract.

Beside them, the no-training baseline (RAGFlow's rule: cosine similarity of all-MiniLM-L6-v2 embeddings of claim and
sentence, in-process ONNX Runtime on the embedder's graph, at the threshold chosen on the fit fold of train,
`evals/results/verifier-training.json`). Targets (issue 41) and anchors (published figures) with pass/fail. The
verifier is in-domain (trained on SciFact train); its figures are labelled so wherever they appear.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evals.plots import emit_report, pyplot, save_figure
from evals.scifact import load_corpus, load_queries, load_sentence_spans
from evals.support_inference import EMBEDDER_GRAPH_NAME, gold_input_pairs, per_case, sentence_pairs, similarities
from evals.support_metrics import (
    label_scores,
    predict_abstract,
    predict_by_similarity,
    selection_scores,
)
from evals.verifier_data import Case, claim_pairs, split_cases
from tools.embedder.verifier import LOCAL_VERIFIER, SUPPORT_LABELS, VerifierSpec, get_verifier_spec, label_of

LABEL = "in-domain (trained on SciFact train)"
RESULTS = Path(__file__).resolve().parent / "results"
TRAINING_RECORD = RESULTS / "verifier-training.json"
TARGETS = {"label_accuracy_gold_inputs": 0.68, "sentence_selection_label_f1": 0.50}
"""Issue 41's targets on SciFact test."""
ANCHORS = {
    "VeriSci RoBERTa-base, SciFact only (paper): label accuracy": ("label_accuracy_gold_inputs", 0.629),
    "SciBERT re-run, SciFact only: label accuracy": ("label_accuracy_gold_inputs", 0.692),
    "VeriSci RoBERTa-large re-run, SciFact only: selection + label F1": ("sentence_selection_label_f1", 0.494),
}
"""Published figures the issue names (metric, value), each compared with ours."""


def support_precision(
    cases: Sequence[Case], probs: Sequence[npt.NDArray[np.float32]], spec: VerifierSpec
) -> dict[str, float]:
    """Of the (claim, sentence) pairs `label_of` calls SUPPORT, the share whose sentence is in a gold SUPPORT
    rationale of that abstract; and how many were called SUPPORT."""
    called = correct = 0
    for case, rows in zip(cases, probs, strict=True):
        gold = (
            {i for r in case.gold.rationales for i in r}
            if case.gold is not None and case.gold.label == SUPPORT_LABELS[0]
            else set()
        )
        for i, row in enumerate(rows):
            if label_of(row, spec)[0] == SUPPORT_LABELS[0]:
                called += 1
                correct += int(i in gold)
    return {"precision": round(correct / called, 4) if called else 0.0, "sentences_called_support": called}


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    """Pass/fail of the targets and against each anchor (ours >= theirs)."""
    ours = {
        "label_accuracy_gold_inputs": report["verifier"]["label"]["accuracy"],
        "sentence_selection_label_f1": report["verifier"]["sentence_selection_label"]["f1"],
    }
    return {
        "targets": {k: {"target": v, "ours": ours[k], "pass": ours[k] >= v} for k, v in TARGETS.items()},
        "anchors": {
            name: {"metric": metric, "anchor": value, "ours": ours[metric], "pass": ours[metric] >= value}
            for name, (metric, value) in ANCHORS.items()
        },
    }


async def classify_all(pairs: Sequence[tuple[str, str]], spec: VerifierSpec, url: str) -> npt.NDArray[np.float32]:
    """Probabilities of `pairs` from the verifier on Triton at `url`, in chunks of 512 pairs."""
    from tools.embedder.verifier import TritonVerifier

    out: list[npt.NDArray[np.float32]] = []
    async with TritonVerifier(url, spec, timeout_s=120.0) as verifier:
        for start in range(0, len(pairs), 512):
            out.append(await verifier.classify(pairs[start : start + 512]))
    return np.concatenate(out) if out else np.zeros((0, 3), dtype=np.float32)


def run_support_eval(limit: int | None) -> dict[str, Any]:
    """Run the eval (module docstring) and return the report.

    Raises:
        EmbedderError: Triton is down or does not serve the verifier.
        FileNotFoundError: the training record or the embedder's graph is missing.
    """
    from agent.config.settings import Settings
    from evals.machine import machine_info

    settings = Settings()
    machine = machine_info()
    spec = get_verifier_spec(LOCAL_VERIFIER)
    training = json.loads(TRAINING_RECORD.read_text())
    started = time.perf_counter()
    corpus, spans = load_corpus(), load_sentence_spans()
    queries = load_queries("test")[:limit]
    cases = split_cases("test", corpus, spans, queries)
    pairs, gold_pairs = sentence_pairs(cases), gold_input_pairs(cases)
    t0 = time.perf_counter()
    probs = asyncio.run(classify_all([*pairs, *gold_pairs], spec, settings.triton_grpc_url))
    classify_s = time.perf_counter() - t0
    sentence_probs, gold_probs = per_case(cases, probs[: len(pairs)]), probs[len(pairs) :]
    gold_labels = [c.claim_label for c in cases]
    predicted = claim_pairs(
        cases, [{c.doc_id: predict_abstract(p, spec)} for c, p in zip(cases, sentence_probs, strict=True)]
    )
    verifier = {
        **selection_scores(predicted),
        "label": label_scores(gold_labels, [SUPPORT_LABELS[int(i)] for i in gold_probs.argmax(1)]),
        "label_shipped_rule": label_scores(gold_labels, [label_of(row, spec)[0] for row in gold_probs]),
        "support_precision": support_precision(cases, sentence_probs, spec),
    }
    threshold = float(training["held_out"]["baseline_cosine"]["cosine_threshold"])
    sims, gold_sims = similarities(cases, settings.model_repository / EMBEDDER_GRAPH_NAME / "1" / "model.onnx")
    baseline_pred = claim_pairs(
        cases, [{c.doc_id: predict_by_similarity(s, threshold)} for c, s in zip(cases, sims, strict=True)]
    )
    called = [[j for j, v in enumerate(s) if v >= threshold] for s in sims]
    base_correct = sum(
        int(c.gold is not None and c.gold.label == SUPPORT_LABELS[0] and j in {i for r in c.gold.rationales for i in r})
        for c, js in zip(cases, called, strict=True)
        for j in js
    )
    n_called = sum(len(js) for js in called)
    baseline = {
        **selection_scores(baseline_pred),
        "label": label_scores(
            gold_labels, [SUPPORT_LABELS[0] if s >= threshold else SUPPORT_LABELS[2] for s in gold_sims]
        ),
        "support_precision": {
            "precision": round(base_correct / n_called, 4) if n_called else 0.0,
            "sentences_called_support": n_called,
        },
        "cosine_threshold": threshold,
    }
    report: dict[str, Any] = {
        "command": "rag eval support" + (f" --limit {limit}" if limit else ""),
        "label": LABEL,
        "verifier_model": LOCAL_VERIFIER,
        "graph": "int8 (ONNX Runtime dynamic quantisation), served by the local Triton",
        "thresholds": {
            "support_threshold": spec.support_threshold,
            "contradict_threshold": spec.contradict_threshold,
            "chosen_on": "held-out train fold (evals/results/verifier-training.json)",
        },
        "split": "test (SciFact dev)",
        "n_claims": len(queries),
        "n_cases": len(cases),
        "n_sentence_pairs": len(pairs),
        "abstracts": "oracle: each claim's cited abstracts, NEI claims' included",
        "verifier": verifier,
        "baseline_cosine": baseline,
        "classify_seconds": round(classify_s, 1),
        "pairs_per_second": round(len(probs) / classify_s, 1) if classify_s else None,
        "eval_seconds": round(time.perf_counter() - started, 1),
        "machine": machine,
    }
    report["verdict"] = verdicts(report)
    return report


def plot(report: dict[str, Any], path: Path) -> Path:
    """Bars of the verifier's and the baseline's figures (selection F1, selection + label F1, label accuracy, SUPPORT
    precision), the targets as markers."""
    plt = pyplot()
    names = ["sentence selection F1", "selection + label F1", "label accuracy (gold inputs)", "SUPPORT precision"]
    rows = []
    for key in ("verifier", "baseline_cosine"):
        part = report[key]
        rows.append(
            [
                part["sentence_selection"]["f1"],
                part["sentence_selection_label"]["f1"],
                part["label"]["accuracy"],
                part["support_precision"]["precision"],
            ]
        )
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(names))
    ax.bar(x - 0.2, rows[0], width=0.4, label=f"verifier (int8, Triton; {LABEL})")
    ax.bar(x + 0.2, rows[1], width=0.4, label="baseline: embedding cosine (no training)")
    ax.scatter(
        [1, 2],
        [TARGETS["sentence_selection_label_f1"], TARGETS["label_accuracy_gold_inputs"]],
        marker="_",
        s=900,
        color="black",
        label="target (issue 41)",
        zorder=3,
    )
    ax.set_xticks(x)
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"SciFact test ({report['n_claims']} claims), oracle abstracts")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    title = f"Support verifier vs. embedding similarity; {report['machine']['cores']} CPU cores"
    return save_figure(fig, path, title)


def render(report: dict[str, Any], console: Any) -> None:
    """A table of the verifier's and the baseline's figures, then targets and anchors with pass/fail."""
    from rich.table import Table

    table = Table(title=f"SciFact test, {report['n_claims']} claims: support verifier ({LABEL})")
    for column in ("metric", "verifier", "baseline (cosine)"):
        table.add_column(column, justify="right")
    v, b = report["verifier"], report["baseline_cosine"]
    for name, key in (
        ("sentence selection P/R/F1", "sentence_selection"),
        ("selection + label P/R/F1", "sentence_selection_label"),
        ("abstract label-only P/R/F1", "abstract_label_only"),
    ):
        table.add_row(
            name, *(f"{p[key]['precision']:.3f} / {p[key]['recall']:.3f} / {p[key]['f1']:.3f}" for p in (v, b))
        )
    table.add_row("label accuracy, gold inputs", f"{v['label']['accuracy']:.3f}", f"{b['label']['accuracy']:.3f}")
    table.add_row("  the same, shipped thresholds", f"{v['label_shipped_rule']['accuracy']:.3f}", "-")
    for label in SUPPORT_LABELS:
        table.add_row(f"F1 {label}", *(f"{p['label']['per_class'][label]['f1']:.3f}" for p in (v, b)))
    table.add_row("SUPPORT precision (sentences)", *(f"{p['support_precision']['precision']:.3f}" for p in (v, b)))
    console.print(table)
    for kind in ("targets", "anchors"):
        for name, row in report["verdict"][kind].items():
            wanted = row.get("target", row.get("anchor"))
            console.print(
                f"{kind[:-1]} {name}: ours {row['ours']:.3f} vs {wanted:.3f}: {'pass' if row['pass'] else 'fail'}"
            )


def run_support_command(limit: int | None, output: Path | None, plot_path: Path | None, as_json: bool) -> None:
    """`rag eval support` (options in `evals.cli.support`): measure, plot, print and write the report (default
    `evals/results/support-scifact-test.json` and `.png`)."""
    report = run_support_eval(limit)
    report["plot"] = plot(report, plot_path or RESULTS / "support-scifact-test.png").name
    emit_report(report, as_json, output or RESULTS / "support-scifact-test.json", render)
