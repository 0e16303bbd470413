"""The embedding client: `TritonEmbedder`, one per process, over `tritonclient.grpc.aio`.

Texts are tokenized and padded to length buckets (`tools.embedder.inputs`), split into requests of at most the
model's `max_batch_size`, sent concurrently, and reassembled in input order. The served graph pools and
L2-normalises (`infra/export_onnx.py`): each text comes back as `dim` floats of the output `sentence_embedding`;
the client only checks that they are finite.

Batching: at most `max_in_flight` requests of one client are at Triton at once (default twice the model's
`max_batch_size`, read at `connect()`: one full batch executing while the next forms), shared by all concurrent
`embed` calls, so concurrent single-text queries reach the dynamic batcher together. Bulk ingestion uses a client
of its own with a smaller limit (`INGEST_MAX_IN_FLIGHT`).

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
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.utils import InferenceServerException

from tools.embedder import server
from tools.embedder.channel import channel_options
from tools.embedder.errors import EmbedderError, EmbedderOverloadedError, describe, is_overload, is_transient
from tools.embedder.inputs import TextKind, length_buckets, pad_to_bucket, tokenize
from tools.embedder.stats import EmbedderStats
from tools.model_specs import EMBEDDING_OUTPUT, EmbeddingModelSpec
from tools.timing import timed
from tools.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

_BACKOFF_INITIAL_S = 0.1
_BACKOFF_MAX_S = 2.0


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
            retry=retry_if_exception(is_transient),
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
                f"{attempts} attempt(s), {self.connect_timeout_s} s deadline each): {describe(exc)}"
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
        """Token ids per text (`tools.embedder.inputs.tokenize`); truncated texts are counted in
        `stats.truncated_texts`.

        Raises:
            EmbedderError: a text is not a string, or is empty or whitespace only (names its index).
        """
        ids, truncated = tokenize(self.tokenizer, self.spec, texts, kind)
        self.stats.truncated_texts += truncated
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
                        self.stats.latencies_ms.append((time.perf_counter() - start) * 1000)
                        span.set_attribute("tokens", int(input_ids.shape[1]))
        except InferenceServerException as exc:
            self.stats.failures += 1
            error = EmbedderOverloadedError if is_overload(exc) else EmbedderError
            if error is EmbedderOverloadedError:
                self.stats.overloaded += 1
            raise error(
                f"Triton inference on {self.model_name!r} at {self.url} failed after {attempts} attempt(s) "
                f"({self.timeout_s} s deadline each): {describe(exc)}"
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
            `tools.embedder.server.summarize_counts`: inference and execution counts, mean batch, successful
            requests, mean queue and compute time per request in ms.

        Raises:
            EmbedderError: not connected, or Triton does not answer within `connect_timeout_s`.
        """
        client = self._require_client()
        counts = await server.model_counts(client, self.url, self.model_name, self.connect_timeout_s)
        return server.summarize_counts(counts)

    async def model_config(self, model: str | None = None) -> dict[str, Any]:
        """The configuration Triton serves for `model` (default this embedder's), as Triton's JSON object.

        Raises:
            EmbedderError: not connected, or Triton does not answer within `connect_timeout_s`.
        """
        client = self._require_client()
        return await server.model_config(client, self.url, model or self.model_name, self.connect_timeout_s)

    async def load_model(
        self,
        model: str | None = None,
        config: Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """(Re)load `model` (default this embedder's) on the server (`tools.embedder.server.load_model`).

        E.g. the benchmark drops `dynamic_batching`, a test sets a tiny `max_queue_size`; an earlier override stays
        until the saved config is loaded again.

        Raises:
            EmbedderError: not connected, the server runs without explicit model control, or the load failed.
        """
        client = self._require_client()
        await server.load_model(client, self.url, model or self.model_name, config, files)

    async def unload_model(self, model: str) -> None:
        """Unload `model` from the server; in-flight requests finish first.

        Raises:
            EmbedderError: not connected, or the server refused.
        """
        await server.unload_model(self._require_client(), self.url, model)

    def _require_client(self) -> grpcclient.InferenceServerClient:
        if self._client is None:
            raise EmbedderError("TritonEmbedder is not connected; use `async with` or call connect()")
        return self._client
