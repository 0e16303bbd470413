"""Retrieval quality of the int8 embedder next to fp32: SciFact test nDCG@10 with exact dense search, in process.

Both pooled graphs (`model_repository/all-minilm-l6-v2{,-int8}/1/model.onnx`) run under ONNX Runtime in this process
with the client's own tokenization, truncation (256 tokens: one passage per abstract) and length buckets, so the only
difference is the quantisation. Documents are embedded in the ingestion form (`CorpusDoc.content`). The corpus is
the test split's gold abstracts plus the first `--distractors` other abstracts (the full 5,183 take ~10 min per
model on 2 shared cores); metrics by `evals.metrics` (ir-measures).
`rag eval retrieval` with `EMBEDDER_MODEL=all-minilm-l6-v2-int8` is the full-stack version.

Usage: `python -m evals.int8_quality [--distractors 700] [--threads 2] [--output FILE]`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt
import typer

from agent.config.settings import Settings
from evals.metrics import evaluate
from evals.scifact import claim_texts, load_corpus, load_qrels
from tools.embedder import TritonEmbedder, pad_to_bucket
from tools.model_specs import get_spec
from tools.onnx_session import open_session, run_pooled
from tools.records import TextKind


def embed_in_process(
    model_file: Path, client: TritonEmbedder, texts: list[str], kind: TextKind, threads: int, batch: int = 16
) -> tuple[npt.NDArray[np.float32], float]:
    """Embed `texts` with the pooled graph under ONNX Runtime (length-sorted batches padded to the client's buckets).

    Returns:
        `(len(texts), dim)` float32 unit rows in input order, and the throughput in sequences/s.
    """
    session = open_session(model_file, threads)
    ids = client.tokenize(texts, kind)
    order = np.argsort([len(t) for t in ids], kind="stable")
    out = np.empty((len(texts), client.spec.dim), dtype=np.float32)
    start = time.perf_counter()
    for i in range(0, len(order), batch):
        rows = order[i : i + batch]
        input_ids, mask = pad_to_bucket([ids[r] for r in rows], client.buckets)
        out[rows] = run_pooled(session, input_ids, mask)
    return out, len(texts) / (time.perf_counter() - start)


def main(
    distractors: Annotated[int, typer.Option(min=0, help="Non-gold abstracts added to the corpus.")] = 700,
    threads: Annotated[int, typer.Option(min=1, help="ONNX Runtime intra-op threads.")] = 2,
    output: Annotated[Path | None, typer.Option(help="Write the JSON report here.")] = None,
) -> None:
    """Print nDCG@10 / recall@10 / MRR@10 of fp32 and int8 on the same SciFact test subset, and the difference."""
    logging.getLogger("tools.embedder").setLevel(logging.ERROR)  # abstracts are cut at 256 tokens on purpose
    repository = Settings().model_repository
    qrels = load_qrels("test")
    gold = {d for docs in qrels.values() for d in docs}
    docs: dict[str, str] = {}
    others = 0
    for doc_id, doc in load_corpus().items():
        if doc_id in gold or others < distractors:
            docs[doc_id] = doc.content
            others += doc_id not in gold
    queries = claim_texts("test")
    doc_ids, query_ids = list(docs), list(queries)
    report: dict[str, Any] = {"n_queries": len(queries), "n_docs": len(docs), "threads": threads}
    for name in ("all-minilm-l6-v2", "all-minilm-l6-v2-int8"):
        spec = get_spec(name)
        client = TritonEmbedder("unused:0", spec)
        model_file = repository / name / "1" / "model.onnx"
        doc_vecs, doc_rate = embed_in_process(model_file, client, [docs[d] for d in doc_ids], "document", threads)
        q_vecs, _ = embed_in_process(model_file, client, [queries[q] for q in query_ids], "query", threads)
        scores = q_vecs @ doc_vecs.T
        top = np.argsort(-scores, axis=1)[:, :100]
        run = {q: [doc_ids[j] for j in top[i]] for i, q in enumerate(query_ids)}
        report[name] = {**evaluate(qrels, run), "doc_seq_per_s": round(doc_rate, 1)}
        typer.echo(f"{name}: {report[name]}")
    report["ndcg@10_int8_minus_fp32"] = round(
        report["all-minilm-l6-v2-int8"]["ndcg@10"] - report["all-minilm-l6-v2"]["ndcg@10"], 4
    )
    typer.echo(json.dumps(report))
    if output is not None:
        output.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
