"""Text embeddings from an ONNX encoder served by Triton, over `tritonclient.grpc.aio`.

One `TritonEmbedder` per process holds one long-lived gRPC channel. Texts are tokenized here, padded to a small
set of sequence-length buckets (Triton's dynamic batcher only merges requests of identical shape), split into
requests of at most the model's `max_batch_size`, sent concurrently, and reassembled in input order. The server
returns `last_hidden_state`; pooling and L2 normalisation happen in `tools.pooling`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from pathlib import Path
from typing import Literal

import grpc
import numpy as np
import numpy.typing as npt
import tritonclient.grpc.aio as grpcclient
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.utils import InferenceServerException

from tools.model_specs import EmbeddingModelSpec
from tools.pooling import pool_and_normalize
from tools.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

TextKind = Literal["query", "document"]

GRPC_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""gRPC send/receive limit; a full batch of 64 x 512 x 1024 float32 states is 128 MiB."""


class EmbedderError(RuntimeError):
    """Embedding failed: bad input, Triton unreachable or not ready, or a bad model output."""


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, InferenceServerException) and exc.status() in {
        "StatusCode.UNAVAILABLE",
        "StatusCode.RESOURCE_EXHAUSTED",
    }


def length_buckets(max_tokens: int) -> list[int]:
    """Padded sequence lengths: 16, 32, 64, then every 32 tokens up to and including `max_tokens`.

    Few, fixed shapes let Triton's dynamic batcher merge concurrent requests (it only merges identical shapes);
    steps of 32 above 64 keep padding waste for document chunks under ~25%.
    """
    buckets = [b for b in (16, 32, 64) if b < max_tokens]
    buckets += list(range(96, max_tokens, 32))
    return [*buckets, max_tokens]


class TritonEmbedder:
    """Async client for one Triton-served embedding model.

    Args:
        url: Triton gRPC endpoint `host:port`.
        spec: the model's description (name, dim, max_tokens, pooling, query prefix).
        timeout_s: deadline of each gRPC request, seconds.
        retries: attempts for transient gRPC errors (UNAVAILABLE), with exponential backoff.
        tokenizer_path: the model's tokenizer.json (or its folder); default: from the model's package.

    Use as `async with TritonEmbedder(...) as emb: vectors = await emb.embed(texts)`.
    """

    def __init__(
        self,
        url: str,
        spec: EmbeddingModelSpec,
        timeout_s: float = 30.0,
        retries: int = 3,
        tokenizer_path: Path | None = None,
    ) -> None:
        self.url = url
        self.spec = spec
        self.timeout_s = timeout_s
        self.retries = retries
        self.tokenizer = load_tokenizer(spec.name, tokenizer_path)
        self.buckets = length_buckets(spec.max_tokens)
        self.max_batch_size = 0
        self.latencies_ms: deque[float] = deque(maxlen=10_000)
        """Latency of each gRPC inference call, ms (most recent 10,000)."""
        self._client: grpcclient.InferenceServerClient | None = None

    async def __aenter__(self) -> TritonEmbedder:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the channel, check server and model readiness, read `max_batch_size` and check the dimension.

        Raises:
            EmbedderError: Triton is unreachable or not ready, or the served model's output width differs from
                the model description's `dim`.
        """
        self._client = grpcclient.InferenceServerClient(
            self.url,
            channel_args=[
                ("grpc.max_send_message_length", GRPC_MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_BYTES),
            ],
        )
        try:
            ready = await self._client.is_model_ready(self.spec.name, client_timeout=self.timeout_s)
            if not ready:
                raise EmbedderError(f"Triton at {self.url} has model {self.spec.name!r} not ready (is it loaded?)")
            config = (await self._client.get_model_config(self.spec.name, client_timeout=self.timeout_s)).config
        except InferenceServerException as exc:
            await self.close()
            raise EmbedderError(f"Triton at {self.url} unreachable or not ready: {exc.message()}") from exc
        except EmbedderError:
            await self.close()
            raise
        self.max_batch_size = int(config.max_batch_size) or 1
        served_dim = int(config.output[0].dims[-1])
        if served_dim != self.spec.dim:
            await self.close()
            raise EmbedderError(
                f"model {self.spec.name!r} on Triton outputs dim {served_dim}, model description says {self.spec.dim}"
            )

    async def close(self) -> None:
        """Close the gRPC channel (idempotent)."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def tokenize(self, texts: list[str], kind: TextKind) -> list[list[int]]:
        """Token ids per text (query prefix added for queries), truncated at the model's `max_tokens`.

        Raises:
            EmbedderError: a text is empty or whitespace only (names its index).
        """
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise EmbedderError(f"texts[{i}] is empty or whitespace only; expected non-blank text")
        prefix = self.spec.query_prefix if kind == "query" else ""
        encodings = self.tokenizer.encode_batch([prefix + t for t in texts])
        ids: list[list[int]] = []
        for i, enc in enumerate(encodings):
            tokens = list(enc.ids)
            if len(tokens) > self.spec.max_tokens:
                log.info("texts[%d]: %d tokens truncated to %d", i, len(tokens), self.spec.max_tokens)
                tokens = tokens[: self.spec.max_tokens - 1] + tokens[-1:]  # keep [SEP]
            ids.append(tokens)
        return ids

    async def embed(self, texts: list[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        """Embed `texts` in order.

        Args:
            texts: non-blank strings; any length (longer than the model limit is truncated).
            kind: `query` adds the model's query instruction prefix; `document` adds nothing.

        Returns:
            `(len(texts), dim)` float32, L2-normalised rows.

        Raises:
            EmbedderError: blank input, Triton errors after retries, or a non-finite output (names the text).
        """
        if self._client is None:
            raise EmbedderError("TritonEmbedder is not connected; use `async with` or call connect()")
        if not texts:
            return np.zeros((0, self.spec.dim), dtype=np.float32)
        token_ids = self.tokenize(texts, kind)
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]))
        groups = [order[i : i + self.max_batch_size] for i in range(0, len(order), self.max_batch_size)]
        results = await asyncio.gather(*(self._embed_group([token_ids[i] for i in g]) for g in groups))
        out = np.empty((len(texts), self.spec.dim), dtype=np.float32)
        for group, vectors in zip(groups, results, strict=True):
            out[group] = vectors
        bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
        if bad.size:
            raise EmbedderError(f"non-finite embedding for texts[{int(bad[0])}]: {texts[int(bad[0])][:80]!r}")
        return out

    async def _embed_group(self, token_ids: list[list[int]]) -> npt.NDArray[np.float32]:
        longest = max(len(t) for t in token_ids)
        length = next(b for b in self.buckets if b >= longest)
        input_ids = np.zeros((len(token_ids), length), dtype=np.int64)
        mask = np.zeros((len(token_ids), length), dtype=np.int64)
        for row, ids in enumerate(token_ids):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        states = await self._infer(input_ids, mask)
        return pool_and_normalize(states, mask, self.spec.pooling)

    async def _infer(self, input_ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        assert self._client is not None
        inputs = [
            InferInput("input_ids", list(input_ids.shape), "INT64"),
            InferInput("attention_mask", list(mask.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(input_ids)
        inputs[1].set_data_from_numpy(mask)
        outputs = [InferRequestedOutput("last_hidden_state")]
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.retries),
                wait=wait_exponential(multiplier=0.2, max=2.0),
                retry=retry_if_exception(_is_transient),
                reraise=True,
            ):
                with attempt:
                    start = time.perf_counter()
                    result = await self._client.infer(
                        self.spec.name, inputs, outputs=outputs, client_timeout=self.timeout_s
                    )
                    self.latencies_ms.append((time.perf_counter() - start) * 1000)
        except InferenceServerException as exc:
            raise EmbedderError(
                f"Triton inference on {self.spec.name!r} at {self.url} failed: {exc.message()}"
            ) from exc
        except grpc.RpcError as exc:  # pragma: no cover - tritonclient wraps most RPC errors
            raise EmbedderError(f"Triton gRPC error at {self.url}: {exc}") from exc
        states = result.as_numpy("last_hidden_state")
        if states is None:
            raise EmbedderError(f"Triton response from {self.spec.name!r} has no last_hidden_state")
        states32: npt.NDArray[np.float32] = states.astype(np.float32, copy=False)
        return states32
