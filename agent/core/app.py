"""The Python API for services: `RagApp`, the composition root that answers questions over the stored documents.

    async with RagApp(settings) as app:
        result = await app.ask("Does vitamin D affect bone density?")
        async for event in app.ask_stream(AnswerRequest("...", top_k=3)):   # agent.core.events, then the AskResult
            ...
        conversation = await app.create_conversation()                      # a stored conversation (follow-ups)
        await app.ask("What raises homocysteine?", conversation=conversation)
        await app.ask("and what lowers it?", conversation=await app.conversation(conversation.id))

`RagApp(settings)` builds its parts with `agent.core.wiring.build_services` (Triton, Postgres, the LLM); a test passes
its own `Services`. One `RagApp` is safe to share across concurrent requests in one event loop: each answer gets its
own run state; the clients (gRPC channel, asyncpg pool, HTTP connection pool of the LLM client) are shared.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Unpack
from uuid import UUID

from agent.config.settings import Policy, Settings
from agent.core import pages
from agent.core.admission import AdmissionController, Ticket
from agent.core.answer import AnswerRequest, answer
from agent.core.answer_cache import BYPASS, AnswerCache
from agent.core.conversations import ConversationNotFoundError, follow_up
from agent.core.errors import InputError
from agent.core.events import AgentEvent, Queued, TextDelta
from agent.core.feedback import FeedbackDesk
from agent.core.ingestion import IngestionService
from agent.core.keys import CachedKeys
from agent.core.quotas import Quotas, meter_answer
from agent.core.rag_agent import RagDeps
from agent.core.results import AskResult, new_answer_id
from agent.core.telemetry import answer_span
from agent.core.wiring import Services, answer_limits, build_agents, build_rewriter, build_services, run_check
from agent.core.wiring import build_embedder as build_embedder  # the factories' home is agent.core.wiring; re-exported
from agent.core.wiring import build_retriever as build_retriever
from agent.core.wiring import build_store as build_store
from tools.access import UNRESTRICTED, Access, AccessError, check_groups
from tools.conversations import MAX_PAGE as MAX_CONVERSATION_PAGE
from tools.conversations import MAX_TITLE_CHARS, Conversation, ConversationLog, ConversationPage
from tools.conversations import decode_cursor as decode_conversation_cursor
from tools.errors import StoreError
from tools.feedback import Rated, Rating
from tools.ingest import SourceDocument
from tools.originals import Originals
from tools.records import MAX_PAGE, DocumentFilter, DocumentPage, IngestCounts, StoredDocument, decode_cursor
from tools.render_page import RenderedPage
from tools.retrieval import RetrievalResult
from tools.scope import DEFAULT_COLLECTION, ScopeError, SearchScope, check_collection

log = logging.getLogger(__name__)


def _show(request: AnswerRequest, result: AskResult) -> None:
    """Send a cached answer's text to the request's listeners, as one piece (a stream shows it like any answer)."""
    if request.on_text is not None:
        request.on_text(result.answer)
    if request.on_event is not None:
        request.on_event(TextDelta(text=result.answer))


class RagApp:
    """Answers questions with citations, and keeps the stored documents; use as an async context manager.

    Args:
        settings: default: environment / `.env`.
        services: the parts to use; default `agent.core.wiring.build_services(settings)`.

    On entry it opens the services' resources (Triton, Postgres) and, when `AGENT_POLICY` is `agentic`, checks that
    the LLM server accepts tool calls (`agent.core.llm.check_tool_calling`, raising `LLMConfigError` naming the missing
    server flags).

    Raises:
        agent.config.settings.SettingsError: an uncalibrated embedder without `REFUSAL_MIN_SCORE` (here, not
            mid-answer).
    """

    def __init__(self, settings: Settings | None = None, services: Services | None = None) -> None:
        self.settings = settings or Settings()
        self.originals = Originals(self.settings.originals_root)
        refusal_min_score = self.settings.refusal_threshold()
        self.services = services or build_services(self.settings)
        self.agents = build_agents(self.services.model, self.settings)
        self.limits = answer_limits(self.settings)
        self.deps = RagDeps(
            self.services.search,
            self.settings.top_k,
            refusal_min_score,
            context=self.services.context,
            rewriter=build_rewriter(self.services.model, self.settings),
            support=self.services.support,
        )
        self.admission = AdmissionController(
            self.settings.answer_max_in_progress,
            self.settings.answer_queue_max,
            self.settings.answer_queue_deadline_s,
            key_share=self.settings.answer_key_share,
        )
        cache_store = self.services.answer_cache
        self.answer_cache = (
            AnswerCache(cache_store, self.settings) if cache_store is not None and self.settings.answer_cache else None
        )
        self.feedback = FeedbackDesk(self.services.feedback, self.settings)
        self.keys: CachedKeys | None = None
        """The services' API keys behind a cache (`API_KEYS_CACHE_S`), set on entry; None: no keys."""
        self.quotas: Quotas | None = None
        """The keys' quotas and usage (`agent.core.quotas`), set on entry with the keys; None: no keys."""
        self._tools_checked = self.services.tool_check is None
        self._tools_lock = asyncio.Lock()
        self._stack = AsyncExitStack()

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> RagApp:
        """`RagApp(settings)`."""
        return cls(settings)

    async def __aenter__(self) -> RagApp:
        try:
            for resource in self.services.resources:
                await self._stack.enter_async_context(resource)
            keys = self.services.keys
            if keys is not None:
                self.keys = CachedKeys(keys, self.settings.api_keys_cache_s)
                self.quotas = Quotas(self.settings, keys.usage)
            if self.settings.agent_policy == "agentic":
                await self._check_tools()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.feedback.settled()  # the answer records still being written, before the pool closes
        finally:
            await self._stack.aclose()

    @property
    def ingestion(self) -> IngestionService | None:
        """The document side (`agent.core.ingestion`: files, syncs, upload and sync jobs); None: this app queues no
        jobs."""
        return self.services.ingestion

    async def _check_tools(self) -> None:
        async with self._tools_lock:
            if not self._tools_checked and self.services.tool_check is not None:
                await self.services.tool_check()
                self._tools_checked = True

    async def ask(
        self, request: AnswerRequest | str, *, admission: Ticket | None = None, conversation: Conversation | None = None
    ) -> AskResult:
        """Answer a question from the stored documents with citations; see `agent.core.answer.answer`.

        The answer cache (`agent.core.answer_cache`, `ANSWER_CACHE`) comes first: a first-turn question asked before
        over the same documents is answered from it (`AskResult.cached`), with no admission wait, embedding or LLM
        call, and a complete new answer is stored in it. Admission control (`agent.core.admission`,
        `self.admission`) comes next: with `ANSWER_MAX_IN_PROGRESS` answers
        in progress the question waits in the queue (`request.on_event` receives `Queued` events with its position),
        or is refused at once with `OverloadedError`, before any embedding or LLM work.

        Args:
            request: the question and its options (`AnswerRequest`); a plain string is the question with the
                app's defaults (`TOP_K`, `AGENT_POLICY`).
            admission: a place taken beforehand with `self.admission.enter()` (the HTTP API takes it before its
                response starts, so that a refusal is a 503); closed when the answer ends. Default: taken now.
            conversation: the stored conversation the question follows (from `self.conversation(id)`; its last
                `CHAT_HISTORY_TURNS` turns are used): they are the answer's history and the search query is
                `agent.core.followup.search_query` of their questions (`agent.core.conversations.follow_up`). The
                question's turn number is reserved when it arrives (before admission), so concurrent questions keep
                the order they arrived in; the finished answer (a refusal included) fills it, and a failed,
                refused-by-admission or cancelled answer releases it (nothing of it is stored).

        Raises:
            agent.core.conversations.ConversationNotFoundError: the conversation is gone when the question arrives, or
                was deleted while the answer ran (the answer is not stored).
            agent.core.errors.OverloadedError: refused by admission control (queue full, a wait that cannot be promised
                within `ANSWER_QUEUE_DEADLINE_S`, or twice that in the queue); `retry_after_s` says when to retry.
            agent.core.errors.InputError: blank question, top_k < 1.
            agent.core.errors.AgentError: a limit was hit or the LLM failed (typed subclasses).
            EmbedderError / StoreError: retrieval failed.
        """
        request = AnswerRequest(request) if isinstance(request, str) else request
        if conversation is None:
            return await self._answer(request, admission)
        try:
            turn = await self.conversations.reserve_turn(conversation.id, request.question)
            if turn is None:
                raise ConversationNotFoundError(conversation.id)
        except BaseException:
            if admission is not None:
                admission.close()  # the place taken beforehand is not used
            raise
        try:
            result = await self._answer(
                follow_up(request, conversation.turns, self.settings.chat_history_turns), admission
            )
            await self._store_turn(conversation.id, turn, result)
        except BaseException:
            await asyncio.shield(self._release_turn(conversation.id, turn))
            raise
        return result

    async def _answer(self, request: AnswerRequest, admission: Ticket | None) -> AskResult:
        """`ask` without a conversation: the answer cache (a hit returns at once, its admission place given back
        unused), admission, the answer, then its store in the cache."""
        try:
            looked = BYPASS if self.answer_cache is None else await self.answer_cache.lookup(request)
        except BaseException:
            if admission is not None:
                admission.close()
            raise
        if looked.hit is not None:
            if admission is not None:
                admission.close()
            _show(request, looked.hit)
            return self._identified(request, looked.hit)
        ticket = admission or self.admission.enter()
        on_event = request.on_event
        on_position = None if on_event is None else (lambda position: on_event(Queued(position=position)))
        async with ticket.slot(on_position):
            policy: Policy = request.policy or self.settings.agent_policy
            if policy == "agentic":
                await self._check_tools()
            with answer_span(policy) as results:
                results.append(
                    await answer(self.agents[policy], self.deps, replace(request, policy=policy), self.limits)
                )
        result = self._identified(request, results[0])
        meter_answer(result)  # the caller's key's usage (agent.core.quotas), when the request is metered
        if self.answer_cache is not None:
            await self.answer_cache.store(looked, result)
        return result

    def _identified(self, request: AnswerRequest, result: AskResult) -> AskResult:
        """`result` with its answer id (`request.answer_id`, else a fresh one: a cached answer gets its own per
        response), its record written in the background (`agent.core.feedback`)."""
        result = result.model_copy(update={"answer_id": request.answer_id or new_answer_id()})
        self.feedback.remember(request, result)
        return result

    async def rate(
        self,
        answer_id: str,
        rating: Rating,
        *,
        comment: str | None = None,
        right_source: str | None = None,
        owner: str | None = None,
    ) -> Rated:
        """Rate an answer (`AskResult.answer_id`, or a completion id `chatcmpl-<answer id>`): `up` or `down`, with an
        optional comment and the document or chunk id that should have answered (`right_source`); a second rating
        replaces the first (keeping its comment and source unless new ones are given). See
        `agent.core.feedback.FeedbackDesk.rate`.

        Args:
            owner: the API key id rating (None: the admin, any answer); a key rates only the answers it asked.

        Raises:
            agent.core.errors.InputError: a bad id or rating, a comment over 2000 characters, a NUL character.
            agent.core.feedback.AnswerNotFoundError: no such answer for `owner` (or `FEEDBACK_RETENTION_DAYS=0`).
        """
        return await self.feedback.rate(answer_id, rating, comment=comment, right_source=right_source, owner=owner)

    async def _store_turn(self, conversation_id: UUID, turn: int, result: AskResult) -> None:
        citations = [c.model_dump(mode="json") for c in result.citations]
        stored = await self.conversations.fill_turn(conversation_id, turn, result.answer, citations, result.refused)
        if stored is None:
            raise ConversationNotFoundError(conversation_id, " any more (deleted while the answer was written)")

    async def _release_turn(self, conversation_id: UUID, turn: int) -> None:
        """Release a reserved turn whose answer did not finish; a store failure is logged, not raised (the answer's
        own error is the one to report; the reserved turn stays invisible)."""
        try:
            await self.conversations.release_turn(conversation_id, turn)
        except Exception:
            log.warning("could not release turn %d of conversation %s", turn, conversation_id, exc_info=True)

    async def ask_stream(
        self, request: AnswerRequest | str, *, admission: Ticket | None = None, conversation: Conversation | None = None
    ) -> AsyncIterator[AgentEvent | AskResult]:
        """`ask` as an async iterator: `agent.core.events` events as they happen (`Queued` while it waits for a slot),
        then the `AskResult` (stored in `conversation` first, when given).

        Errors of `ask` are raised from the iterator (`OverloadedError` first, when refused). Closing the iterator
        early cancels the answer, and a queued answer leaves the queue.
        """
        request = AnswerRequest(request) if isinstance(request, str) else request
        queue: asyncio.Queue[AgentEvent] = asyncio.Queue()
        task = asyncio.create_task(
            self.ask(replace(request, on_event=queue.put_nowait), admission=admission, conversation=conversation)
        )
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

    @property
    def conversations(self) -> ConversationLog:
        """The stored conversations (`Services.conversations`)."""
        return self.services.conversations

    async def create_conversation(self, title: str = "", owner: str | None = None) -> Conversation:
        """A new, empty conversation; without a title it is named after its first question.

        Args:
            owner: the API key id that owns it (None: no key, or the admin key).

        Raises:
            agent.core.errors.InputError: a title over 200 characters or with a NUL character.
        """
        if len(title) > MAX_TITLE_CHARS or "\x00" in title:
            raise InputError(f"title of {len(title)} characters; expected at most {MAX_TITLE_CHARS}, without NUL")
        return await self.conversations.create(title.strip(), owner)

    async def conversation(
        self,
        conversation_id: UUID,
        *,
        last_turns: int | None = None,
        owner: str | None = None,
        access: Access = UNRESTRICTED,
    ) -> Conversation:
        """The stored conversation with its turns, oldest first (the last `last_turns` when given).

        Args:
            owner: only a conversation of this API key id (None: any).
            access: whose reading this is (`tools.access`): a turn citing a chunk it may not read is left out.

        Raises:
            agent.core.conversations.ConversationNotFoundError: no such conversation (for `owner`).
        """
        found = await self.conversations.get(conversation_id, last_turns=last_turns, owner=owner, access=access)
        if found is None:
            raise ConversationNotFoundError(conversation_id)
        return found

    async def conversation_page(
        self, limit: int = 50, cursor: str | None = None, owner: str | None = None
    ) -> ConversationPage:
        """One page of conversations (without their turns), most recently updated first, after `cursor` (a
        previous page's `next_cursor`), with the total and the next page's cursor (None on the last page).

        Raises:
            agent.core.errors.InputError: `limit` outside 1..1000 or a cursor this service did not issue.
        """
        if not 1 <= limit <= MAX_CONVERSATION_PAGE:
            raise InputError(f"limit={limit}; expected 1..{MAX_CONVERSATION_PAGE}")
        if cursor is not None:
            try:
                decode_conversation_cursor(cursor)
            except StoreError as exc:
                raise InputError(str(exc)) from exc
        return await self.conversations.page(limit, cursor, owner)

    async def delete_conversation(self, conversation_id: UUID, owner: str | None = None) -> None:
        """Delete a conversation and its turns.

        Raises:
            agent.core.conversations.ConversationNotFoundError: no such conversation (for `owner`).
        """
        if not await self.conversations.delete(conversation_id, owner):
            raise ConversationNotFoundError(conversation_id)

    async def health(self) -> dict[str, dict[str, object]]:
        """Run every dependency's check concurrently (`Services.checks`), each bounded by `HEALTH_CHECK_TIMEOUT_S`.

        Returns:
            `{name: {"ok": bool, "detail": str, "ms": float}}`; never raises.
        """
        names = list(self.services.checks)
        timeout_s = self.settings.health_check_timeout_s
        results = await asyncio.gather(*(run_check(self.services.checks[name], timeout_s) for name in names))
        return dict(zip(names, results, strict=True))

    async def search(self, query: str, top_k: int | None = None, scope: SearchScope | None = None) -> RetrievalResult:
        """Retrieve numbered passages for `query` without the LLM (default `TOP_K` of them), only from the documents
        in `scope` (None: all).

        Raises:
            agent.core.errors.InputError: blank query or top_k < 1.
        """
        if not query.strip():
            raise InputError("query is empty; expected a non-blank query")
        if top_k is not None and top_k < 1:
            raise InputError(f"top_k={top_k}; expected >= 1")
        return await self.services.search.search(query, top_k or self.settings.top_k, scope)

    async def get_document(self, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
        """(title, full text) of the stored document `doc_id` in `scope` (None: any); None when it is not stored
        there.

        Raises:
            agent.core.errors.InputError: blank doc id.
            StoreError: the store failed.
        """
        if not doc_id.strip():
            raise InputError("doc_id is empty; expected a stored document's id")
        return await self.services.search.get_document(doc_id, scope)

    async def add_documents(
        self, documents: Sequence[SourceDocument], *, collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Chunk, embed and store `documents` (e.g. from the HTTP API) in `collection`, `INGEST_BATCH_DOCS` per
        transaction; a document stored there with the same content hash is skipped, one with another hash replaced.

        Raises:
            agent.core.errors.InputError: an invalid collection name, a document's doc id is blank, or its doc id, title
                or text holds a NUL character (Postgres text cannot store it); checked for all before anything is
                stored.
            EmbedderError / StoreError: embedding or storing failed (batches already written stay).
        """
        try:
            check_collection(collection)
        except ScopeError as exc:
            raise InputError(str(exc)) from None
        for i, doc in enumerate(documents):
            if not doc.doc_id.strip():
                raise InputError(f"documents[{i}].doc_id is blank; expected a non-blank id")
            if "\x00" in doc.doc_id + doc.title + doc.text:
                raise InputError(f"documents[{i}] ({doc.doc_id!r}) holds a NUL character; expected text without NUL")
        return await self.services.library.add_documents(documents, collection=collection)

    async def set_document_groups(
        self, doc_id: str, groups: Sequence[str], collection: str = DEFAULT_COLLECTION, *, access: Access = UNRESTRICTED
    ) -> bool:
        """Set the groups allowed to read document `doc_id` of `collection` (none: `PUBLIC_GROUP`, every caller), on
        the document and its chunks, without re-embedding; cached answers built from the collection are not served
        again. False when no such document is stored or `access` cannot read it (the same answer for both).

        Raises:
            agent.core.errors.InputError: an invalid collection or group name.
            StoreError: the store failed.
        """
        try:
            check_collection(collection)
            names = check_groups(groups)
        except (ScopeError, AccessError) as exc:
            raise InputError(str(exc)) from None
        if not access.unrestricted:
            scope = SearchScope(collections=(collection,)).read_by(access)
            if await self.services.search.get_document(doc_id, scope) is None:
                return False
        return await self.services.library.set_document_groups(doc_id, names, collection)

    async def list_documents(
        self,
        limit: int | None = None,
        offset: int = 0,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> list[StoredDocument]:
        """Stored documents of `collections` (None: all) that `access` may read (doc id, title, source, chunk count,
        content hash, ingested at, collection), ordered by doc id."""
        return await self.services.library.list_documents(
            limit=limit, offset=offset, collections=collections, access=access
        )

    async def document_page(
        self, limit: int = 100, cursor: str | None = None, offset: int = 0, **where: Unpack[DocumentFilter]
    ) -> DocumentPage:
        """One page of stored documents of `where["collections"]` (absent or None: all) ordered by doc id, after
        `cursor` (a previous page's `next_cursor`) and `offset` more, with the total stored in them and the next
        page's cursor (None on the last page); documents of other collections are neither listed nor counted.
        `where["matching"]` (absent, None or empty: no narrowing) keeps only those whose doc id or title contains it,
        case-insensitively; the total counts those (`tools.records.DocumentFilter`).

        Raises:
            agent.core.errors.InputError: `limit` outside 1..10,000, a negative `offset`, or a cursor this service did
                not issue.
        """
        if not 1 <= limit <= MAX_PAGE or offset < 0:
            raise InputError(f"limit={limit}, offset={offset}; expected 1..{MAX_PAGE} and >= 0")
        if cursor is not None:
            try:
                decode_cursor(cursor)
            except StoreError as exc:
                raise InputError(str(exc)) from exc
        return await self.services.library.document_page(limit, cursor, offset, **where)

    async def collection_counts(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> dict[str, int]:
        """Collection name -> documents stored in it that `access` may read, by name: every collection holding one
        (None: the admin's view), else exactly `collections` (a key's, 0 for one holding none)."""
        return await self.services.library.collection_counts(collections=collections, access=access)

    async def iter_documents(
        self, page_size: int = 1000, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> AsyncIterator[StoredDocument]:
        """Every stored document of `collections` (None: all) that `access` may read by doc id, read one page of
        `page_size` at a time (memory stays bounded)."""
        cursor: str | None = None
        while True:
            page = await self.document_page(page_size, cursor, collections=collections, access=access)
            for document in page.documents:
                yield document
            if (cursor := page.next_cursor) is None:
                return

    async def delete_documents(
        self, doc_ids: Sequence[str] = (), source: str | None = None, *, collections: Sequence[str] | None = None
    ) -> list[str]:
        """Delete documents of `collections` (None: all) by id and/or by source (the path they were ingested
        from), chunks included; search and the agent never return them afterwards.

        Returns:
            The doc ids that were deleted (absent ids are not listed).

        Raises:
            agent.core.errors.InputError: neither ids nor a source given.
            StoreError: the delete failed; nothing was deleted.
        """
        if not doc_ids and source is None:
            raise InputError("nothing to delete: expected one or more doc ids or a source")
        deleted = await self.services.library.delete_documents(doc_ids, source=source, collections=collections)
        if deleted:  # their kept originals go with them (ORIGINALS_DIR)
            scope = None if collections is None else list(collections)
            await asyncio.to_thread(self.originals.remove_all, sorted(set(deleted)), scope)
        return deleted

    async def page_image(
        self,
        doc_id: str,
        page: int,
        *,
        chunk_id: str | None = None,
        sentence: tuple[int, int] | None = None,
        collections: Sequence[str] | None = None,
        scale: float = 2.0,
        access: Access = UNRESTRICTED,
    ) -> RenderedPage:
        """Page `page` of the stored document `doc_id` (in `collections`; None: any) as a PNG, rendered from its kept
        original at `scale` pixels per PDF point, with chunk `chunk_id`'s lines on it highlighted
        (`agent.core.pages.page_image`); with `sentence` (offsets into the chunk's text) only that sentence's lines.
        A document `access` may not read is not found.

        Raises:
            agent.core.pages.PageError: no such chunk of the document, no original kept, not a PDF, no such page.
            agent.core.errors.InputError: a scale out of bounds.
        """
        return await pages.page_image(
            self.services.library,
            self.originals,
            doc_id,
            page,
            chunk_id=chunk_id,
            sentence=sentence,
            collections=collections,
            scale=scale,
            access=access,
        )

    async def count(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> tuple[int, int]:
        """(documents, chunks) stored in `collections` (None: all) that `access` may read."""
        return await self.services.library.count(collections=collections, access=access)
