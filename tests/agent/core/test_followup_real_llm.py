"""The LLM rewrite of a follow-up against the real vLLM serving SmolLM2-135M (tests/conftest.py `llm_settings`): the
request is accepted within its bounds and the result is a usable query, or the condensed one with a named fallback.
The model's rewriting quality is measured by `rag eval followups`, not asserted here."""

from __future__ import annotations

import pytest

from agent.config.settings import Settings
from agent.core.followup import condensed_query, search_query, usable_rewrite
from agent.core.llm import build_model
from agent.core.wiring import build_rewriter

pytestmark = [pytest.mark.stack, pytest.mark.llm]

EARLIER = ["What is known about a deficiency of vitamin B12?"]
QUESTION = "It increases blood levels of homocysteine."


async def test_the_real_llm_rewrites_a_follow_up_or_it_falls_back(llm_settings: Settings) -> None:
    settings = llm_settings.model_copy(update={"followup_query": "rewrite", "followup_rewrite_timeout_s": 60.0})
    rewriter = build_rewriter(build_model(settings), settings)
    assert rewriter is not None
    reply = await rewriter.rewrite(EARLIER, QUESTION)  # the server accepts the bounded request
    assert isinstance(reply.text, str) and reply.output_tokens <= settings.followup_rewrite_max_tokens
    found = await search_query(EARLIER, QUESTION, rewriter)
    if found.method == "rewritten":
        assert found.fallback is None and usable_rewrite(found.query, EARLIER, QUESTION) == found.query
    else:
        assert found.query == condensed_query(EARLIER, QUESTION) and found.fallback is not None
    assert found.rewrite_ms > 0
