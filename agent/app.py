"""The Python API for services: one async object owning the Triton client, the asyncpg pool and the LLM client.

    async with RagApp.from_settings() as app:
        result = await app.ask("Does vitamin D affect bone density?")

One `RagApp` is safe to share across concurrent requests in one event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

from agent.llm import build_model, model_settings
from agent.rag_agent import RagDeps, answer, build_agent
from agent.results import AskResult
from agent.settings import Settings
from infra.postgres import database_url
from tools.embedder import TritonEmbedder
from tools.ingest import check_paths, ingest_documents, read_documents
from tools.model_specs import get_spec
from tools.retrieval import RetrievalResult, Retriever
from tools.store import IngestCounts, VectorStore


class RagApp:
    """Owns the clients; create with `RagApp.from_settings()` and use as an async context manager."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.spec = get_spec(settings.embedder_model)
        self.embedder = TritonEmbedder(
            settings.triton_grpc_url,
            self.spec,
            timeout_s=settings.triton_timeout_s,
            tokenizer_path=settings.embedder_tokenizer,
        )
        self.store = VectorStore(database_url(settings), self.spec.name, self.spec.dim, settings.db_pool_max_size)
        self.retriever = Retriever(self.embedder, self.store, ef_search=settings.hnsw_ef_search)
        self._stack = AsyncExitStack()

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> RagApp:
        """Build from `settings` (default: environment / `.env`)."""
        return cls(settings or Settings())

    async def __aenter__(self) -> RagApp:
        try:
            await self._stack.enter_async_context(self.embedder)
            await self._stack.enter_async_context(self.store)
        except BaseException:
            await self._stack.aclose()
            raise
        self.agent = build_agent(build_model(self.settings), model_settings(self.settings))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def ask(
        self, question: str, top_k: int | None = None, on_text: Callable[[str], None] | None = None
    ) -> AskResult:
        """Answer `question` from the stored documents with citations; see `agent.rag_agent.answer`.

        Args:
            on_text: receives the answer text as it streams (for chat interfaces).
        """
        return await answer(self.agent, RagDeps(self.retriever, self.settings.top_k), question, top_k, on_text)

    async def search(self, query: str, top_k: int | None = None) -> RetrievalResult:
        """Retrieve numbered passages for `query` without the LLM."""
        return await self.retriever.search(query, top_k or self.settings.top_k)

    async def ingest(self, paths: list[Path], on_progress: Callable[[int, int], None] | None = None) -> IngestCounts:
        """Ingest files (.jsonl BEIR corpus, .txt, .md); all paths are checked before anything is stored.

        Args:
            on_progress: called as `(documents handled so far, total documents)` after each batch.

        Raises:
            tools.ingest.IngestError: a path is missing, unreadable, unsupported or malformed; every file is
                parsed before anything is stored, so a bad file stores nothing.
        """
        check_paths(paths)
        documents = [doc for path in paths for doc in read_documents(path)]  # parse everything before storing
        total = IngestCounts()
        size = self.settings.ingest_batch_docs
        for i in range(0, len(documents), size):
            counts = await ingest_documents(
                documents[i : i + size],
                self.embedder,
                self.store,
                self.settings.chunk_tokens,
                self.settings.chunk_overlap_tokens,
            )
            total = IngestCounts(
                total.added + counts.added, total.skipped + counts.skipped, total.chunks + counts.chunks
            )
            if on_progress is not None:
                on_progress(min(i + size, len(documents)), len(documents))
        return total
