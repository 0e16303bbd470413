"""The wiring of the service: every factory that turns `Settings` into a connected part, in one place that the CLI,
the HTTP API, the Python API (`agent.core.app.RagApp`) and the evals share.

- `build_embedder`, `build_store`, `build_retriever`: the Triton client, the Postgres store and the retrieval over
  them (ranked by `retrieval_config`), unconnected; `Clients` opens the first two together.
- `build_services`: what one `RagApp` uses (search, document library, conversations, answer cache, LLM model, health
  checks), as `Services`;
  tests build a `Services` of their own (e.g. over `tools.in_memory.InMemoryCollection` and a pydantic-ai
  `FunctionModel`).
- `build_agents`, `build_rewriter`, `answer_limits`: the agent per retrieval policy, the LLM rewrite of follow-ups
  (`FOLLOWUP_QUERY=rewrite`) and the bounds of one answer.
- `open_ingestion`: the ingestion service (`agent.core.ingestion`) over its own store, for the
  commands that only ingest (`rag ingest`, `rag sync`, `rag worker`, `rag jobs`); `rag serve` gets it in `Services`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits

from agent.config.settings import Policy, Settings
from agent.core.answer import AnswerLimits
from agent.core.answer_cache import AnswerCacheStore
from agent.core.context_window import ContextFitter
from agent.core.followup import LLMRewriter
from agent.core.grants import GrantStore, StoreGrants
from agent.core.ingestion import IngestionService
from agent.core.keys import KeyStore, StoreKeys
from agent.core.library import DocumentLibrary, StoreLibrary
from agent.core.llm import build_model, check_tool_calling, model_settings, served_model
from agent.core.rag_agent import RagDeps, build_agent
from agent.core.support import SupportChecker
from tools.conversations import ConversationLog
from tools.embedder import PRIORITY_BULK, PRIORITY_INTERACTIVE, TritonEmbedder
from tools.embedder.reranker import TritonReranker, get_reranker_spec
from tools.embedder.verifier import TritonVerifier, get_verifier_spec
from tools.extract.ocr import OcrOptions, default_workers
from tools.feedback import FeedbackLog
from tools.in_memory_conversations import InMemoryConversations
from tools.in_memory_feedback import InMemoryFeedback
from tools.ingest import IngestOptions
from tools.model_specs import get_spec
from tools.originals import Originals
from tools.retrieval import PassageSearch, Retriever
from tools.retrieval_config import RetrievalConfig
from tools.rm3 import Rm3Params
from tools.scope import DEFAULT_COLLECTION
from tools.store import VectorStore
from tools.store.answer_cache import PostgresAnswerCache
from tools.store.conversations import ConversationStore
from tools.store.feedback import PostgresFeedback
from tools.support import (
    CheckOptions,
    DecisionRule,
    EmbeddingSimilarity,
    LexicalSimilarity,
    PairClassifier,
    SentenceSimilarity,
    TextEmbedder,
)

HealthCheck = Callable[[], Awaitable[str]]
"""One dependency's check: returns a one-line detail, raises when the dependency is unusable."""


Workload = Literal["interactive", "bulk"]
"""Who an embedder serves: `interactive` (questions: the interactive model, Triton priority 1, TRITON_MAX_IN_FLIGHT)
or `bulk` (ingestion and uploads: EMBEDDER_MODEL, priority 2, INGEST_MAX_IN_FLIGHT)."""


def build_embedder(
    settings: Settings,
    *,
    workload: Workload = "interactive",
    model: str | None = None,
    timeout_s: float | None = None,
    buckets: Sequence[int] | None = None,
    max_in_flight: int | None = None,
) -> TritonEmbedder:
    """The Triton embedding client the settings describe for one workload: `TRITON_GRPC_URL`, the model,
    `TRITON_TIMEOUT_S` (or `timeout_s`, seconds), `TRITON_RETRIES`, `TRITON_CONNECT_TIMEOUT_S`,
    `TRITON_GRPC_CHANNEL_ARGS` and `EMBEDDER_TOKENIZER`. Not connected yet: use it as an async context manager.

    Interactive and bulk work never share a queue where the model repository serves the embedder twice: questions
    go to `Settings.embedder_interactive_model` (e.g. `all-minilm-l6-v2-query`, its own batcher and instance),
    ingestion to `EMBEDDER_MODEL`. Where one model serves both (production bge-large with `priority_levels: 2`),
    questions are sent at Triton priority 1 and bulk at 2, so queued questions are batched first.

    Args:
        workload: `interactive` (questions; `TRITON_MAX_IN_FLIGHT` requests at once) or `bulk` (ingestion;
            `INGEST_MAX_IN_FLIGHT`).
        model: another Triton model in `tools.model_specs` to call instead (e.g. the int8 variant); it is its own
            spec and sent at the workload's priority.
        buckets: the client's padded length buckets in tokens (default `tools.embedder.length_buckets`).
        max_in_flight: most concurrent requests this client sends (default: the workload's setting above).

    Raises:
        ValueError: the model is not in `tools.model_specs`, or a timeout, retry or in-flight setting is out of
            range (from `TritonEmbedder`).
    """
    spec = get_spec(model or settings.embedder_model)
    name = model or (settings.embedder_interactive_model if workload == "interactive" else settings.embedder_model)
    workload_in_flight = settings.triton_max_in_flight if workload == "interactive" else settings.ingest_max_in_flight
    return TritonEmbedder(
        settings.triton_grpc_url,
        spec,
        timeout_s=settings.triton_timeout_s if timeout_s is None else timeout_s,
        retries=settings.triton_retries,
        tokenizer_path=settings.embedder_tokenizer if spec.name == settings.embedder_model else None,
        connect_timeout_s=settings.triton_connect_timeout_s,
        model_name=name,
        max_in_flight=max_in_flight or workload_in_flight,
        buckets=buckets,
        channel_args=settings.triton_grpc_channel_args,
        priority=PRIORITY_INTERACTIVE if workload == "interactive" else PRIORITY_BULK,
    )


def build_store(url: str, model_name: str, dim: int, settings: Settings) -> VectorStore:
    """The (unconnected) VectorStore at `url` for an embedder (`model_name`, `dim`) with the settings' pool and
    search options (pool size, statement timeout and cache, `hnsw.ef_search`, BM25 parameters and pruning)."""
    return VectorStore(
        url,
        model_name,
        dim,
        settings.db_pool_max_size,
        write_pool_size=settings.db_write_pool_size,
        acquire_timeout_s=settings.db_acquire_timeout_s,
        read_urls=settings.database_read_urls,
        read_max_lag_s=settings.database_read_max_lag_s,
        ef_search=settings.hnsw_ef_search,
        bm25_k1=settings.bm25_k1,
        bm25_b=settings.bm25_b,
        postings_per_term=settings.bm25_postings_per_term,
        command_timeout_s=settings.db_command_timeout_s,
        statement_cache_size=settings.db_statement_cache_size,
    )


def settings_store(settings: Settings) -> VectorStore:
    """The (unconnected) VectorStore at `DATABASE_URL` for `EMBEDDER_MODEL`'s vectors (`build_store`): the one store of
    a process."""
    spec = get_spec(settings.embedder_model)
    return build_store(settings.resolved_database_url(), spec.name, spec.dim, settings)


def build_reranker(settings: Settings) -> TritonReranker:
    """The Triton cross-encoder client of the rerank step: `RERANKER_MODEL` at `TRITON_GRPC_URL`, at interactive
    priority, with the Triton timeouts, retries and channel arguments and `RERANKER_TOKENIZER`. Not connected yet.

    Raises:
        ValueError: unknown reranker model, or a setting out of range. LookupError / FileNotFoundError: no tokenizer.
    """
    return TritonReranker(
        settings.triton_grpc_url,
        get_reranker_spec(settings.reranker_model),
        tokenizer_path=settings.reranker_tokenizer,
        **_pair_client_options(settings),
    )


def _pair_client_options(settings: Settings) -> dict[str, Any]:
    """The Triton options both cross-encoder clients take from the settings (timeouts, retries, channel arguments,
    in-flight limit), at interactive priority: both run on a question's path."""
    return {
        "timeout_s": settings.triton_timeout_s,
        "retries": settings.triton_retries,
        "connect_timeout_s": settings.triton_connect_timeout_s,
        "channel_args": settings.triton_grpc_channel_args,
        "max_in_flight": settings.triton_max_in_flight,
        "priority": PRIORITY_INTERACTIVE,
    }


def build_verifier(settings: Settings) -> TritonVerifier:
    """The Triton client of the support check's verifier: `SUPPORT_MODEL` at `TRITON_GRPC_URL`, at interactive
    priority, with the Triton timeouts, retries, channel arguments and in-flight limit. Not connected yet.

    Raises:
        ValueError: unknown verifier model, or a setting out of range. LookupError / FileNotFoundError: no tokenizer.
    """
    return TritonVerifier(
        settings.triton_grpc_url, get_verifier_spec(settings.support_model), **_pair_client_options(settings)
    )


def build_support_checker(settings: Settings, embedder: TextEmbedder, classifier: PairClassifier) -> SupportChecker:
    """The support check the settings describe (`SUPPORT_CHECK`, `SUPPORT_CANDIDATES_BY`, `SUPPORT_CANDIDATES`,
    `SUPPORT_MAX_SENTENCES`, the verifier's thresholds from its spec, chosen on SciFact train folds) over `classifier`
    and, with `SUPPORT_CANDIDATES_BY=embedding`, `embedder`."""
    spec = get_verifier_spec(settings.support_model)
    rule = DecisionRule(spec.support_threshold, spec.contradict_threshold)
    options = CheckOptions(candidates=settings.support_candidates, rule=rule)
    similarity: SentenceSimilarity = (
        EmbeddingSimilarity(embedder) if settings.support_candidates_by == "embedding" else LexicalSimilarity()
    )
    return SupportChecker(similarity, classifier, options, settings.support_check, settings.support_max_sentences)


def ocr_options(settings: Settings) -> OcrOptions:
    """How pages without a text layer and images are read (`OCR`, `OCR_LANGUAGE`, `OCR_DPI`, `OCR_MIN_CHARS`,
    `OCR_WORKERS`, `OCR_MIN_CONFIDENCE`, `OCR_FILE_TIMEOUT_S`; unset workers: the CPUs, at most 4)."""
    return OcrOptions(
        enabled=settings.ocr,
        language=settings.ocr_language,
        dpi=settings.ocr_dpi,
        min_chars=settings.ocr_min_chars,
        min_confidence=settings.ocr_min_confidence,
        file_timeout_s=settings.ocr_file_timeout_s,
        workers=settings.ocr_workers or default_workers(),
    )


def ingest_options(settings: Settings, collection: str = DEFAULT_COLLECTION) -> IngestOptions:
    """The ingestion options the settings describe (`CHUNK_TOKENS`, `CHUNK_OVERLAP_TOKENS`, `INGEST_BATCH_DOCS`,
    `INGEST_MAX_FILE_BYTES`, the `OCR*` settings, `SYNC_IGNORE`, `SYNC_SETTLE_S`), for documents going into
    `collection`."""
    return IngestOptions(
        chunk_tokens=settings.chunk_tokens,
        overlap_tokens=settings.chunk_overlap_tokens,
        batch_docs=settings.ingest_batch_docs,
        max_file_bytes=settings.ingest_max_file_bytes,
        collection=collection,
        ocr=ocr_options(settings),
        ignore=settings.sync_ignore,
        settle_s=settings.sync_settle_s,
    )


def build_retriever(
    embedder: TritonEmbedder, store: VectorStore, settings: Settings, reranker: TritonReranker | None = None
) -> Retriever:
    """The Retriever the settings describe (`retrieval_config`, `RERANK_DEPTH` with `reranker`), over `embedder`
    and `store`."""
    return Retriever(embedder, store, retrieval_config(settings), reranker)


def retrieval_config(settings: Settings) -> RetrievalConfig:
    """How the settings say retrieval ranks: mode, candidates, fusion and its parameters, full-text ranking, BM25
    parameters, `hnsw.ef_search`, RM3 (None when off) and the rerank depth."""
    rm3 = Rm3Params(settings.rm3_fb_docs, settings.rm3_fb_terms, settings.rm3_original_weight) if settings.rm3 else None
    return RetrievalConfig(
        mode=settings.retrieval_mode,
        candidates=settings.retrieval_candidates,
        fusion=settings.fusion_method,
        rrf_k=settings.rrf_k,
        weights=(settings.rrf_weight_dense, settings.rrf_weight_full_text),
        alpha=settings.fusion_alpha,
        normalisation=settings.fusion_normalisation,
        full_text_match=settings.full_text_match,
        full_text_rank=settings.full_text_rank,
        bm25_k1=settings.bm25_k1,
        bm25_b=settings.bm25_b,
        ef_search=settings.hnsw_ef_search,
        rm3=rm3,
        rerank_depth=settings.rerank_depth,
    )


class Clients:
    """The Triton client and the Postgres store the settings describe, connected together as an async context
    manager (for the service, the benchmarks and the evals).

    Attributes:
        settings: what they were built from.
        embedder: `build_embedder(settings)`.
        store: `settings_store(settings)`: `DATABASE_URL`, for `EMBEDDER_MODEL`'s vectors.
        reranker: `build_reranker(settings)` when `RERANK_DEPTH` > 0, else None.
        verifier: `build_verifier(settings)` unless `SUPPORT_CHECK=off` (then None).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.embedder = build_embedder(settings)
        self.store = settings_store(settings)
        self.reranker = build_reranker(settings) if settings.rerank_depth > 0 else None
        self.verifier = build_verifier(settings) if settings.support_check != "off" else None
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Clients:
        try:
            await self._stack.enter_async_context(self.embedder)
            if self.reranker is not None:
                await self._stack.enter_async_context(self.reranker)
            if self.verifier is not None:
                await self._stack.enter_async_context(self.verifier)
            await self._stack.enter_async_context(self.store)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


@dataclass
class Services:
    """What one `RagApp` uses, built by `build_services` (or by a test).

    Attributes:
        search: the agent's retrieval (`tools.retrieval.PassageSearch`).
        library: stored documents: list, add, delete, count (`agent.core.library.DocumentLibrary`).
        model: the pydantic-ai model the agents call.
        checks: health check per dependency name (e.g. `triton`, `postgres`, `llm`).
        resources: opened in order when the app is entered, closed when it exits (clients, pools).
        tool_check: probes that the LLM server accepts tool calls (for the `agentic` policy); None: no probe.
        context: fits the `always` policy's passages to the LLM's context window; None: every passage is sent.
        conversations: stored conversations (`tools.conversations.ConversationLog`); default: in this process'
            memory (a test's `Services`), `build_services` keeps them in Postgres.
        answer_cache: where cached answers live (`agent.core.answer_cache`); None: no answer cache (a test's
            `Services` unless it passes one); `build_services` keeps them in Postgres when `ANSWER_CACHE` is on.
        support: the per-sentence support check (`agent.core.support`); None: no check (a test's `Services` unless
            it passes one); `build_services` builds it over the embedder and the verifier on Triton unless
            `SUPPORT_CHECK=off`.
        feedback: records of answers and their ratings (`tools.feedback`); default: in this process' memory (a
            test's `Services`), `build_services` keeps them in Postgres.
        ingestion: the document side (`agent.core.ingestion.IngestionService`: files, syncs, upload and sync jobs,
            workers) over the same store; None: this app queues no jobs (a test's `Services` unless it passes one;
            the job routes answer 503).
        keys: the API keys and their usage (`agent.core.keys.StoreKeys` in `rag serve`, over the same store);
            None: no keys (a test's `Services` unless it passes one, e.g. `agent.core.keys.InMemoryKeys`).
        grants: the grants of groups to collections (`agent.core.grants.StoreGrants` in `rag serve`, over the same
            store); None: no grants (a test's `Services` unless it passes one, e.g.
            `tools.in_memory_grants.InMemoryGrants`).
    """

    search: PassageSearch
    library: DocumentLibrary
    model: Model
    checks: Mapping[str, HealthCheck] = field(default_factory=dict)
    resources: Sequence[AbstractAsyncContextManager[Any]] = ()
    tool_check: Callable[[], Awaitable[None]] | None = None
    context: ContextFitter | None = None
    conversations: ConversationLog = field(default_factory=InMemoryConversations)
    answer_cache: AnswerCacheStore | None = None
    support: SupportChecker | None = None
    feedback: FeedbackLog = field(default_factory=InMemoryFeedback)
    ingestion: IngestionService | None = None
    keys: KeyStore | None = None
    grants: GrantStore | None = None


def build_ingestion(settings: Settings, store: VectorStore, *, workers: int = 0) -> IngestionService:
    """The ingestion service over `store` and a bulk embedder (`build_embedder(settings, workload="bulk")`), with
    the settings' ingestion options (`ingest_options`), originals (`build_originals`) and jobs settings, running
    `workers` job workers while entered."""
    return IngestionService(
        lambda: build_embedder(settings, workload="bulk"),
        store,
        ingest_options(settings),
        settings,
        originals=build_originals(settings),
        workers=workers,
    )


@asynccontextmanager
async def open_ingestion(settings: Settings) -> AsyncIterator[IngestionService]:
    """The ingestion service over the settings' store (`settings_store`), both open until exit: what `rag ingest`,
    `rag sync`, `rag worker` and `rag jobs` use (no LLM; Triton only once something is embedded).

    Raises:
        StoreError: Postgres is unreachable or holds another embedder's vectors.
    """
    async with settings_store(settings) as store, build_ingestion(settings, store) as service:
        yield service


def build_services(settings: Settings, *, serving: bool = False) -> Services:
    """The service's parts: `Retriever` over Triton and Postgres (`Clients`), the store-backed library and
    conversations, the OpenAI-compatible model (`agent.core.llm`), and checks of Triton (embeds one word), Postgres
    (reads one chunk row at most), the LLM (`GET /models` lists `LLM_MODEL`) and, with `RERANK_DEPTH` > 0, the
    reranker (scores one pair), and unless `SUPPORT_CHECK=off` the verifier (classifies one pair) with the support
    check over the interactive embedder and the verifier; the ingestion service over the same store (documents
    added on the bulk embedder). Nothing is connected until the app enters `resources`: one store, so one read and
    one write pool, per process.

    Args:
        serving: for `rag serve`: the originals folder is checked first (`check_originals`), the ingestion service
            runs `JOBS_SERVE_WORKERS` job workers, and the API keys (`StoreKeys`) are kept in the same store.

    Raises:
        KeyError: the embedder model is not in `tools.model_specs`.
        OriginalsNotWritableError: `serving`, `KEEP_ORIGINALS` on and `ORIGINALS_DIR` not writable.
    """
    if serving:  # the server keeps originals: fail the start now, not every upload later
        check_originals(settings)
    clients = Clients(settings)
    embedder, store = clients.embedder, clients.store

    async def triton() -> str:
        await embedder.embed(["health"], kind="query")
        return f"{embedder.model_name} at {settings.triton_grpc_url}"

    async def postgres() -> str:
        # `/health` is open and shared by every tenant: no document or chunk count, which would span collections
        await store.ping()
        return f"store of {store.model_name} vectors reachable"

    async def llm() -> str:
        return await served_model(settings)

    async def tools() -> None:
        await check_tool_calling(settings)

    checks: dict[str, HealthCheck] = {"triton": triton, "postgres": postgres, "llm": llm}
    reranker = clients.reranker
    if reranker is not None:

        async def rerank_check() -> str:
            await reranker.score("health", ["health"])
            return f"{reranker.model_name} at {settings.triton_grpc_url} (RERANK_DEPTH={settings.rerank_depth})"

        checks["reranker"] = rerank_check
    verifier = clients.verifier
    if verifier is not None:

        async def support_check() -> str:
            await verifier.classify([("health", "health")])
            return f"{verifier.model_name} at {settings.triton_grpc_url} (SUPPORT_CHECK={settings.support_check})"

        checks["verifier"] = support_check

    ingestion = build_ingestion(settings, store, workers=settings.jobs_serve_workers if serving else 0)
    keys = StoreKeys(store) if serving else None
    grants = StoreGrants(store) if serving else None
    return Services(
        search=build_retriever(embedder, store, settings, clients.reranker),
        library=StoreLibrary(store, ingestion),
        model=build_model(settings),
        checks=checks,
        resources=[clients, ingestion] if keys is None or grants is None else [clients, keys, grants, ingestion],
        tool_check=tools,
        context=ContextFitter(settings),
        conversations=ConversationStore(store),
        answer_cache=(
            PostgresAnswerCache(store, settings.answer_cache_ttl_s, settings.answer_cache_max_entries)
            if settings.answer_cache
            else None
        ),
        feedback=PostgresFeedback(store),
        support=None if verifier is None else build_support_checker(settings, embedder, verifier),
        ingestion=ingestion,
        keys=keys,
        grants=grants,
    )


def build_agents(model: Model, settings: Settings) -> dict[Policy, Agent[RagDeps, str]]:
    """One agent per retrieval policy over `model`, with the settings' request options
    (`agent.core.llm.model_settings`)."""
    options = model_settings(settings)
    return {policy: build_agent(model, options, policy) for policy in get_args(Policy)}


def build_rewriter(model: Model, settings: Settings) -> LLMRewriter | None:
    """The LLM rewrite of follow-ups over `model` with `FOLLOWUP_QUERY=rewrite` (`FOLLOWUP_REWRITE_MAX_TOKENS`,
    `FOLLOWUP_REWRITE_TIMEOUT_S`, the agent's frequency penalty); None with `condense`."""
    if settings.followup_query != "rewrite":
        return None
    return LLMRewriter(
        model,
        settings.followup_rewrite_max_tokens,
        settings.followup_rewrite_timeout_s,
        ModelSettings(frequency_penalty=settings.llm_frequency_penalty),
    )


def answer_limits(settings: Settings) -> AnswerLimits:
    """The bounds of one answer: `AGENT_REQUEST_LIMIT`, `AGENT_TOOL_CALLS_LIMIT`, `ANSWER_TOKEN_BUDGET`,
    `ANSWER_TIMEOUT_S` and (quoted in errors) `LLM_TIMEOUT_S`."""
    usage = UsageLimits(
        request_limit=settings.agent_request_limit,
        tool_calls_limit=settings.agent_tool_calls_limit,
        total_tokens_limit=settings.answer_token_budget,
    )
    return AnswerLimits(usage=usage, timeout_s=settings.answer_timeout_s, llm_timeout_s=settings.llm_timeout_s)


def build_originals(settings: Settings) -> Originals | None:
    """The store of original files (`ORIGINALS_DIR`), or None when `KEEP_ORIGINALS` is off."""
    return Originals(settings.originals_root) if settings.keep_originals else None


def check_originals(settings: Settings) -> None:
    """Start-up check of the processes that keep originals (`rag serve`, `rag worker`): with `KEEP_ORIGINALS` on,
    `ORIGINALS_DIR` must be writable.

    Raises:
        OriginalsNotWritableError: it is not (the message says what to do).
    """
    originals = build_originals(settings)
    if originals is not None:
        originals.check_writable()


async def run_check(check: HealthCheck, timeout_s: float | None = None) -> dict[str, object]:
    """`{"ok", "detail", "ms"}` of one health check; never raises (a failure is reported as data). With `timeout_s`
    the check is cancelled after that many seconds and reported failed (`TimeoutError`), so one slow dependency
    cannot hold the caller past its own deadline (a probe's timeout)."""
    start = time.perf_counter()
    try:
        detail, ok = await asyncio.wait_for(check(), timeout_s), True
    except TimeoutError:
        detail, ok = f"TimeoutError: no answer within {timeout_s} s (HEALTH_CHECK_TIMEOUT_S)", False
    except Exception as exc:  # noqa: BLE001 - a health check reports any failure as data
        detail, ok = f"{type(exc).__name__}: {exc}", False
    return {"ok": ok, "detail": str(detail), "ms": round((time.perf_counter() - start) * 1000, 1)}
