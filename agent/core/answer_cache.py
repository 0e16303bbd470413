"""The answer cache: a repeated first-turn question answered from Postgres before admission, embedding and the LLM,
and never from an entry older than the documents it may search (docs/answer-cache.md).

- `normalise_question`: what makes two questions the same (whitespace, a trailing `?`, `!` or `.`); case and every
  other character are kept, since they change meaning ("What is C?" and "What is C#?", WHO and who, 5 and 5%).
- `request_digest`: sha256 of a canonical JSON of everything an answer depends on besides the documents: the
  normalised question (and retrieval query), the scope (collections, filters, the caller's permission set
  `Access.key`: callers who may read different documents never share an answer), the policy and top_k, the LLM model,
  the prompts' version (`PROMPT_VERSION`), the settings that change answers (`ANSWER_SETTINGS`) and the request's own
  LLM settings. The store derives the entry's key from it and the versions of the scope's collections
  (`tools.store.answer_cache`), so an ingest, replace or delete in the scope makes every older entry unreachable.
- `AnswerCache`: looks a request up and stores its answer, counting `rag_answer_cache_total{outcome}` (prometheus-
  client, the process's default registry): `hit`, `miss` (looked up, not found), `store` (an answer stored after a
  miss) and `bypass` (not looked up: a question with conversation history, or the cache's store failed).

What is stored: only a complete, cited answer of a first-turn question (no history): `cacheable`. Never stored:
refusals (no relevant passage: cheap to compute again, and a refusal must never outlive a document that answers),
answers with no citations (a model claiming the documents do not cover what they do, or answering unsupported), answers
of a run in which a tool call failed (`failed_tool_calls`), answers the support check replaced by quotes (no sentence
supported: `extractive`), answers that stopped at the output limit (`truncated`), failures of any kind (limits,
timeouts, LLM or store errors raise and store nothing), and answers computed while a read replica may not have held
the scope's newest version (`CacheLookup.settled`). A degraded answer is thus computed afresh next time, once the
LLM or the tools recover.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from prometheus_client import REGISTRY, Counter

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.prompts import AGENTIC_SYSTEM_PROMPT, REFUSAL, SYSTEM_PROMPT, agentic_prompt, user_prompt
from agent.core.rag_agent import TOOLS_TEXT
from agent.core.results import AskResult, TokenUsage
from tools.access import UNRESTRICTED, Access
from tools.errors import StoreError
from tools.records import CacheLookup
from tools.scope import SearchScope

log = logging.getLogger(__name__)

KEY_FORMAT = 3
"""Version of the digest's layout; bump it when the canonical JSON changes meaning."""

Outcome = Literal["hit", "miss", "store", "bypass"]
OUTCOMES: tuple[Outcome, ...] = ("hit", "miss", "store", "bypass")

CACHE_TOTAL = Counter(
    "rag_answer_cache",
    "Answer cache look-ups and stores by outcome: hit, miss, store (an answer stored after a miss), bypass (a "
    "question with conversation history, or the cache's store failed).",
    ["outcome"],
    registry=REGISTRY,
)
for _outcome in OUTCOMES:
    CACHE_TOTAL.labels(_outcome)

ANSWER_SETTINGS = (
    "embedder_model",
    "embedder_query_model",
    "hnsw_ef_search",
    "retrieval_mode",
    "rrf_k",
    "rrf_weight_dense",
    "rrf_weight_full_text",
    "fusion_method",
    "fusion_alpha",
    "fusion_normalisation",
    "rm3",
    "rm3_fb_docs",
    "rm3_fb_terms",
    "rm3_original_weight",
    "retrieval_candidates",
    "rerank_depth",
    "reranker_model",
    "full_text_match",
    "full_text_rank",
    "bm25_k1",
    "bm25_b",
    "bm25_postings_per_term",
    "llm_profile",
    "llm_max_tokens",
    "llm_frequency_penalty",
    "llm_temperature",
    "llm_context_tokens",
    "agent_request_limit",
    "agent_tool_calls_limit",
    "answer_token_budget",
    "support_check",
    "support_model",
    "support_candidates",
    "support_max_sentences",
)
"""Settings besides `LLM_MODEL` and `TOP_K` that change what an answer says (retrieval, refusal, generation): part of
every digest, so replicas configured differently never share entries. The refusal threshold in force is added."""


def _prompt_version() -> str:
    texts = [SYSTEM_PROMPT, AGENTIC_SYSTEM_PROMPT, TOOLS_TEXT, REFUSAL, user_prompt("{q}", []), agentic_prompt("{q}")]
    return hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()[:16]


PROMPT_VERSION = _prompt_version()
"""Hash of the prompts' texts (system prompts, tool descriptions, refusal, user-message templates;
`agent.core.prompts`): a changed prompt never serves answers written under the old one."""

_SPACE = re.compile(r"\s+")
_TERMINAL = re.compile(r"[\s?!.]+$")


def normalise_question(question: str) -> str:
    """`question` in Unicode NFC, with runs of whitespace as one space, no leading or trailing whitespace and no
    trailing run of `?`, `!` and `.`: `"  What is  C#?! "` → `"What is C#"`. Case and all other punctuation are kept
    (`C` and `C#`, `WHO` and `who`, `5` and `5%` are other questions). A question of `?!.` only keeps it."""
    text = _SPACE.sub(" ", unicodedata.normalize("NFC", question)).strip()
    return _TERMINAL.sub("", text) or text


def cacheable(result: AskResult) -> bool:
    """Whether `result` is a complete, cited answer worth serving again (module docstring): not cached already, not
    refused, with citations, no failed tool call, not cut at the output limit, not replaced by quotes."""
    return not (
        result.cached
        or result.refused
        or not result.citations
        or result.failed_tool_calls
        or result.truncated
        or (result.support is not None and result.support.extractive)
    )


def _canonical_scope(scope: SearchScope | None) -> dict[str, Any]:
    scope = scope or SearchScope()
    filters = {
        key: sorted(value, key=json.dumps) if isinstance(value, list) else value
        for key, value in scope.to_filter().items()
    }
    collections = None if scope.collections is None else sorted(set(scope.collections))
    return {"collections": collections, "filter": filters, "access": scope.access.key}


def answer_settings(settings: Settings) -> dict[str, Any]:
    """The values of `ANSWER_SETTINGS` and the refusal threshold in force, as JSON values."""
    values = settings.model_dump(mode="json", include=set(ANSWER_SETTINGS))
    return values | {"refusal_min_score": settings.refusal_threshold()}


def request_digest(request: AnswerRequest, settings: Settings) -> str:
    """sha256 hex of the canonical JSON (sorted keys, no whitespace) of what `request`'s answer depends on besides
    the documents (module docstring), with the app's defaults for its policy and top_k.

    Raises:
        agent.config.settings.SettingsError: no refusal threshold (as `RagApp` raises at start).
    """
    canonical = {
        "format": KEY_FORMAT,
        "question": normalise_question(request.question),
        "retrieval_query": None if request.retrieval_query is None else normalise_question(request.retrieval_query),
        "scope": _canonical_scope(request.scope),
        "policy": request.policy or settings.agent_policy,
        "support": request.support or settings.support_check,
        "top_k": request.top_k or settings.top_k,
        "llm_model": settings.llm_model,
        "prompts": PROMPT_VERSION,
        "settings": answer_settings(settings),
        "model_settings": dict(request.model_settings or {}),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class AnswerCacheStore(Protocol):
    """Where entries live (`tools.store.answer_cache.PostgresAnswerCache`)."""

    async def lookup(
        self, digest: str, collections: Sequence[str] | None, *, access: Access = UNRESTRICTED
    ) -> CacheLookup:
        """The key of `digest` over the current versions of `collections` (None: all) and its live entry among
        those of `access`'s permission set."""
        ...

    async def store(self, key: str, answer: dict[str, Any], *, access: Access = UNRESTRICTED) -> None:
        """Store `answer` under `key` as an entry of `access`'s permission set, keeping the store within its
        bounds."""
        ...


@dataclass(frozen=True)
class Looked:
    """What `AnswerCache.lookup` found: the cached answer (`hit`), or the key to store the answer under (`key`;
    None: do not store it)."""

    hit: AskResult | None = None
    key: str | None = None
    access: Access = UNRESTRICTED


BYPASS = Looked()


class AnswerCache:
    """Look-ups and stores of answers for one app (module docstring).

    Args:
        store: the entries (`tools.store.answer_cache.PostgresAnswerCache`).
        settings: the app's settings (defaults of policy and top_k, the LLM model, `ANSWER_SETTINGS`).
    """

    def __init__(self, store: AnswerCacheStore, settings: Settings) -> None:
        self.entries = store
        self.settings = settings

    async def lookup(self, request: AnswerRequest) -> Looked:
        """The cached answer of `request` (marked `cached`, its timings the look-up's: `cache` and `total`, ms; no
        token usage), or where to store its answer. A question with history or earlier questions is bypassed; a
        failing store is logged and bypassed (the answer is computed as without a cache)."""
        if request.history or request.earlier_questions:  # a follow-up: its answer depends on the conversation
            CACHE_TOTAL.labels("bypass").inc()
            return BYPASS
        start = time.perf_counter()
        collections = None if request.scope is None else request.scope.collections
        access = UNRESTRICTED if request.scope is None else request.scope.access
        try:
            found = await self.entries.lookup(request_digest(request, self.settings), collections, access=access)
        except StoreError:
            log.warning("answer cache look-up failed; answering without it", exc_info=True)
            CACHE_TOTAL.labels("bypass").inc()
            return BYPASS
        if found.answer is None:
            CACHE_TOTAL.labels("miss").inc()
            return Looked(key=found.key if found.settled else None, access=access)
        CACHE_TOTAL.labels("hit").inc()
        ms = round((time.perf_counter() - start) * 1000, 1)
        result = AskResult.model_validate(found.answer)
        return Looked(
            hit=result.model_copy(
                update={"cached": True, "timings_ms": {"cache": ms, "total": ms}, "usage": TokenUsage()}
            )
        )

    async def store(self, looked: Looked, result: AskResult) -> None:
        """Store `result` under `looked.key`, unless there is none or the answer is not `cacheable` (degraded or
        incomplete); a failing store is logged, not raised (the answer itself is good)."""
        if looked.key is None or not cacheable(result):
            return
        try:
            stored = result.model_dump(mode="json") | {"retrieved": [p.model_dump() for p in result.retrieved]}
            await self.entries.store(looked.key, stored, access=looked.access)
        except StoreError:
            log.warning("could not store an answer in the answer cache", exc_info=True)
            return
        CACHE_TOTAL.labels("store").inc()
