"""The Python API for services: one async object owning the Triton client, the asyncpg pool and the LLM client.

    async with RagApp.from_settings() as app:
        result = await app.ask("Does vitamin D affect bone density?")
        async for event in app.ask_stream("..."):   # agent.events events, then the AskResult
            ...

One `RagApp` is safe to share across concurrent requests in one event loop: each `ask` gets its own run state;
the clients (gRPC channel, asyncpg pool, HTTP connection pool of the LLM client) are shared.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import get_args

import httpx
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.usage import UsageLimits

from agent.errors import LLMUnavailableError
from agent.events import AgentEvent
from agent.llm import build_model, check_tool_calling, model_settings
from agent.rag_agent import RagDeps, answer, build_agent
from agent.results import AskResult
from agent.settings import Policy, Settings
from agent.telemetry import answer_span
from tools.embedder import TritonEmbedder
from tools.ingest import IngestReport, ProgressFn, SourceDocument, ingest, ingest_documents, plan_inputs
from tools.model_specs import get_spec
from tools.retrieval import RetrievalResult, Retriever
from tools.store import IngestCounts, StoredDocument, VectorStore


def build_embedder(
    settings: Settings,
    *,
    model: str | None = None,
    timeout_s: float | None = None,
    buckets: Sequence[int] | None = None,
    max_in_flight: int | None = None,
) -> TritonEmbedder:
    """The Triton embedding client the settings describe: `TRITON_GRPC_URL`, `EMBEDDER_MODEL` (or `model`),
    `TRITON_TIMEOUT_S` (or `timeout_s`, seconds), `TRITON_RETRIES`, `TRITON_CONNECT_TIMEOUT_S`,
    `TRITON_MAX_IN_FLIGHT` and `EMBEDDER_TOKENIZER` (for the settings' own model). Not connected yet: use it as an
    async context manager.

    Args:
        buckets: the client's padded length buckets in tokens (default `tools.embedder.length_buckets`).
        max_in_flight: most concurrent requests this client sends (default `TRITON_MAX_IN_FLIGHT`; ingestion
            passes `INGEST_MAX_IN_FLIGHT`).

    Raises:
        KeyError: the model is not in `tools.model_specs`.
        ValueError: a timeout, retry or in-flight setting out of range (from `TritonEmbedder`).
    """
    name = model or settings.embedder_model
    return TritonEmbedder(
        settings.triton_grpc_url,
        get_spec(name),
        timeout_s=settings.triton_timeout_s if timeout_s is None else timeout_s,
        retries=settings.triton_retries,
        tokenizer_path=settings.embedder_tokenizer if name == settings.embedder_model else None,
        connect_timeout_s=settings.triton_connect_timeout_s,
        max_in_flight=max_in_flight or settings.triton_max_in_flight,
        buckets=buckets,
    )


def build_store(url: str, model_name: str, dim: int, settings: Settings) -> VectorStore:
    """The (unconnected) VectorStore at `url` for an embedder (`model_name`, `dim`) with the settings' pool and
    search options (pool size, statement timeout and cache, `hnsw.ef_search`, BM25 parameters and pruning)."""
    return VectorStore(
        url,
        model_name,
        dim,
        settings.db_pool_max_size,
        ef_search=settings.hnsw_ef_search,
        bm25_k1=settings.bm25_k1,
        bm25_b=settings.bm25_b,
        postings_per_term=settings.bm25_postings_per_term,
        command_timeout_s=settings.db_command_timeout_s,
        statement_cache_size=settings.db_statement_cache_size,
    )


def build_retriever(embedder: TritonEmbedder, store: VectorStore, settings: Settings) -> Retriever:
    """The Retriever the settings describe (mode, RRF k and weights, candidates, full-text ranking, BM25
    parameters, `hnsw.ef_search`), over `embedder` and `store`."""
    return Retriever(
        embedder,
        store,
        mode=settings.retrieval_mode,
        ef_search=settings.hnsw_ef_search,
        rrf_k=settings.rrf_k,
        candidates=settings.retrieval_candidates,
        weights=(settings.rrf_weight_dense, settings.rrf_weight_full_text),
        full_text_match=settings.full_text_match,
        full_text_rank=settings.full_text_rank,
        bm25_k1=settings.bm25_k1,
        bm25_b=settings.bm25_b,
    )


class RagApp:
    """Owns the clients; create with `RagApp.from_settings()` and use as an async context manager.

    On entry it connects to Triton and Postgres, and, when `settings.agent_policy` is `agentic`, checks that the
    LLM server accepts tool calls (`agent.llm.check_tool_calling`, raising `LLMConfigError` naming the missing
    server flags).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        settings.refusal_threshold()  # an uncalibrated embedder without REFUSAL_MIN_SCORE stops here, not mid-answer
        self.embedder = build_embedder(settings)
        self.spec = self.embedder.spec
        self.store = build_store(settings.resolved_database_url(), self.spec.name, self.spec.dim, settings)
        self.retriever = build_retriever(self.embedder, self.store, settings)
        self.usage_limits = UsageLimits(
            request_limit=settings.agent_request_limit,
            tool_calls_limit=settings.agent_tool_calls_limit,
            total_tokens_limit=settings.answer_token_budget,
        )
        self.agents: dict[Policy, Agent[RagDeps, str]] = {}
        self._tools_checked = False
        self._tools_lock = asyncio.Lock()
        self._stack = AsyncExitStack()

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> RagApp:
        """Build from `settings` (default: environment / `.env`)."""
        return cls(settings or Settings())

    async def __aenter__(self) -> RagApp:
        try:
            await self._stack.enter_async_context(self.embedder)
            await self._stack.enter_async_context(self.store)
            model, settings = build_model(self.settings), model_settings(self.settings)
            self.agents = {policy: build_agent(model, settings, policy) for policy in get_args(Policy)}
            if self.settings.agent_policy == "agentic":
                await self._check_tools()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _check_tools(self) -> None:
        async with self._tools_lock:
            if not self._tools_checked:
                await check_tool_calling(self.settings)
                self._tools_checked = True

    async def ask(
        self,
        question: str,
        top_k: int | None = None,
        on_text: Callable[[str], None] | None = None,
        *,
        policy: Policy | None = None,
        on_event: Callable[[AgentEvent], None] | None = None,
        history: Sequence[ModelMessage] | None = None,
        retrieval_query: str | None = None,
    ) -> AskResult:
        """Answer `question` from the stored documents with citations; see `agent.rag_agent.answer`.

        Args:
            top_k: passages retrieved up front (`always` policy); default `TOP_K`.
            on_text: receives the answer text as it streams (for chat interfaces).
            policy: `always` or `agentic`; default `AGENT_POLICY`.
            on_event: receives `agent.events` events (tool activity, text, restarts).
            history: earlier turns of a conversation (pydantic-ai messages).
            retrieval_query: what the `always` policy searches with, when it differs from the question (e.g. the
                bare claim, when the question wraps it in instructions); default the question.

        Raises:
            ValueError: blank question, top_k < 1.
            agent.errors.AgentError: a limit was hit or the LLM failed (typed subclasses).
            EmbedderError / StoreError: retrieval failed.
        """
        chosen: Policy = policy or self.settings.agent_policy
        if chosen == "agentic":
            await self._check_tools()
        deps = RagDeps(self.retriever, self.settings.top_k, self.settings.refusal_threshold(), on_event)
        with answer_span(chosen) as results:
            results.append(
                await answer(
                    self.agents[chosen],
                    deps,
                    question,
                    top_k,
                    on_text,
                    policy=chosen,
                    usage_limits=self.usage_limits,
                    timeout_s=self.settings.answer_timeout_s,
                    llm_timeout_s=self.settings.llm_timeout_s,
                    message_history=history,
                    retrieval_query=retrieval_query,
                )
            )
        return results[0]

    async def ask_stream(
        self, question: str, top_k: int | None = None, *, policy: Policy | None = None
    ) -> AsyncIterator[AgentEvent | AskResult]:
        """`ask` as an async iterator: `agent.events` events as they happen, then the `AskResult`.

        Errors of `ask` are raised from the iterator. Closing the iterator early cancels the answer.
        """
        queue: asyncio.Queue[AgentEvent] = asyncio.Queue()
        task = asyncio.create_task(self.ask(question, top_k, policy=policy, on_event=queue.put_nowait))
        try:
            while True:
                getter = asyncio.create_task(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                    continue
                getter.cancel()
                while not queue.empty():
                    yield queue.get_nowait()
                yield task.result()
                return
        finally:
            task.cancel()

    async def health(self) -> dict[str, dict[str, object]]:
        """Check each dependency: Triton (embeds one word), Postgres (counts documents), the LLM (`GET /models`).

        Returns:
            `{"triton" | "postgres" | "llm": {"ok": bool, "detail": str, "ms": float}}`; never raises.
        """

        async def timed(check: Callable[[], Awaitable[str]]) -> dict[str, object]:
            start = time.perf_counter()
            try:
                detail = await check()
                ok = True
            except Exception as exc:  # noqa: BLE001 - a health check reports any failure as data
                detail, ok = f"{type(exc).__name__}: {exc}", False
            return {"ok": ok, "detail": str(detail), "ms": round((time.perf_counter() - start) * 1000, 1)}

        async def triton() -> str:
            await self.embedder.embed(["health"], kind="query")
            return f"{self.embedder.model_name} at {self.settings.triton_grpc_url}"

        async def postgres() -> str:
            docs, chunks = await self.store.count()
            return f"{docs} documents, {chunks} chunks"

        async def llm() -> str:
            url = self.settings.llm_base_url.rstrip("/") + "/models"
            try:
                async with httpx.AsyncClient(timeout=5.0) as client:
                    response = await client.get(url, headers={"Authorization": f"Bearer {self.settings.llm_api_key}"})
            except httpx.HTTPError as exc:
                raise LLMUnavailableError(f"{url}: {exc!r}") from None
            if response.status_code != 200:
                raise LLMUnavailableError(f"{url}: HTTP {response.status_code}")
            served = [m.get("id") for m in response.json().get("data", [])]
            if self.settings.llm_model not in served:
                raise LLMUnavailableError(f"{url} serves {served}, not {self.settings.llm_model!r} (LLM_MODEL)")
            return f"{self.settings.llm_model} at {self.settings.llm_base_url} ({self.settings.llm_profile} profile)"

        results = await asyncio.gather(timed(triton), timed(postgres), timed(llm))
        return dict(zip(("triton", "postgres", "llm"), results, strict=True))

    async def search(self, query: str, top_k: int | None = None) -> RetrievalResult:
        """Retrieve numbered passages for `query` without the LLM."""
        return await self.retriever.search(query, top_k or self.settings.top_k)

    async def ingest(
        self,
        paths: list[Path],
        on_progress: ProgressFn | None = None,
        *,
        root: Path | None = None,
        prefix: str = "",
    ) -> IngestReport:
        """Ingest files (.jsonl BEIR corpus, .txt, .md) through `tools.ingest.ingest`: every input is scanned
        first (a malformed one stores nothing), then documents stream through chunking, embedding and storing
        in batches of `INGEST_BATCH_DOCS`, with an embedder of its own limited to `INGEST_MAX_IN_FLIGHT`
        requests in flight.

        Args:
            on_progress: called as `(documents handled, documents in all inputs, chunks written)` per batch.
            root, prefix: how .txt/.md files are named (see `tools.ingest.plan_inputs`).

        Raises:
            tools.ingest.IngestError: a path is missing, unreadable, unsupported, malformed, or two inputs get
                the same document id.
            EmbedderError / StoreError: Triton or Postgres failed; stored batches stay, re-running resumes.
        """
        inputs = plan_inputs(paths, root, prefix)
        async with build_embedder(self.settings, max_in_flight=self.settings.ingest_max_in_flight) as embedder:
            return await ingest(
                inputs,
                embedder,
                self.store,
                chunk_tokens=self.settings.chunk_tokens,
                overlap_tokens=self.settings.chunk_overlap_tokens,
                batch_docs=self.settings.ingest_batch_docs,
                on_progress=on_progress,
            )

    async def add_documents(self, documents: Sequence[SourceDocument]) -> IngestCounts:
        """Chunk, embed and store `documents` (e.g. from the HTTP API), `INGEST_BATCH_DOCS` per transaction; a
        document stored with the same content hash is skipped, one with another hash replaced.

        Raises:
            ValueError: a document's doc id is blank, or its doc id, title or text holds a NUL character (Postgres
                text cannot store it); checked for all before anything is stored.
            EmbedderError / StoreError: embedding or storing failed (batches already written stay).
        """
        for i, doc in enumerate(documents):
            if not doc.doc_id.strip():
                raise ValueError(f"documents[{i}].doc_id is blank; expected a non-blank id")
            if "\x00" in doc.doc_id + doc.title + doc.text:
                raise ValueError(f"documents[{i}] ({doc.doc_id!r}) holds a NUL character; expected text without NUL")
        total = IngestCounts()
        size = self.settings.ingest_batch_docs
        for i in range(0, len(documents), size):
            counts = await ingest_documents(
                list(documents[i : i + size]),
                self.embedder,
                self.store,
                self.settings.chunk_tokens,
                self.settings.chunk_overlap_tokens,
            )
            total = IngestCounts(
                total.added + counts.added, total.skipped + counts.skipped, total.chunks + counts.chunks
            )
        return total

    async def list_documents(self, limit: int | None = None, offset: int = 0) -> list[StoredDocument]:
        """Stored documents (doc id, title, source, chunk count, content hash, ingested at), ordered by doc id."""
        return await self.store.list_documents(limit=limit, offset=offset)

    async def delete_documents(self, doc_ids: Sequence[str] = (), source: str | None = None) -> list[str]:
        """Delete documents by id and/or by source (the path they were ingested from), chunks included; search
        and the agent never return them afterwards.

        Returns:
            The doc ids that were deleted (absent ids are not listed).

        Raises:
            ValueError: neither ids nor a source given.
            StoreError: the delete failed; nothing was deleted.
        """
        if not doc_ids and source is None:
            raise ValueError("nothing to delete: expected one or more doc ids or a source")
        return await self.store.delete_documents(doc_ids, source=source)
