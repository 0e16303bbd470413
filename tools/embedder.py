"""Text embeddings from an ONNX encoder served by Triton, over `tritonclient.grpc.aio`.

One `TritonEmbedder` per process holds one long-lived gRPC channel. Texts are tokenized here, padded to a small
set of sequence-length buckets (`pad_to_bucket`; Triton's dynamic batcher only merges requests of identical shape),
split into requests of at most the model's `max_batch_size`, sent concurrently, and reassembled in input order. The
served graph pools and L2-normalises (`infra/export_onnx.py`): each text comes back as `dim` floats of the output
`sentence_embedding`; the client only checks that they are finite.

Batching: at most `max_in_flight` requests of one client are at Triton at once (default twice the model's
`max_batch_size`, read at `connect()`: one full batch executing while the next forms), shared by all concurrent
`embed` calls, so concurrent single-text queries reach the dynamic batcher together. Bulk ingestion uses a client
of its own with a smaller limit (`INGEST_MAX_IN_FLIGHT`).

Every input: blank text is refused before anything is sent; text longer than the model limit is truncated (logged
at WARNING and counted in `stats.truncated_texts`); any script, emoji or CJK without spaces goes through the
model's own tokenizer; a non-finite embedding raises `EmbedderError` naming the text and is never returned.

Failure: the readiness check on `connect()` and each inference call have deadlines (`connect_timeout_s`,
`timeout_s`, seconds); the inference deadline is also sent as Triton's request `timeout`, so a request whose caller
gave up is dropped from Triton's queue unrun. UNAVAILABLE / RESOURCE_EXHAUSTED answers are retried with jittered
exponential backoff (tenacity) up to `retries` attempts; anything else, or the last failure, becomes an
`EmbedderError` naming the server, the model, the attempts really made and the cause. Overload is not retried:
Triton refusing a request because the model's queue is full (`max_queue_size`) or because it waited longer than the
queue timeout, or this client waiting `timeout_s` for one of its `max_in_flight` slots, raises
`EmbedderOverloadedError` at once (an HTTP layer answers it with 503 and Retry-After). Worst case before an error:
`timeout_s` for a slot, then `retries * timeout_s + (retries - 1) * 2 s` of backoff.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
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

from tools.model_specs import EMBEDDING_OUTPUT, EmbeddingModelSpec
from tools.timing import timed
from tools.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

TextKind = Literal["query", "document"]

GRPC_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Minimum gRPC send/receive limit, bytes; a full bge-large request (64 x 512 int64 ids and mask) is 0.5 MiB and
its answer 256 KiB, but a custom model may return token states (64 x 512 x 1024 float32 = 128 MiB), far above
gRPC's 4 MiB default receive limit."""

_MESSAGE_LIMIT_KEYS = ("grpc.max_send_message_length", "grpc.max_receive_message_length")
_TRANSIENT = {"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"}
_OVERLOAD_MESSAGES = ("Exceeds maximum queue size", "Request timeout expired")
"""Triton's messages (status UNAVAILABLE) for a request refused by the model's queue policy: the queue is full
(`max_queue_size`), or the request waited longer than its queue timeout (`default_timeout_microseconds` or the
request's own `timeout`)."""
_BACKOFF_INITIAL_S = 0.1
_BACKOFF_MAX_S = 2.0


class EmbedderError(RuntimeError):
    """Embedding failed: bad input, Triton unreachable or not ready, a timeout, or a bad model output."""


class EmbedderOverloadedError(EmbedderError):
    """Triton (or this client) refused the request for lack of capacity; trying again later may succeed.

    Raised without retrying when Triton's queue for the model is full or the request outwaited its queue timeout
    (the model's `dynamic_batching.default_queue_policy`), and when this client waited `timeout_s` for a free
    in-flight slot. An HTTP API answers it with 503 Service Unavailable and a `Retry-After` header.
    """


@dataclass
class EmbedderStats:
    """Counters of one client since it was created (read them for logs or metrics).

    Attributes:
        requests: gRPC inference calls that returned a result.
        texts: texts embedded.
        truncated_texts: texts cut at the model's `max_tokens`.
        retries: transient failures that were retried.
        failures: inference calls that ended in an `EmbedderError`.
        overloaded: requests refused for lack of capacity (`EmbedderOverloadedError`; also counted in `failures`
            when Triton refused them).
    """

    requests: int = 0
    texts: int = 0
    truncated_texts: int = 0
    retries: int = 0
    failures: int = 0
    overloaded: int = 0


def _is_overload(exc: BaseException) -> bool:
    return (
        isinstance(exc, InferenceServerException)
        and exc.status() == "StatusCode.UNAVAILABLE"
        and any(m in (exc.message() or "") for m in _OVERLOAD_MESSAGES)
    )


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, InferenceServerException) and exc.status() in _TRANSIENT and not _is_overload(exc)


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


def pad_to_bucket(
    token_ids: Sequence[Sequence[int]], buckets: Sequence[int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Right-pad token id lists to the smallest bucket that holds the longest: the model's two inputs.

    Args:
        token_ids: one non-empty list of token ids per text, none longer than `buckets[-1]`.
        buckets: padded lengths, ascending (`length_buckets`).

    Returns:
        `input_ids` and `attention_mask`, both `(len(token_ids), bucket)` int64; padding is id 0 with mask 0.

    Raises:
        ValueError: no texts, or the longest is longer than the largest bucket.
    """
    if not token_ids:
        raise ValueError("token_ids is empty; expected at least one text")
    longest = max(len(ids) for ids in token_ids)
    length = next((b for b in buckets if b >= longest), None)
    if length is None:
        raise ValueError(f"a text has {longest} tokens, more than the largest bucket {buckets[-1]}")
    input_ids = np.zeros((len(token_ids), length), dtype=np.int64)
    mask = np.zeros((len(token_ids), length), dtype=np.int64)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
    return input_ids, mask


class TritonEmbedder:
    """Async client for one Triton-served embedding model.

    Args:
        url: Triton gRPC endpoint `host:port`.
        spec: the model's description (name, dim, max_tokens, pooling, query prefix).
        timeout_s: deadline of each gRPC inference request, seconds; also sent as Triton's request `timeout`
            (microseconds), which can shorten the model's queue timeout, and the longest wait for an in-flight slot.
        connect_timeout_s: deadline of each readiness / config request in `connect()`, seconds.
        retries: attempts per call (>= 1) for transient gRPC errors (UNAVAILABLE, RESOURCE_EXHAUSTED), with
            backoff of 0.1 s doubling up to 2 s, plus up to 0.1 s random jitter (capped at 2 s).
        tokenizer_path: the model's tokenizer.json (or its folder); default: from the model's package.
        model_name: Triton model to call; default `spec.name` (another name serves the same model under a
            different config, e.g. in the benchmark).
        channel_args: extra gRPC channel arguments, merged by `channel_options` (message limits stay large).
        max_in_flight: most inference requests this client has at Triton at once, over all concurrent `embed`
            calls; default (None) twice the model's `max_batch_size`, read at `connect()`, so the dynamic batcher
            can form full batches from concurrent single-text calls. Bulk ingestion passes a small number.
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
        max_in_flight: int | None = None,
        buckets: Sequence[int] | None = None,
    ) -> None:
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(
                f"timeouts must be > 0 s; got timeout_s={timeout_s}, connect_timeout_s={connect_timeout_s}"
            )
        if retries < 1 or (max_in_flight is not None and max_in_flight < 1):
            raise ValueError(f"retries and max_in_flight must be >= 1; got {retries}, {max_in_flight}")
        self.url = url
        self.spec = spec
        self.model_name = model_name or spec.name
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retries = retries
        self.channel_args = channel_options(channel_args)
        self._max_in_flight_arg = max_in_flight
        self.max_in_flight = max_in_flight or 0
        """Requests this client keeps at Triton at most; set by `connect()` when not given (0 before)."""
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
        self._in_flight = asyncio.Semaphore(max_in_flight or 1)

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
        """Open the channel, check server and model readiness, read `max_batch_size` and check the output.

        Sets `max_batch_size` and, unless given, `max_in_flight` (twice `max_batch_size`).

        Raises:
            EmbedderError: Triton is unreachable or not ready within `retries` attempts of `connect_timeout_s`
                each, the model is not loaded, or it does not serve `sentence_embedding` of width `spec.dim` (e.g.
                a graph exported before pooling moved into it: re-export with `python -m infra.export_onnx`).
        """
        if self._client is not None:
            return
        self._client = grpcclient.InferenceServerClient(self.url, channel_args=self.channel_args)
        attempts = 0
        try:
            async for attempt in self._retrying():
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    ready = await self._client.is_model_ready(self.model_name, client_timeout=self.connect_timeout_s)
            if not ready:
                raise EmbedderError(
                    f"Triton at {self.url} has model {self.model_name!r} not ready (is it loaded? "
                    f"`rag status` lists the server's state)"
                )
            config = (
                await self._client.get_model_config(self.model_name, client_timeout=self.connect_timeout_s)
            ).config
            outputs = {o.name: [int(d) for d in o.dims] for o in config.output}
            if outputs.get(EMBEDDING_OUTPUT) != [self.spec.dim]:
                raise EmbedderError(
                    f"model {self.model_name!r} on Triton serves outputs {outputs}; expected {EMBEDDING_OUTPUT!r} "
                    f"with dims [{self.spec.dim}] (the pooled graph of `python -m infra.export_onnx "
                    f"{self.spec.name}` and its config.pbtxt)"
                )
        except InferenceServerException as exc:
            await self.close()
            raise EmbedderError(
                f"Triton at {self.url} unreachable or not ready (model {self.model_name!r}, "
                f"{attempts} attempt(s), {self.connect_timeout_s} s deadline each): {_describe(exc)}"
            ) from exc
        except BaseException:
            await self.close()
            raise
        self.max_batch_size = int(config.max_batch_size) or 1
        if self._max_in_flight_arg is None:
            self.max_in_flight = 2 * self.max_batch_size
            self._in_flight = asyncio.Semaphore(self.max_in_flight)

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

        The call's requests (one per `max_batch_size` texts) go out concurrently, up to this client's
        `max_in_flight`; for bulk loads use a client with a small `max_in_flight` (`INGEST_MAX_IN_FLIGHT`), so its
        requests wait here rather than in Triton's bounded queue, where they could outwait its timeout.

        Args:
            texts: non-blank strings of any length and script (longer than the model limit is truncated).
            kind: `query` adds the model's query instruction prefix; `document` adds nothing.

        Returns:
            `(len(texts), dim)` float32, L2-normalised rows.

        Raises:
            EmbedderOverloadedError: Triton's queue for the model is full, a request outwaited its queue timeout,
                or no in-flight slot of this client came free within `timeout_s`.
            EmbedderError: not connected, blank input, Triton errors after retries, a timeout, or a non-finite
                output (names the texts).
        """
        self._require_client()
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
        input_ids, mask = pad_to_bucket(token_ids, self.buckets)
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._in_flight.acquire()
        except TimeoutError:
            self.stats.overloaded += 1
            raise EmbedderOverloadedError(
                f"no free slot for {self.model_name!r} within {self.timeout_s} s: this client's "
                f"{self.max_in_flight} requests in flight (max_in_flight) did not finish"
            ) from None
        try:
            return await self._infer(input_ids, mask)
        finally:
            self._in_flight.release()

    async def _infer(self, input_ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        inputs = [
            InferInput("input_ids", list(input_ids.shape), "INT64"),
            InferInput("attention_mask", list(mask.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(input_ids)
        inputs[1].set_data_from_numpy(mask)
        outputs = [InferRequestedOutput(EMBEDDING_OUTPUT)]
        attempts = 0
        try:
            async for attempt in self._retrying():
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    client = self._client
                    if client is None:
                        raise EmbedderError("TritonEmbedder was closed during the request")
                    with timed("triton_infer", model=self.model_name, batch=int(input_ids.shape[0])) as span:
                        start = time.perf_counter()
                        result = await client.infer(
                            self.model_name,
                            inputs,
                            outputs=outputs,
                            timeout=int(self.timeout_s * 1_000_000),
                            client_timeout=self.timeout_s,
                        )
                        self.latencies_ms.append((time.perf_counter() - start) * 1000)
                        span.set_attribute("tokens", int(input_ids.shape[1]))
        except InferenceServerException as exc:
            self.stats.failures += 1
            error = EmbedderOverloadedError if _is_overload(exc) else EmbedderError
            if error is EmbedderOverloadedError:
                self.stats.overloaded += 1
            raise error(
                f"Triton inference on {self.model_name!r} at {self.url} failed after {attempts} attempt(s) "
                f"({self.timeout_s} s deadline each): {_describe(exc)}"
            ) from exc
        self.stats.requests += 1
        vectors = result.as_numpy(EMBEDDING_OUTPUT)
        if vectors is None or vectors.shape != (input_ids.shape[0], self.spec.dim):
            shape = None if vectors is None else vectors.shape
            raise EmbedderError(
                f"Triton response from {self.model_name!r} has {EMBEDDING_OUTPUT!r} of shape {shape}; expected "
                f"({input_ids.shape[0]}, {self.spec.dim})"
            )
        vectors32: npt.NDArray[np.float32] = vectors.astype(np.float32, copy=False)
        return vectors32

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

    async def model_config(self, model: str | None = None) -> dict[str, Any]:
        """The configuration Triton serves for `model` (default this embedder's), as Triton's JSON object.

        Raises:
            EmbedderError: not connected, or Triton does not answer within `connect_timeout_s`.
        """
        client = self._require_client()
        name = model or self.model_name
        try:
            response = await client.get_model_config(name, as_json=True, client_timeout=self.connect_timeout_s)
        except InferenceServerException as exc:
            raise EmbedderError(f"Triton at {self.url}: config of {name!r} unavailable: {_describe(exc)}") from exc
        config: dict[str, Any] = response["config"]
        return config

    async def load_model(
        self,
        model: str | None = None,
        config: Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """(Re)load `model` (default this embedder's) on the server: Triton's model repository extension.

        Args:
            config: a config override (Triton's JSON form, as `model_config` returns it). None loads the
                repository's `config.pbtxt` for a model not loaded yet, but keeps the config of a loaded one (an
                earlier override stays: pass the saved config to restore it). E.g. the benchmark drops
                `dynamic_batching`, a test sets a tiny `max_queue_size`.
            files: model files sent with the override, `{"file:1/model.onnx": bytes}` (needs `config`).

        Raises:
            EmbedderError: not connected, the server runs without explicit model control, or the load failed
                (names the model and Triton's reason).
        """
        client = self._require_client()
        name = model or self.model_name
        try:
            await client.load_model(
                name, config=json.dumps(config) if config is not None else None, files=dict(files) if files else None
            )
        except InferenceServerException as exc:
            raise EmbedderError(f"Triton at {self.url}: loading {name!r} failed: {_describe(exc)}") from exc

    async def unload_model(self, model: str) -> None:
        """Unload `model` from the server (Triton's model repository extension); in-flight requests finish first.

        Raises:
            EmbedderError: not connected, or the server refused.
        """
        client = self._require_client()
        try:
            await client.unload_model(model)
        except InferenceServerException as exc:
            raise EmbedderError(f"Triton at {self.url}: unloading {model!r} failed: {_describe(exc)}") from exc

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
