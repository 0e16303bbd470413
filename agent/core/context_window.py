"""Fit the retrieved passages into the LLM's context window, dropping the lowest-ranked ones.

An OpenAI-compatible server refuses a request whose prompt tokens plus `max_tokens` exceed the context it serves
(vLLM: HTTP 400, "This model's maximum context length is ..."), so `rag ask --top-k 40` with ~300-token passages
cannot be answered by a model served with 4096 tokens. `ContextFitter.fit` keeps the best-ranked passages that fit:

    budget = context tokens - max_tokens (LLM_MAX_TOKENS) - chat-template allowance (per message + fixed margin)
    kept   = the longest prefix of the ranked passages whose rendered prompt (system prompt, history, user message)
             counts at most `budget` tokens (binary search: the count grows with every passage added)

- Context tokens: the server's own figure, `max_model_len` of the model's entry in `GET <LLM_BASE_URL>/models`
  (vLLM reports it; looked up once, then cached), else `LLM_CONTEXT_TOKENS`.
- Later passages: the `agentic` policy's tool results (`search_documents`, `get_document`) are fitted the same way,
  each against the conversation as it stands when the tool runs (instructions, tool definitions, every message so
  far, results granted to parallel calls not yet sent): the lowest-ranked passages are dropped, a document is cut.
- Earlier turns (`fit_history`): a conversation's history takes at most `HISTORY_SHARE` of the room the question
  leaves; the oldest turns beyond it are dropped (instructions, i.e. system messages, are kept), so a long
  conversation goes on instead of being refused. Only a question (with its instructions) that alone does not fit
  is refused (`agent.core.errors.InputError`, "ask a shorter question").
- Token counts: the LLM's own tokenizer (`LLM_TOKENIZER`, or the local stack's converted model folder
  `DATA_DIR/llm/<LLM_MODEL>/tokenizer.json` when it exists), else an estimate of `CHARS_PER_TOKEN` characters per
  token, deliberately low (BPE tokenizers average ~4 characters per token on English text; numbers and rare words
  take more tokens) so the estimate overcounts; a warning says the count is estimated.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, ToolCallPart, UserPromptPart
from tokenizers import Tokenizer

from agent.config.settings import Settings
from agent.core.errors import InputError
from tools.retrieval import Passage

CHARS_PER_TOKEN = 3.0
"""Characters per token assumed when no tokenizer is configured (an overcount for English BPE, ~4 chars/token)."""
HISTORY_SHARE = 0.5
"""Most of the room left after the question that earlier turns of a conversation may take (the rest is for
passages)."""
TOKENS_PER_MESSAGE = 8
"""Chat-template tokens allowed per message (ChatML `<|im_start|>role\\n ... <|im_end|>\\n` is 5)."""
MARGIN_TOKENS = 32
"""Fixed allowance for the template's generation prompt and tokenisation differences at part boundaries."""

log = logging.getLogger(__name__)

TokenCounter = Callable[[str], int]
"""Tokens of a text, as the LLM counts them (or an estimate)."""


def estimate_tokens(text: str) -> int:
    """`len(text) / CHARS_PER_TOKEN`, rounded up: an overcount for English text under BPE tokenizers."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def tokenizer_counter(path: Path) -> TokenCounter:
    """A counter over the Hugging Face `tokenizer.json` at `path` (the file or its folder), special tokens excluded.

    Raises:
        FileNotFoundError: no tokenizer.json there.
    """
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"LLM tokenizer {file} not found (LLM_TOKENIZER); expected a tokenizer.json")
    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def counter_for(settings: Settings) -> tuple[TokenCounter, str]:
    """The token counter the settings give and how it counts (`tokenizer <path>` or `estimate`): `LLM_TOKENIZER`,
    else the local converted model's `DATA_DIR/llm/<LLM_MODEL>/tokenizer.json` when present, else the estimate
    (logged as a warning)."""
    path = settings.llm_tokenizer
    if path is None:
        local = settings.data_dir / "llm" / settings.llm_model / "tokenizer.json"
        path = local if local.is_file() else None
    if path is not None:
        return tokenizer_counter(path), f"tokenizer {path}"
    log.warning(
        "LLM_TOKENIZER is unset: prompt tokens are estimated at %.0f characters per token when fitting passages to "
        "the LLM's context window; set it to the model's tokenizer.json to count exactly",
        CHARS_PER_TOKEN,
    )
    return estimate_tokens, "estimate"


@dataclass(frozen=True)
class Fitted:
    """Passages that fit the context window and those left out (lowest-ranked), each in rank order."""

    kept: list[Passage]
    dropped: list[Passage]


class ContextFitter:
    """Fits prompts to one LLM's context window; safe to share between concurrent answers.

    Args:
        settings: `LLM_BASE_URL`, `LLM_MODEL`, `LLM_API_KEY` (the `/models` lookup), `LLM_CONTEXT_TOKENS`,
            `LLM_MAX_TOKENS`.
        count: counts tokens; default `counter_for(settings)`.
    """

    def __init__(self, settings: Settings, count: TokenCounter | None = None) -> None:
        self.settings = settings
        self._count = count
        self._counting = "given counter"
        self._context_tokens: int | None = None

    def count(self, text: str) -> int:
        """Tokens of `text` (the counter is set up on first use: commands that never answer load no tokenizer).

        Raises:
            FileNotFoundError: `LLM_TOKENIZER` names no tokenizer.json.
        """
        if self._count is None:
            self._count, self._counting = counter_for(self.settings)
        return self._count(text)

    @property
    def counting(self) -> str:
        """How tokens are counted: `tokenizer <path>`, `estimate`, or `given counter`."""
        if self._count is None:
            self._count, self._counting = counter_for(self.settings)
        return self._counting

    async def context_tokens(self) -> int:
        """The served context length in tokens: the server's `max_model_len` for `LLM_MODEL` (cached once read;
        a server that answers without it is cached as `LLM_CONTEXT_TOKENS`), else `LLM_CONTEXT_TOKENS` (also when
        the server cannot be reached: the lookup is tried again on the next answer)."""
        if self._context_tokens is not None:
            return self._context_tokens
        url = self.settings.llm_base_url.rstrip("/") + "/models"
        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                response = await client.get(url, headers={"Authorization": f"Bearer {self.settings.llm_api_key}"})
            response.raise_for_status()
            models = response.json().get("data", [])
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.warning("cannot read the LLM's context length from %s (%s); using LLM_CONTEXT_TOKENS", url, exc)
            return self.settings.llm_context_tokens
        served = next((m for m in models if isinstance(m, dict) and m.get("id") == self.settings.llm_model), {})
        reported = served.get("max_model_len")
        self._context_tokens = reported if isinstance(reported, int) else self.settings.llm_context_tokens
        return self._context_tokens

    async def room(self, fixed: Sequence[str], reserved: int = 0) -> int:
        """Tokens left for one more message beside the messages `fixed` (their texts) and `reserved` tokens, after
        `LLM_MAX_TOKENS` and the chat template's allowance; negative when they already overflow."""
        context = await self.context_tokens()
        return (
            context
            - self.settings.llm_max_tokens
            - MARGIN_TOKENS
            - TOKENS_PER_MESSAGE * (len(fixed) + 1)
            - sum(self.count(text) for text in fixed)
            - reserved
        )

    def _longest(self, n: int, fits: Callable[[int], bool]) -> int:
        """The largest `k <= n` with `fits(k)` (`fits` grows false with `k`), given `fits(0)`."""
        low, high = 0, n
        while low < high:
            mid = (low + high + 1) // 2
            if fits(mid):
                low = mid
            else:
                high = mid - 1
        return low

    def _too_long(self, context: int) -> InputError:
        return InputError(
            f"the question takes more than the {context}-token context window of {self.settings.llm_model} leaves "
            f"after LLM_MAX_TOKENS={self.settings.llm_max_tokens}; ask a shorter question"
        )

    async def fit(
        self,
        passages: Sequence[Passage],
        render: Callable[[list[Passage]], str],
        fixed: Sequence[str] = (),
        reserved: int = 0,
    ) -> Fitted:
        """The longest prefix of `passages` (best-ranked first) whose prompt fits the context window.

        Args:
            passages: retrieved passages in rank order.
            render: the message holding a list of passages (e.g. `agent.core.prompts.user_prompt` with the question).
            fixed: the other messages' texts sent with it (system prompt, earlier turns, tool definitions).
            reserved: tokens taken by something else in the same request (results of parallel tool calls).

        Raises:
            agent.core.errors.InputError: even the message without passages leaves no room (a question or history longer
                than the context window); the message gives the token counts.
        """
        budget = await self.room(fixed, reserved)

        def fits(n: int) -> bool:
            return self.count(render(list(passages[:n]))) <= budget

        if not fits(0):
            raise self._too_long(await self.context_tokens())
        kept_n = self._longest(len(passages), fits)
        kept, dropped = list(passages[:kept_n]), list(passages[kept_n:])
        if dropped:
            log.info(
                "%d of %d passages dropped to fit the %d-token context (%s)",
                len(dropped),
                len(passages),
                await self.context_tokens(),
                self._counting,
            )
        return Fitted(kept, dropped)

    async def fit_text(
        self, text: str, render: Callable[[str], str], fixed: Sequence[str] = (), reserved: int = 0
    ) -> str | None:
        """The longest prefix of `text` (cut at a character) whose message `render(prefix)` fits beside `fixed` and
        `reserved` (see `fit`); None when not even `render("")` fits."""
        budget = await self.room(fixed, reserved)

        def fits(n: int) -> bool:
            return self.count(render(text[:n])) <= budget

        if not fits(0):
            return None
        return text[: self._longest(len(text), fits)]

    async def fit_history(
        self, history: Sequence[ModelMessage], fixed: Sequence[str], prompt: str, share: float = HISTORY_SHARE
    ) -> list[ModelMessage]:
        """`history` (a conversation's earlier messages, oldest first) with its oldest turns dropped so that it
        takes at most `share` of the room that `fixed` (the system prompt, tool definitions) and the question's
        message `prompt` leave. Instructions (leading system messages) are kept; a turn (a user message and the
        answers after it) is dropped whole, so the history still starts with a user message.

        Raises:
            agent.core.errors.InputError: the question with the instructions alone does not fit ("ask a shorter
                question", with the token counts).
        """
        messages = list(history)
        lead = 0
        while lead < len(messages) and _instructions_only(messages[lead]):
            lead += 1
        instructions, rest = messages[:lead], messages[lead:]
        instruction_texts = message_texts(instructions)
        room = await self.room([*fixed, *instruction_texts]) - self.count(prompt)
        if room < 0:
            raise self._too_long(await self.context_tokens())
        starts = [i for i, m in enumerate(rest) if _asks(m)] or [0]
        if starts[0] != 0:
            starts.insert(0, 0)
        cost = [self.count(text) + TOKENS_PER_MESSAGE for text in message_texts(rest)]
        allowed = int(room * share)
        kept_from = next((i for i in starts if sum(cost[i:]) <= allowed), len(rest))
        if kept_from:
            log.info(
                "%d oldest of %d earlier turns dropped to fit the %d-token context (%s)",
                sum(1 for i in starts if i < kept_from),
                len(starts),
                await self.context_tokens(),
                self.counting,
            )
        return instructions + rest[kept_from:]


def _instructions_only(message: ModelMessage) -> bool:
    """A request that holds only system prompts (a chat client's system / developer messages)."""
    return isinstance(message, ModelRequest) and all(isinstance(p, SystemPromptPart) for p in message.parts)


def _asks(message: ModelMessage) -> bool:
    """A request that holds a user prompt: where a turn of the conversation starts."""
    return isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)


def message_texts(messages: Sequence[ModelMessage]) -> list[str]:
    """The text of each earlier message of a conversation (user prompts, model text, tool calls with their
    arguments, tool results), for counting."""
    texts = []
    for message in messages:
        pieces = []
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                pieces.append(part.tool_name + part.args_as_json_str())
            elif isinstance(content := getattr(part, "content", None), str):
                pieces.append(content)
        texts.append("\n".join(pieces))
    return texts
