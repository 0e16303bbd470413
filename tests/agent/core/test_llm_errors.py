"""The start-up probe of the LLM server tells an unknown model name from a server without tool calling, by the
error body (both are HTTP 400 on Triton's OpenAI frontend), against the scripted fake OpenAI server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.config.settings import Settings
from agent.core.errors import LLMConfigError, LLMResponseError
from agent.core.llm import check_tool_calling
from tests.fake_openai import (
    TRITON_NO_TOOLS_ERROR,
    TRITON_UNKNOWN_MODEL_ERROR,
    VLLM_NO_TOOLS_ERROR,
    FakeOpenAIServer,
    Reply,
)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def llm_settings(fake: FakeOpenAIServer, profile: str = "triton") -> Settings:
    return Settings.model_validate(
        {
            "llm_base_url": fake.base_url,
            "llm_model": "llama-3.1-8b-instruct",
            "llm_profile": profile,
            "services": ("postgres", "triton"),  # the fake server, not a local vLLM, answers on that port
        }
    )


async def test_unknown_model_is_not_read_as_missing_tool_calling(fake: FakeOpenAIServer) -> None:
    fake.reset(Reply(status=400, body=TRITON_UNKNOWN_MODEL_ERROR))
    with pytest.raises(LLMConfigError) as caught:
        await check_tool_calling(llm_settings(fake))
    message = str(caught.value)
    assert "does not serve the model 'llama-3.1-8b-instruct'" in message and "/models" in message
    assert "tool" not in message.lower().replace("llama-3.1-8b-instruct", "")


async def test_vllm_unknown_model_404_names_the_model(fake: FakeOpenAIServer) -> None:
    body = {"error": {"message": "The model `llama-3.1-8b-instruct` does not exist.", "code": 404}}
    fake.reset(Reply(status=404, body=body))
    with pytest.raises(LLMConfigError, match=r"does not serve the model 'llama-3\.1-8b-instruct'"):
        await check_tool_calling(llm_settings(fake, "vllm"))


@pytest.mark.parametrize(
    ("profile", "body", "flags"),
    [
        ("triton", TRITON_NO_TOOLS_ERROR, "--tool-call-parser llama3"),
        ("vllm", VLLM_NO_TOOLS_ERROR, "--enable-auto-tool-choice --tool-call-parser"),
    ],
)
async def test_missing_tool_calling_names_the_flags_and_model(
    fake: FakeOpenAIServer, profile: str, body: dict[str, object], flags: str
) -> None:
    fake.reset(Reply(status=400, body=body))
    with pytest.raises(LLMConfigError, match=flags) as caught:
        await check_tool_calling(llm_settings(fake, profile))
    assert "'llama-3.1-8b-instruct'" in str(caught.value)


async def test_other_400_is_a_response_error_naming_the_model(fake: FakeOpenAIServer) -> None:
    fake.reset(Reply(status=400, body={"detail": "logit bias is not currently supported"}))
    with pytest.raises(LLMResponseError, match=r"HTTP 400 for model 'llama-3\.1-8b-instruct'"):
        await check_tool_calling(llm_settings(fake))
