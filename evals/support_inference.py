"""Scores for SciFact cases outside Triton: the verifier's ONNX graph and the embedder's in this process (ONNX Runtime,
`tools.onnx_session`), and the pairs both the trainer and `rag eval support` score per case.

Per case (`evals.verifier_data.Case`): one (claim, sentence) pair per abstract sentence (sentence selection) and one
(claim, gold inputs joined by " ") pair (label accuracy given gold inputs, `evals.verifier_data.gold_inputs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from evals.verifier_data import Case, gold_inputs
from tools.embedder.pairs import pad_pairs, pair_tokenizer
from tools.embedder.verifier import VERIFY_OUTPUT, VerifierSpec, softmax

EMBEDDER_GRAPH_NAME = "all-minilm-l6-v2"
"""The embedder whose graph (`model_repository/<name>/1/model.onnx`) the similarity baseline runs."""
BATCH = 64
"""Pairs per ONNX Runtime call (the served model's max_batch_size)."""


def sentence_pairs(cases: Sequence[Case]) -> list[tuple[str, str]]:
    """(claim, sentence) for every sentence of every case, case after case."""
    return [(case.claim, s) for case in cases for s in case.sentences]


def gold_input_pairs(cases: Sequence[Case]) -> list[tuple[str, str]]:
    """(claim, the case's gold inputs joined by " ") per case: VeriSci's label-prediction input."""
    return [(case.claim, " ".join(case.sentences[i] for i in gold_inputs(case))) for case in cases]


def per_case(cases: Sequence[Case], rows: npt.NDArray[np.float32]) -> list[npt.NDArray[np.float32]]:
    """Split `sentence_pairs`-ordered rows back into one block per case (`(n_sentences, ...)`)."""
    bounds = np.cumsum([0, *(len(c.sentences) for c in cases)])
    return [rows[bounds[i] : bounds[i + 1]] for i in range(len(cases))]


def onnx_classify(
    model_file: Path, spec: VerifierSpec, pairs: Sequence[tuple[str, str]], threads: int = 2
) -> npt.NDArray[np.float32]:
    """Probabilities `(len(pairs), 3)` of the verifier graph `model_file` run by ONNX Runtime in this process,
    tokenised as `TritonVerifier` does (pairs sorted by length, padded to each batch's longest).

    Raises:
        FileNotFoundError: no such graph.
    """
    from tools.onnx_session import open_session

    session = open_session(model_file, threads)
    tokenizer = pair_tokenizer(spec.tokenizer_file(), spec.max_tokens)
    encodings = tokenizer.encode_batch(list(pairs))
    order = sorted(range(len(pairs)), key=lambda i: len(encodings[i].ids))
    logits = np.zeros((len(pairs), 3), dtype=np.float32)
    names = [i.name for i in session.get_inputs()]
    for start in range(0, len(order), BATCH):
        group = order[start : start + BATCH]
        batch = [encodings[i] for i in group]
        tensors = pad_pairs(batch, [max(len(e.ids) for e in batch)])
        (out,) = session.run([VERIFY_OUTPUT], {n: tensors[n] for n in names})
        logits[group] = np.asarray(out, dtype=np.float32)
    return softmax(logits)


def embed_in_process(texts: Sequence[str], model_file: Path, threads: int = 2) -> npt.NDArray[np.float32]:
    """all-MiniLM-L6-v2 sentence embeddings `(len(texts), 384)` float32, unit rows, from the embedder's served graph
    `model_file` in ONNX Runtime (`tools.onnx_session.run_pooled`), tokenised as the embedder client does (documents,
    `tools.embedder.inputs.tokenize`), length-sorted batches of `BATCH`."""
    from tools.embedder.inputs import pad_to_bucket, tokenize
    from tools.model_specs import get_spec
    from tools.onnx_session import open_session, run_pooled
    from tools.tokenizer import load_tokenizer

    spec = get_spec("all-minilm-l6-v2")
    session = open_session(model_file, threads)
    ids, _ = tokenize(load_tokenizer(spec.name), spec, list(texts), "document")
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = np.zeros((len(texts), spec.dim), dtype=np.float32)
    for start in range(0, len(order), BATCH):
        group = order[start : start + BATCH]
        batch = [ids[i] for i in group]
        input_ids, mask = pad_to_bucket(batch, [max(len(x) for x in batch)])
        out[group] = run_pooled(session, input_ids, mask)
    return out


def similarities(
    cases: Sequence[Case], model_file: Path
) -> tuple[list[npt.NDArray[np.float32]], npt.NDArray[np.float32]]:
    """The baseline's scores: per case, the cosine similarity of the claim's embedding with each sentence's
    (`(n_sentences,)`), and per case the similarity with its joined gold inputs (`(len(cases),)`)."""
    claims = sorted({c.claim for c in cases})
    sentences = sorted({s for c in cases for s in c.sentences})
    joined = [e for _, e in gold_input_pairs(cases)]
    others = sorted(set(sentences) | set(joined))
    vectors = embed_in_process([*claims, *others], model_file)
    index = {t: i for i, t in enumerate(claims)}
    offset = len(claims)
    where = {t: offset + i for i, t in enumerate(others)}
    per: list[npt.NDArray[np.float32]] = []
    for case in cases:
        claim = vectors[index[case.claim]]
        per.append(vectors[[where[s] for s in case.sentences]] @ claim)
    gold = np.array([vectors[where[j]] @ vectors[index[c.claim]] for c, j in zip(cases, joined, strict=True)])
    return per, gold.astype(np.float32)
