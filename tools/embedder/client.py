"""The embedding client: `TritonEmbedder`, one per process, over `tritonclient.grpc.aio`, on the machinery it shares
with the reranker (`TritonModelClient`: channels, slots, retries, stub failures, statistics, model loading).

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
`EmbedderError` naming the server, the model, the attempts really made and the cause. A Python-backend model whose
stub failed (`EmbedderStubFailedError`, local stack only) is not retried, and that server's answers are refused from
then on (later calls go to the other endpoints, if any): Triton may hand a later request the failed batch's answers.
Overload is not retried:
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
from typing import Any, Protocol, Self, TypedDict, Unpack

import numpy as np
import numpy.typing as npt
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)
from tokenizers import Tokenizer
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.utils import InferenceServerException

from tools.embedder import server
from tools.embedder.channel import channel_options, split_endpoints
from tools.embedder.endpoints import EndpointPool
from tools.embedder.errors import EmbedderStubFailedError, describe, is_overload, is_stub_failure, is_transient
from tools.embedder.inputs import InputSpec, check_model_inputs, input_tensors, length_buckets, pad_to_bucket, tokenize
from tools.embedder.metrics import SLOT_WAIT_SECONDS
from tools.embedder.stats import EmbedderStats
from tools.errors import EmbedderError, EmbedderOverloadedError
from tools.model_specs import EMBEDDING_OUTPUT, EmbeddingModelSpec
from tools.records import TextKind
from tools.timing import timed
from tools.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

PRIORITY_INTERACTIVE = 1
"""Triton request priority of a question's embedding: the highest level of a model with `priority_levels: 2`."""
PRIORITY_BULK = 2
"""Triton request priority of ingestion's embeddings: the lowest of `priority_levels: 2` (the configs' default)."""

_BACKOFF_INITIAL_S = 0.1
_BACKOFF_MAX_S = 2.0


class ServedModelSpec(Protocol):
    """What the client machinery needs of a model's description: its Triton name and its token limit."""

    @property
    def name(self) -> str:
        """Triton model name (directory under `model_repository/`)."""
        ...

    @property
    def max_tokens(self) -> int:
        """Longest input in tokens, special tokens included."""
        ...


class ClientOptions(TypedDict, total=False):
    """The keyword-only options of `TritonModelClient` (documented there), which its subclasses pass through."""

    connect_timeout_s: float
    model_name: str | None
    channel_args: Sequence[tuple[str, Any]] | Mapping[str, Any] | None
    max_in_flight: int | None
    buckets: Sequence[int] | None
    priority: int


class _EndpointUnreachableError(EmbedderError):
    """One endpoint did not answer at `connect()` (the others may)."""


class TritonModelClient:
    """Async client for one Triton-served model over token inputs, on one or more Triton endpoints: the machinery
    `TritonEmbedder` and `tools.embedder.reranker.TritonReranker` share (channels, readiness, in-flight slots,
    retries, stub failures, statistics, model loading). Subclasses name the output they read (`_check_outputs`)
    and turn texts into the token tensors sent by `_infer_in_slot`.

    Args:
        url: Triton gRPC endpoint(s): `host:port`, a gRPC target such as `dns:///host:port` (one channel; with the
            `round_robin` policy in `channel_args` it spreads calls over every resolved address), or a
            comma-separated list of either (one channel each, taken in turn; `tools.embedder.endpoints`).
        spec: the model's description (`name` and `max_tokens`, e.g. an `EmbeddingModelSpec`).
        tokenizer: the model's Hugging Face tokenizer (no padding or truncation configured).
        timeout_s: deadline of each gRPC inference request, seconds; also sent as Triton's request `timeout`
            (microseconds), which can shorten the model's queue timeout, and the longest wait for an in-flight slot.
        connect_timeout_s: deadline of each readiness / config request in `connect()`, seconds.
        retries: attempts per call (>= 1) for transient gRPC errors (UNAVAILABLE, RESOURCE_EXHAUSTED). Each
            attempt goes to the next endpoint, at once while an untried one is left; once every endpoint was tried,
            backoff of 0.1 s doubling up to 2 s, plus up to 0.1 s random jitter (capped at 2 s).
        model_name: Triton model to call; default `spec.name` (another name serves the same model under a
            different config, e.g. in the benchmark).
        channel_args: extra gRPC channel arguments (pairs, or a mapping such as `TRITON_GRPC_CHANNEL_ARGS`),
            merged by `channel_options` (message limits stay large).
        max_in_flight: most inference requests this client has at Triton at once, over all concurrent `embed`
            calls (or a subclass's calls) and all endpoints; default (None) twice the model's `max_batch_size` per
            listed endpoint, read at `connect()`, so the dynamic batcher can form full batches from concurrent
            single-text calls. Bulk ingestion passes a small number. Time spent waiting for a slot is the histogram
            `rag_embedder_slot_wait_seconds` (`tools.embedder.metrics`).
        buckets: padded sequence lengths to use instead of `length_buckets(spec.max_tokens)` (ascending; the
            model's `max_tokens` is appended if missing). Fewer buckets merge more requests on the server at the
            price of more padding.
        priority: Triton request priority sent with every request (`ModelInferRequest.priority`: 1 is the
            highest level; 0, the default, takes the model's `default_priority_level`). A model whose
            `dynamic_batching` declares `priority_levels` serves queued requests of a higher level first; Triton
            ignores the field for a model without priority levels (Triton docs, "Dynamic Batcher", Prioritization).
            The service sends `PRIORITY_INTERACTIVE` for questions and `PRIORITY_BULK` for ingestion.

    Raises:
        ValueError: a timeout, retry count or in-flight limit out of range, bad buckets, or a `url` that names no
            valid endpoint (`tools.embedder.channel.split_endpoints`).

    Use a subclass as an async context manager (`connect()` on entry, `close()` on exit). Keep one per process.
    """

    def __init__(
        self,
        url: str,
        spec: ServedModelSpec,
        tokenizer: Tokenizer,
        timeout_s: float = 30.0,
        retries: int = 3,
        *,
        connect_timeout_s: float = 5.0,
        model_name: str | None = None,
        channel_args: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
        max_in_flight: int | None = None,
        buckets: Sequence[int] | None = None,
        priority: int = 0,
    ) -> None:
        if priority < 0:
            raise ValueError(f"priority must be >= 0 (0: the model's default level); got {priority}")
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(
                f"timeouts must be > 0 s; got timeout_s={timeout_s}, connect_timeout_s={connect_timeout_s}"
            )
        if retries < 1 or (max_in_flight is not None and max_in_flight < 1):
            raise ValueError(f"retries and max_in_flight must be >= 1; got {retries}, {max_in_flight}")
        self.url = url
        self.endpoints = split_endpoints(url)
        self.spec = spec
        self.model_name = model_name or spec.name
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retries = retries
        self.priority = priority
        self.channel_args = channel_options(channel_args)
        self._max_in_flight_arg = max_in_flight
        self.max_in_flight = max_in_flight or 0
        """Requests this client keeps at Triton at most; set by `connect()` when not given (0 before)."""
        self.tokenizer = tokenizer
        self.buckets = length_buckets(spec.max_tokens) if buckets is None else sorted(set(buckets))
        if not self.buckets or self.buckets[0] < 1 or self.buckets[-1] > spec.max_tokens:
            raise ValueError(f"buckets {buckets} must lie in 1..{spec.max_tokens} (the model's max_tokens)")
        if self.buckets[-1] != spec.max_tokens:
            self.buckets.append(spec.max_tokens)
        self.max_batch_size = 0
        self.model_inputs: list[InputSpec] = []
        """`(name, datatype)` of every input the served model declares (its metadata, read by `connect()`); each
        request carries all of them."""
        self.stats = EmbedderStats()
        self._pool = EndpointPool(self.endpoints, self.channel_args)
        self._in_flight = asyncio.Semaphore(max_in_flight or 1)
        self._stub_failures: dict[int, str] = {}
        """Endpoint index -> the stub failure it answered (`EmbedderStubFailedError`): nothing it sends is used."""

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _retrying(self, endpoints: Sequence[str]) -> AsyncRetrying:
        """Tenacity's retry loop for transient errors, attempt k going to `endpoints[(k - 1) % len(endpoints)]`:
        no wait while an untried endpoint is left, jittered exponential backoff after each full round."""
        backoff = wait_exponential_jitter(multiplier=_BACKOFF_INITIAL_S, max=_BACKOFF_MAX_S, jitter=_BACKOFF_INITIAL_S)

        def wait(state: RetryCallState) -> float:
            return backoff(state) if state.attempt_number % len(endpoints) == 0 else 0.0

        def count_retry(state: RetryCallState) -> None:
            self.stats.retries += 1
            exc = state.outcome.exception() if state.outcome else None
            failed_at = endpoints[(state.attempt_number - 1) % len(endpoints)]
            log.warning("Triton at %s: %s; retry %d/%d", failed_at, exc, state.attempt_number, self.retries - 1)

        return AsyncRetrying(
            stop=stop_after_attempt(self.retries),
            wait=wait,
            retry=retry_if_exception(is_transient),
            before_sleep=count_retry,
            reraise=True,
        )

    async def connect(self) -> None:
        """Open the channels, check server and model readiness, read `max_batch_size` and the model's inputs, and
        check its output.

        Every endpoint is checked at once; with several, one that is unreachable is logged at WARNING and kept
        (calls try it last for a while, `tools.embedder.endpoints`), as long as one is ready. Sets
        `max_batch_size` and, unless given, `max_in_flight` (twice `max_batch_size` per endpoint).

        Raises:
            EmbedderError: no endpoint is reachable and ready within `retries` attempts of `connect_timeout_s`
                each, the model is not loaded, it declares an input the client cannot fill (names it; `input_ids`,
                `attention_mask` and `token_type_ids`, sent as zeros, are filled), or it does not serve
                `sentence_embedding` of width `spec.dim` (e.g. a graph exported before pooling moved into it:
                re-export with `python -m infra.export_onnx`).
        """
        if self._pool.is_open:
            return
        self._pool.open()
        try:
            checks = await asyncio.gather(
                *(self._check_endpoint(i) for i in range(len(self.endpoints))), return_exceptions=True
            )
            for check in checks:
                if isinstance(check, BaseException) and not isinstance(check, _EndpointUnreachableError):
                    raise check
            ready = [c for c in checks if not isinstance(c, BaseException)]
            if not ready:
                raise EmbedderError("; ".join(str(c) for c in checks))
        except BaseException:
            await self.close()
            raise
        for index, check in enumerate(checks):
            if isinstance(check, BaseException):
                self._pool.mark_down(index)
                log.warning("%s; calls go to the other endpoints first", check)
        self.max_batch_size = min(int(config.max_batch_size) for config, _ in ready) or 1
        self.model_inputs = ready[0][1]
        if self._max_in_flight_arg is None:
            self.max_in_flight = 2 * self.max_batch_size * len(self.endpoints)
            self._in_flight = asyncio.Semaphore(self.max_in_flight)

    async def _check_endpoint(self, index: int) -> tuple[Any, list[InputSpec]]:
        """Readiness, inputs and outputs of the model on endpoint `index`.

        Returns:
            Its config (Triton's ModelConfig) and the inputs its metadata declares (`check_model_inputs`).

        Raises:
            _EndpointUnreachableError: the server does not answer (transient errors after `retries` attempts).
            EmbedderError: the model is not ready, declares an input the client cannot fill, or serves the wrong
                output.
        """
        endpoint, client = self.endpoints[index], self._pool.client(index)
        attempts = 0
        try:
            async for attempt in self._retrying([endpoint]):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    ready = await client.is_model_ready(self.model_name, client_timeout=self.connect_timeout_s)
            if not ready:
                raise EmbedderError(
                    f"Triton at {endpoint} has model {self.model_name!r} not ready (is it loaded? "
                    f"`rag status` lists the server's state)"
                )
            config = (await client.get_model_config(self.model_name, client_timeout=self.connect_timeout_s)).config
            metadata = await client.get_model_metadata(self.model_name, client_timeout=self.connect_timeout_s)
        except InferenceServerException as exc:
            raise _EndpointUnreachableError(
                f"Triton at {endpoint} unreachable or not ready (model {self.model_name!r}, "
                f"{attempts} attempt(s), {self.connect_timeout_s} s deadline each): {describe(exc)}"
            ) from exc
        self._check_outputs({o.name: [int(d) for d in o.dims] for o in config.output}, endpoint)
        declared = [(i.name, i.datatype) for i in metadata.inputs]
        return config, check_model_inputs(declared, self.model_name, endpoint)

    def _check_outputs(self, outputs: dict[str, list[int]], endpoint: str) -> None:
        """Check the outputs the served model declares (name -> dims, batch axis excluded) at `connect()`.

        Raises:
            EmbedderError: the model does not serve what this client reads (names what it serves).
        """
        raise NotImplementedError

    async def close(self) -> None:
        """Close the gRPC channels (idempotent); later calls raise `EmbedderError`."""
        await self._pool.close()

    async def _infer_in_slot(self, tensors: Mapping[str, npt.NDArray[Any]], output: str) -> npt.NDArray[Any]:
        """Send one request once an in-flight slot is free; return its `output` as numpy.

        Args:
            tensors: one `(batch, seq)` tensor per declared model input (`self.model_inputs`), in that order, each in
                its declared datatype (`tools.embedder.inputs.input_tensors`).
            output: the output to request.

        Returns:
            the output tensor as Triton returned it (the caller checks its shape and values).

        Raises:
            EmbedderOverloadedError: no in-flight slot came free within `timeout_s`, or Triton refused the request
                for lack of capacity.
            EmbedderError: Triton errors after retries, a timeout, a failed stub, or no `output` in the response.
        """
        waited_from = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._in_flight.acquire()
        except TimeoutError:
            SLOT_WAIT_SECONDS.observe(time.perf_counter() - waited_from)
            self.stats.overloaded += 1
            raise EmbedderOverloadedError(
                f"no free slot for {self.model_name!r} within {self.timeout_s} s: this client's "
                f"{self.max_in_flight} requests in flight (max_in_flight) did not finish"
            ) from None
        SLOT_WAIT_SECONDS.observe(time.perf_counter() - waited_from)
        try:
            return await self._infer(tensors, output)
        finally:
            self._in_flight.release()

    async def _infer(self, tensors: Mapping[str, npt.NDArray[Any]], output: str) -> npt.NDArray[Any]:
        inputs = []
        for (name, datatype), tensor in zip(self.model_inputs, tensors.values(), strict=True):
            inputs.append(InferInput(name, list(tensor.shape), datatype))
            inputs[-1].set_data_from_numpy(tensor)
        input_ids = next(iter(tensors.values()))
        outputs = [InferRequestedOutput(output)]
        attempts = 0
        order = [i for i in self._pool.order() if i not in self._stub_failures] or self._pool.order()
        endpoint = self.endpoints[order[0]]
        try:
            async for attempt in self._retrying([self.endpoints[i] for i in order]):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    index = order[(attempts - 1) % len(order)]
                    endpoint, client = self.endpoints[index], self._pool.client(index)
                    with timed(
                        "triton_infer", model=self.model_name, batch=int(input_ids.shape[0]), endpoint=endpoint
                    ) as span:
                        start = time.perf_counter()
                        self._refuse_failed_stub(index)
                        try:
                            result = await client.infer(
                                self.model_name,
                                inputs,
                                outputs=outputs,
                                priority=self.priority,
                                timeout=int(self.timeout_s * 1_000_000),
                                client_timeout=self.timeout_s,
                            )
                        except InferenceServerException as exc:
                            if is_transient(exc):
                                self._pool.mark_down(index)
                            elif is_stub_failure(exc):
                                self._stub_failures.setdefault(index, describe(exc))
                                self._refuse_failed_stub(index)
                            raise
                        self._refuse_failed_stub(index)
                        self._pool.mark_up(index)
                        self.stats.latencies_ms.append((time.perf_counter() - start) * 1000)
                        span.set_attribute("tokens", int(input_ids.shape[1]))
        except InferenceServerException as exc:
            self.stats.failures += 1
            error = EmbedderOverloadedError if is_overload(exc) else EmbedderError
            if error is EmbedderOverloadedError:
                self.stats.overloaded += 1
            raise error(
                f"Triton inference on {self.model_name!r} failed after {attempts} attempt(s) ({self.timeout_s} s "
                f"deadline each; last at {endpoint}): {describe(exc)}"
            ) from exc
        self.stats.requests += 1
        values: npt.NDArray[Any] | None = result.as_numpy(output)
        if values is None:
            raise EmbedderError(f"Triton response from {self.model_name!r} has no {output!r} output")
        return values

    def _refuse_failed_stub(self, index: int) -> None:
        """Raise `EmbedderStubFailedError` if endpoint `index` answered a stub failure (then or earlier).

        Raises:
            EmbedderStubFailedError: names the server, the model and the first failure.
        """
        if index in self._stub_failures:
            self.stats.failures += 1
            raise EmbedderStubFailedError(
                f"Triton at {self.endpoints[index]}: the Python-backend stub of {self.model_name!r} failed "
                f"({self._stub_failures[index]}): that server may now answer a request with another's embeddings, "
                "so none of its answers is used. Restart it (`rag down` then `rag up` for the local stack); it "
                "happens when the stub gets no CPU for about a second (python_backend waits 1 s for its health mark)"
            )

    async def endpoint_statistics(self) -> dict[str, dict[str, float]]:
        """This embedder's model statistics on each endpoint (Triton statistics extension), cumulative since load.

        Returns:
            endpoint -> `tools.embedder.server.summarize_counts` (inference and execution counts, mean batch,
            successful requests, mean queue and compute time per request in ms). Under a `dns:///` target the
            figures are those of whichever server answered the statistics call.

        Raises:
            EmbedderError: not connected, or an endpoint does not answer within `connect_timeout_s` (names it).
        """
        counts = await self._endpoint_counts()
        return {endpoint: server.summarize_counts(c) for endpoint, c in counts.items()}

    async def inference_statistics(self) -> dict[str, float]:
        """This embedder's model statistics summed over its endpoints (`endpoint_statistics`' figures).

        Raises:
            EmbedderError: not connected, or an endpoint does not answer within `connect_timeout_s`.
        """
        per_endpoint = (await self._endpoint_counts()).values()
        total = {key: sum(c[key] for c in per_endpoint) for key in server.STATISTICS_COUNTS}
        return server.summarize_counts(total)

    async def _endpoint_counts(self) -> dict[str, dict[str, int]]:
        counts = await asyncio.gather(
            *(
                server.model_counts(self._pool.client(i), endpoint, self.model_name, self.connect_timeout_s)
                for i, endpoint in enumerate(self.endpoints)
            )
        )
        return dict(zip(self.endpoints, counts, strict=True))

    async def model_config(self, model: str | None = None) -> dict[str, Any]:
        """The configuration the first endpoint serves for `model` (default this embedder's), as Triton's JSON.

        Raises:
            EmbedderError: not connected, or Triton does not answer within `connect_timeout_s`.
        """
        name = model or self.model_name
        return await server.model_config(self._pool.client(0), self.endpoints[0], name, self.connect_timeout_s)

    async def load_model(
        self,
        model: str | None = None,
        config: Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """(Re)load `model` (default this embedder's) on every endpoint (`tools.embedder.server.load_model`).

        E.g. the benchmark drops `dynamic_batching`, a test sets a tiny `max_queue_size`; an earlier override stays
        until the saved config is loaded again.

        Raises:
            EmbedderError: not connected, a server runs without explicit model control, or a load failed.
        """
        name = model or self.model_name
        for i, endpoint in enumerate(self.endpoints):
            await server.load_model(self._pool.client(i), endpoint, name, config, files)

    async def unload_model(self, model: str) -> None:
        """Unload `model` from every endpoint; in-flight requests finish first.

        Raises:
            EmbedderError: not connected, or a server refused.
        """
        for i, endpoint in enumerate(self.endpoints):
            await server.unload_model(self._pool.client(i), endpoint, model)


class TritonEmbedder(TritonModelClient):
    """Async client for one Triton-served embedding model, on one or more Triton endpoints (`TritonModelClient`).

    Args:
        spec: the model's description (name, dim, max_tokens, pooling, query prefix).
        tokenizer_path: the model's tokenizer.json (or its folder); default: from the model's package.
        options: the keyword-only options of `TritonModelClient` (`ClientOptions`); `model_name` defaults to
            `spec.name` (another name serves the same model under a different config, e.g. in the benchmark).

    Raises:
        ValueError: as `TritonModelClient`, or an unknown model (`tools.tokenizer.load_tokenizer`).

    Use as `async with TritonEmbedder(...) as emb: vectors = await emb.embed(texts)`. Keep one per process.
    """

    def __init__(
        self,
        url: str,
        spec: EmbeddingModelSpec,
        timeout_s: float = 30.0,
        retries: int = 3,
        tokenizer_path: Path | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(url, spec, load_tokenizer(spec.name, tokenizer_path), timeout_s, retries, **options)
        self.spec: EmbeddingModelSpec = spec

    def _check_outputs(self, outputs: dict[str, list[int]], endpoint: str) -> None:
        """Raises:
        EmbedderError: the model does not serve `sentence_embedding` of width `spec.dim` (e.g. a graph exported
            before pooling moved into it: re-export with `python -m infra.export_onnx`).
        """
        if outputs.get(EMBEDDING_OUTPUT) != [self.spec.dim]:
            raise EmbedderError(
                f"model {self.model_name!r} on Triton at {endpoint} serves outputs {outputs}; expected "
                f"{EMBEDDING_OUTPUT!r} with dims [{self.spec.dim}] (the pooled graph of `python -m "
                f"infra.export_onnx {self.spec.name}` and its config.pbtxt)"
            )

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
        self._pool.client(0)  # not connected: EmbedderError before any work
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
        vectors = await self._infer_in_slot(input_tensors(self.model_inputs, input_ids, mask), EMBEDDING_OUTPUT)
        if vectors.shape != (input_ids.shape[0], self.spec.dim):
            raise EmbedderError(
                f"Triton response from {self.model_name!r} has {EMBEDDING_OUTPUT!r} of shape {vectors.shape}; "
                f"expected ({input_ids.shape[0]}, {self.spec.dim})"
            )
        vectors32: npt.NDArray[np.float32] = vectors.astype(np.float32, copy=False)
        return vectors32
