"""Text embeddings from an ONNX encoder served by Triton, over `tritonclient.grpc.aio`.

One `TritonEmbedder` per process holds one long-lived gRPC channel. Texts are tokenized here, padded to a small
set of sequence-length buckets (Triton's dynamic batcher only merges requests of identical shape), split into
requests of at most the model's `max_batch_size`, sent concurrently, and reassembled in input order. The server
returns `last_hidden_state`; pooling and L2 normalisation happen in `tools.pooling`.

Every input: blank text is refused before anything is sent; text longer than the model limit is truncated (logged
at WARNING and counted in `stats.truncated_texts`); any script, emoji or CJK without spaces goes through the
model's own tokenizer; a non-finite embedding raises `EmbedderError` naming the text and is never returned.

Failure: the readiness check on `connect()` and each inference call have deadlines (`connect_timeout_s`,
`timeout_s`, seconds); UNAVAILABLE / RESOURCE_EXHAUSTED answers are retried with jittered exponential backoff
(tenacity) up to `retries` attempts; anything else, or the last failure, becomes an `EmbedderError` naming the
server, the model and the cause. Worst case before an error: `retries * timeout + (retries - 1) * 2 s` of backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import tritonclient.grpc.aio as grpcclient
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)
from tritonclient.grpc import InferInput, InferRequestedOutput, KeepAliveOptions
from tritonclient.utils import InferenceServerException

from tools.model_specs import EmbeddingModelSpec
from tools.pooling import pool_and_normalize
from tools.timing import timed
from tools.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

TextKind = Literal["query", "document"]

GRPC_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Minimum gRPC send/receive limit, bytes; a full bge-large batch (64 x 512 x 1024 float32 states) is 128 MiB,
far above gRPC's 4 MiB default receive limit."""

_MESSAGE_LIMIT_KEYS = ("grpc.max_send_message_length", "grpc.max_receive_message_length")
_TRANSIENT = {"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"}
_BACKOFF_INITIAL_S = 0.1
_BACKOFF_MAX_S = 2.0


class EmbedderError(RuntimeError):
    """Embedding failed: bad input, Triton unreachable or not ready, a timeout, or a bad model output."""


@dataclass
class EmbedderStats:
    """Counters of one client since it was created (read them for logs or metrics).

    Attributes:
        requests: gRPC inference calls that returned a result.
        texts: texts embedded.
        truncated_texts: texts cut at the model's `max_tokens`.
        retries: transient failures that were retried.
        failures: inference calls that ended in an `EmbedderError`.
    """

    requests: int = 0
    texts: int = 0
    truncated_texts: int = 0
    retries: int = 0
    failures: int = 0


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, InferenceServerException) and exc.status() in _TRANSIENT


def channel_options(extra: Sequence[tuple[str, Any]] | None = None) -> list[tuple[str, Any]]:
    """gRPC channel options: tritonclient's defaults (keepalive), overridden by `extra`, message limits kept large.

    `tritonclient.grpc.aio.InferenceServerClient(channel_args=...)` replaces *all* its default options (message
    size limits included, which then fall back to gRPC's 4 MiB receive limit). This function starts from the same
    defaults, applies `extra`, and raises both message-size limits to at least `GRPC_MAX_MESSAGE_BYTES` (-1, gRPC's
    "unlimited", is kept).

    Args:
        extra: `(name, value)` gRPC channel arguments, e.g. `[("grpc.keepalive_time_ms", 10000)]`.

    Returns:
        The merged option list, one entry per name.
    """
    keepalive = KeepAliveOptions()
    options: dict[str, Any] = {
        "grpc.max_send_message_length": GRPC_MAX_MESSAGE_BYTES,
        "grpc.max_receive_message_length": GRPC_MAX_MESSAGE_BYTES,
        "grpc.keepalive_time_ms": keepalive.keepalive_time_ms,
        "grpc.keepalive_timeout_ms": keepalive.keepalive_timeout_ms,
        "grpc.keepalive_permit_without_calls": keepalive.keepalive_permit_without_calls,
        "grpc.http2.max_pings_without_data": keepalive.http2_max_pings_without_data,
    }
    options.update(dict(extra or ()))
    for key in _MESSAGE_LIMIT_KEYS:
        if int(options[key]) != -1:
            options[key] = max(int(options[key]), GRPC_MAX_MESSAGE_BYTES)
    return list(options.items())


def length_buckets(max_tokens: int) -> list[int]:
    """Padded sequence lengths: 32, 64, 128, then every 64 tokens up to and including `max_tokens`.

    Few, fixed shapes let Triton's dynamic batcher merge concurrent requests (it merges only identical shapes and
    closes a batch at the first request of another shape). `rag bench embedder` on SciFact claims (~23 tokens):
    buckets 16/32/64 split them three ways (mean server batch ~2.0 at concurrency 32), 32/64/128 gave ~3.6 and
    40-130% more req/s; on a compute-bound CPU the extra padding costs less than the lost batching. Steps of 64
    above 128 keep padding waste for document chunks at most a third.
    """
    buckets = [b for b in (32, 64, 128) if b < max_tokens]
    buckets += list(range(192, max_tokens, 64))
    return [*buckets, max_tokens]


class TritonEmbedder:
    """Async client for one Triton-served embedding model.

    Args:
        url: Triton gRPC endpoint `host:port`.
        spec: the model's description (name, dim, max_tokens, pooling, query prefix).
        timeout_s: deadline of each gRPC inference request, seconds.
        connect_timeout_s: deadline of each readiness / config request in `connect()`, seconds.
        retries: attempts per call (>= 1) for transient gRPC errors (UNAVAILABLE, RESOURCE_EXHAUSTED), with
            backoff of 0.1 s doubling up to 2 s, plus up to 0.1 s random jitter (capped at 2 s).
        tokenizer_path: the model's tokenizer.json (or its folder); default: from the model's package.
        model_name: Triton model to call; default `spec.name` (another name serves the same model under a
            different config, e.g. in the benchmark).
        channel_args: extra gRPC channel arguments, merged by `channel_options` (message limits stay large).
        max_in_flight: most concurrent inference requests one `embed` call sends.
        buckets: padded sequence lengths to use instead of `length_buckets(spec.max_tokens)` (ascending; the
            model's `max_tokens` is appended if missing). Fewer buckets merge more requests on the server at the
            price of more padding.

    Use as `async with TritonEmbedder(...) as emb: vectors = await emb.embed(texts)`. Keep one per process.
    """

    def __init__(
        self,
        url: str,
        spec: EmbeddingModelSpec,
        timeout_s: float = 30.0,
        retries: int = 3,
        tokenizer_path: Path | None = None,
        *,
        connect_timeout_s: float = 5.0,
        model_name: str | None = None,
        channel_args: Sequence[tuple[str, Any]] | None = None,
        max_in_flight: int = 16,
        buckets: Sequence[int] | None = None,
    ) -> None:
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(
                f"timeouts must be > 0 s; got timeout_s={timeout_s}, connect_timeout_s={connect_timeout_s}"
            )
        if retries < 1 or max_in_flight < 1:
            raise ValueError(f"retries and max_in_flight must be >= 1; got {retries}, {max_in_flight}")
        self.url = url
        self.spec = spec
        self.model_name = model_name or spec.name
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retries = retries
        self.channel_args = channel_options(channel_args)
        self.max_in_flight = max_in_flight
        self.tokenizer = load_tokenizer(spec.name, tokenizer_path)
        self.buckets = length_buckets(spec.max_tokens) if buckets is None else sorted(set(buckets))
        if not self.buckets or self.buckets[0] < 1 or self.buckets[-1] > spec.max_tokens:
            raise ValueError(f"buckets {buckets} must lie in 1..{spec.max_tokens} (the model's max_tokens)")
        if self.buckets[-1] != spec.max_tokens:
            self.buckets.append(spec.max_tokens)
        self.max_batch_size = 0
        self.stats = EmbedderStats()
        self.latencies_ms: deque[float] = deque(maxlen=10_000)
        """Latency of each successful gRPC inference call, ms (most recent 10,000)."""
        self._client: grpcclient.InferenceServerClient | None = None
        self._in_flight = asyncio.Semaphore(max_in_flight)

    async def __aenter__(self) -> TritonEmbedder:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _retrying(self) -> AsyncRetrying:
        def count_retry(state: RetryCallState) -> None:
            self.stats.retries += 1
            exc = state.outcome.exception() if state.outcome else None
            log.warning("Triton at %s: %s; retry %d/%d", self.url, exc, state.attempt_number, self.retries - 1)

        return AsyncRetrying(
            stop=stop_after_attempt(self.retries),
            wait=wait_exponential_jitter(multiplier=_BACKOFF_INITIAL_S, max=_BACKOFF_MAX_S, jitter=_BACKOFF_INITIAL_S),
            retry=retry_if_exception(_is_transient),
            before_sleep=count_retry,
            reraise=True,
        )

    async def connect(self) -> None:
        """Open the channel, check server and model readiness, read `max_batch_size` and check the output width.

        Raises:
            EmbedderError: Triton is unreachable or not ready within `retries` attempts of `connect_timeout_s`
                each, the model is not loaded, or the served model's output width differs from `spec.dim`.
        """
        if self._client is not None:
            return
        self._client = grpcclient.InferenceServerClient(self.url, channel_args=self.channel_args)
        try:
            async for attempt in self._retrying():
                with attempt:
                    ready = await self._client.is_model_ready(self.model_name, client_timeout=self.connect_timeout_s)
            if not ready:
                raise EmbedderError(
                    f"Triton at {self.url} has model {self.model_name!r} not ready (is it loaded? "
                    f"`rag status` lists the server's state)"
                )
            config = (
                await self._client.get_model_config(self.model_name, client_timeout=self.connect_timeout_s)
            ).config
            outputs = {o.name: o for o in config.output}
            if "last_hidden_state" not in outputs:
                raise EmbedderError(f"model {self.model_name!r} on Triton has no output 'last_hidden_state'")
            served_dim = int(outputs["last_hidden_state"].dims[-1])
            if served_dim != self.spec.dim:
                raise EmbedderError(
                    f"model {self.model_name!r} on Triton outputs dim {served_dim}, model description says "
                    f"{self.spec.dim}"
                )
        except InferenceServerException as exc:
            await self.close()
            raise EmbedderError(
                f"Triton at {self.url} unreachable or not ready (model {self.model_name!r}, "
                f"{self.retries} attempt(s), {self.connect_timeout_s} s deadline each): {_describe(exc)}"
            ) from exc
        except BaseException:
            await self.close()
            raise
        self.max_batch_size = int(config.max_batch_size) or 1

    async def close(self) -> None:
        """Close the gRPC channel (idempotent); later `embed` calls raise `EmbedderError`."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def tokenize(self, texts: Sequence[str], kind: TextKind) -> list[list[int]]:
        """Token ids per text (query prefix added for queries), truncated at the model's `max_tokens`.

        Truncation keeps the first `max_tokens - 1` tokens and the final special token ([SEP]); each truncated
        text is logged at WARNING and counted in `stats.truncated_texts`.

        Raises:
            EmbedderError: a text is not a string, or is empty or whitespace only (names its index).
        """
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise EmbedderError(f"texts[{i}] is a {type(text).__name__}; expected str")
            if not text.strip():
                raise EmbedderError(f"texts[{i}] is empty or whitespace only; expected non-blank text")
        prefix = self.spec.query_prefix if kind == "query" else ""
        encodings = self.tokenizer.encode_batch([prefix + t for t in texts])
        ids: list[list[int]] = []
        for i, enc in enumerate(encodings):
            tokens = list(enc.ids)
            if len(tokens) > self.spec.max_tokens:
                self.stats.truncated_texts += 1
                log.warning(
                    "texts[%d] (%r...): %d tokens truncated to the model limit %d",
                    i,
                    texts[i][:40],
                    len(tokens),
                    self.spec.max_tokens,
                )
                tokens = tokens[: self.spec.max_tokens - 1] + tokens[-1:]
            ids.append(tokens)
        return ids

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        """Embed `texts` in order.

        Args:
            texts: non-blank strings of any length and script (longer than the model limit is truncated).
            kind: `query` adds the model's query instruction prefix; `document` adds nothing.

        Returns:
            `(len(texts), dim)` float32, L2-normalised rows.

        Raises:
            EmbedderError: not connected, blank input, Triton errors after retries, a timeout, or a non-finite
                output (names the texts).
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
            named = ", ".join(f"texts[{int(i)}] {texts[int(i)][:60]!r}" for i in bad[:5])
            raise EmbedderError(
                f"model {self.model_name!r} returned a non-finite embedding for {bad.size} text(s): {named}"
            )
        self.stats.texts += len(texts)
        return out

    async def _embed_group(self, token_ids: list[list[int]]) -> npt.NDArray[np.float32]:
        longest = max(len(t) for t in token_ids)
        length = next(b for b in self.buckets if b >= longest)
        input_ids = np.zeros((len(token_ids), length), dtype=np.int64)
        mask = np.zeros((len(token_ids), length), dtype=np.int64)
        for row, ids in enumerate(token_ids):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        async with self._in_flight:
            states = await self._infer(input_ids, mask)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            return pool_and_normalize(states, mask, self.spec.pooling)

    async def _infer(self, input_ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        inputs = [
            InferInput("input_ids", list(input_ids.shape), "INT64"),
            InferInput("attention_mask", list(mask.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(input_ids)
        inputs[1].set_data_from_numpy(mask)
        outputs = [InferRequestedOutput("last_hidden_state")]
        try:
            async for attempt in self._retrying():
                with attempt:
                    client = self._client
                    if client is None:
                        raise EmbedderError("TritonEmbedder was closed during the request")
                    with timed("triton_infer", model=self.model_name, batch=int(input_ids.shape[0])) as span:
                        start = time.perf_counter()
                        result = await client.infer(
                            self.model_name, inputs, outputs=outputs, client_timeout=self.timeout_s
                        )
                        self.latencies_ms.append((time.perf_counter() - start) * 1000)
                        span.set_attribute("tokens", int(input_ids.shape[1]))
        except InferenceServerException as exc:
            self.stats.failures += 1
            raise EmbedderError(
                f"Triton inference on {self.model_name!r} at {self.url} failed "
                f"({self.retries} attempt(s), {self.timeout_s} s deadline each): {_describe(exc)}"
            ) from exc
        self.stats.requests += 1
        states = result.as_numpy("last_hidden_state")
        if states is None:
            raise EmbedderError(f"Triton response from {self.model_name!r} has no last_hidden_state")
        states32: npt.NDArray[np.float32] = states.astype(np.float32, copy=False)
        return states32

    async def inference_statistics(self) -> dict[str, float]:
        """This embedder's model statistics on the server (Triton statistics extension), cumulative since load.

        Returns:
            `{"inference_count", "execution_count", "mean_batch", "success_count", "queue_ms", "compute_ms"}`:
            items inferred and model executions (their ratio is the mean batch the dynamic batcher formed; 0.0
            before the first execution), successful requests, and the mean queue and compute-infer time per
            successful request in ms (`*.ns / success.count`).

        Raises:
            EmbedderError: not connected, or Triton does not answer within `connect_timeout_s`.
        """
        client = self._require_client()
        try:
            response = await client.get_inference_statistics(self.model_name, client_timeout=self.connect_timeout_s)
        except InferenceServerException as exc:
            raise EmbedderError(
                f"Triton at {self.url}: statistics of {self.model_name!r} unavailable: {_describe(exc)}"
            ) from exc
        inferences = executions = successes = queue_ns = compute_ns = 0
        for entry in response.model_stats:  # one entry per loaded version
            inferences += int(entry.inference_count)
            executions += int(entry.execution_count)
            successes += int(entry.inference_stats.success.count)
            queue_ns += int(entry.inference_stats.queue.ns)
            compute_ns += int(entry.inference_stats.compute_infer.ns)
        return {
            "inference_count": float(inferences),
            "execution_count": float(executions),
            "mean_batch": inferences / executions if executions else 0.0,
            "success_count": float(successes),
            "queue_ms": queue_ns / successes / 1e6 if successes else 0.0,
            "compute_ms": compute_ns / successes / 1e6 if successes else 0.0,
        }

    def _require_client(self) -> grpcclient.InferenceServerClient:
        if self._client is None:
            raise EmbedderError("TritonEmbedder is not connected; use `async with` or call connect()")
        return self._client

    def latency_percentiles_ms(self, percentiles: Sequence[float] = (50, 95, 99)) -> dict[str, float]:
        """Percentiles of the recorded per-call latencies, ms (numpy `percentile`, linear interpolation).

        Returns:
            e.g. `{"p50": 4.1, "p95": 9.0, "p99": 12.3, "n": 812}`; empty when nothing was recorded.
        """
        if not self.latencies_ms:
            return {}
        values = np.percentile(np.fromiter(self.latencies_ms, dtype=np.float64), list(percentiles))
        summary = {f"p{p:g}": float(v) for p, v in zip(percentiles, values, strict=True)}
        summary["n"] = float(len(self.latencies_ms))
        return summary


def _describe(exc: InferenceServerException) -> str:
    status = exc.status() or ""
    if status == "StatusCode.DEADLINE_EXCEEDED":
        return f"deadline exceeded ({exc.message()})"
    return f"{status.removeprefix('StatusCode.') or 'error'}: {exc.message()}"
