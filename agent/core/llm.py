"""The generator model: any OpenAI-compatible chat API (local vLLM, or Triton's OpenAI frontend in production).

Server differences live in one place, the profile chosen by `LLM_PROFILE` (`PROFILES`), never in the agent:

- both: `max_tokens` is always sent (`model_settings`), as `max_tokens` rather than `max_completion_tokens`:
  Triton's frontend generates 16 tokens without it.
- `triton`: `tool_choice="required"` is never sent (the frontend forces the first tool's schema for it) and
  JSON-schema output is off (the frontend drops `response_format`). The agent's output is plain text anyway.
- both: tool calling must be on for the `agentic` policy; `check_tool_calling` probes it at start-up and names the
  missing server flags.
"""

from __future__ import annotations

import re

import httpx
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from agent.config.settings import Settings
from agent.core.errors import LLMConfigError, LLMResponseError, LLMUnavailableError

PROFILES: dict[str, OpenAIModelProfile] = {
    # pydantic-ai sends the output budget as OpenAI's newer `max_completion_tokens` by default; both servers are sent
    # the classic `max_tokens` field, which both read (Triton's frontend generates 16 tokens when it is missing).
    "vllm": OpenAIModelProfile(openai_chat_supports_max_completion_tokens=False),
    # Triton's OpenAI frontend forces the first tool's schema for tool_choice="required" and drops response_format
    # (Triton openai_frontend docs): forced tool choice falls back to "auto" and JSON-schema output is off.
    "triton": OpenAIModelProfile(
        openai_chat_supports_max_completion_tokens=False,
        supports_forced_tool_choice=False,
        supports_json_schema_output=False,
    ),
}

TOOL_FLAGS: dict[str, str] = {
    "vllm": "--enable-auto-tool-choice --tool-call-parser <parser> (hermes for SmolLM2/Qwen, llama3_json for "
    "Llama 3.1)",
    "triton": "--tool-call-parser llama3 (openai_frontend/main.py), with a tokenizer whose chat template has tools",
}
"""Server flags that turn tool calling on, per profile (named in `check_tool_calling`'s error)."""


def build_model(settings: Settings) -> OpenAIChatModel:
    """An `OpenAIChatModel` for `settings.llm_model` at `settings.llm_base_url`, with the server's profile."""
    provider = OpenAIProvider(base_url=settings.llm_base_url, api_key=settings.llm_api_key)
    return OpenAIChatModel(settings.llm_model, provider=provider, profile=PROFILES[settings.llm_profile])


def model_settings(settings: Settings) -> ModelSettings:
    """Request settings sent on every call: `max_tokens` always (some servers default to 16), temperature,
    frequency penalty (OpenAI API: subtracts penalty x count of each token already generated from its logit),
    per-attempt timeout in seconds, and the OpenAI SDK's bounded retries (`LLM_MAX_RETRIES`: it retries connection
    errors, timeouts, 408/409/429 and 5xx with exponential back-off)."""
    return ModelSettings(
        max_tokens=settings.llm_max_tokens,
        temperature=settings.llm_temperature,
        frequency_penalty=settings.llm_frequency_penalty,
        timeout=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
    )


async def served_model(settings: Settings, client: httpx.AsyncClient | None = None) -> str:
    """The health check of the LLM server: `GET <LLM_BASE_URL>/models` must list `LLM_MODEL`; returns a one-line
    description (model, URL, profile).

    Raises:
        LLMUnavailableError: the server cannot be reached, answers non-200, or does not list the model.
    """
    url = settings.llm_base_url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {settings.llm_api_key}"}
    try:
        if client is None:
            async with httpx.AsyncClient(timeout=5.0) as own:
                response = await own.get(url, headers=headers)
        else:
            response = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        raise LLMUnavailableError(f"{url}: {exc!r}") from None
    if response.status_code != 200:
        raise LLMUnavailableError(f"{url}: HTTP {response.status_code}")
    served = [m.get("id") for m in response.json().get("data", [])]
    if settings.llm_model not in served:
        raise LLMUnavailableError(f"{url} serves {served}, not {settings.llm_model!r} (LLM_MODEL)")
    return f"{settings.llm_model} at {settings.llm_base_url} ({settings.llm_profile} profile)"


_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Probe: returns nothing.",
        "parameters": {"type": "object", "properties": {}},
    },
}


async def check_tool_calling(settings: Settings, client: httpx.AsyncClient | None = None) -> None:
    """Probe the LLM server with a one-token request carrying `tools` (tool_choice `auto`).

    The error body tells the 400s apart: an unknown model name (Triton's frontend answers 400 for it, vLLM 404) is
    not a missing tool-calling flag.

    Raises:
        LLMConfigError: the server does not serve `LLM_MODEL` (the message names the model and where to list the
            served ones), or it rejects `tools` (HTTP 400 about tool choice, e.g. vLLM started without
            `--enable-auto-tool-choice`; the message names the flags the profile's server needs).
        LLMUnavailableError: the server cannot be reached or answers 5xx.
        LLMResponseError: any other non-200 answer; the message names the model.
    """
    body = {
        "model": settings.llm_model,
        "messages": [{"role": "user", "content": "ping"}],
        "tools": [_PROBE_TOOL],
        "tool_choice": "auto",
        "max_tokens": 1,
    }
    url = settings.llm_base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {settings.llm_api_key}"}
    try:
        if client is None:
            async with httpx.AsyncClient(timeout=settings.llm_timeout_s) as own:
                response = await own.post(url, json=body, headers=headers)
        else:
            response = await client.post(url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise LLMUnavailableError(f"cannot reach the LLM server at {url} ({exc!r}); is it running?") from None
    if response.status_code in (400, 404) and _names_unknown_model(response.text):
        raise LLMConfigError(
            f"the LLM server at {settings.llm_base_url} does not serve the model {settings.llm_model!r} "
            f"(HTTP {response.status_code}: {response.text[:300]}); set LLM_MODEL to a name listed by "
            f"{settings.llm_base_url.rstrip('/')}/models"
        )
    if response.status_code == 400 and _rejects_tools(response.text):
        flags = TOOL_FLAGS[settings.llm_profile]
        raise LLMConfigError(
            f"the LLM server at {settings.llm_base_url} rejects tool calls for model {settings.llm_model!r} "
            f"(HTTP 400: {response.text[:300]}); AGENT_POLICY=agentic needs tool calling: start the server with "
            f"{flags}, or use AGENT_POLICY=always"
        )
    if response.status_code >= 500:
        raise LLMUnavailableError(
            f"the LLM server at {url} answered HTTP {response.status_code}: {response.text[:300]}"
        )
    if response.status_code != 200:
        raise LLMResponseError(
            f"the LLM server at {url} answered HTTP {response.status_code} for model {settings.llm_model!r}: "
            f"{response.text[:300]}"
        )


_UNKNOWN_MODEL = re.compile(r"unknown model|model .{0,200}does not exist|model_not_found", re.IGNORECASE)
_TOOLS_REJECTED = re.compile(r"tool[ _-]?(choice|call)|tool-call-parser|\btools\b", re.IGNORECASE)


def _names_unknown_model(body: str) -> bool:
    """Whether an error body says the model name is unknown: Triton's OpenAI frontend answers 400
    `{"detail": "Unknown model: <name>"}` (openai_frontend/engine/triton_engine.py, r26.07), vLLM 404
    `{"error": {"message": "The model `<name>` does not exist.", "code": 404, ...}}`."""
    return bool(_UNKNOWN_MODEL.search(body))


def _rejects_tools(body: str) -> bool:
    """Whether a 400 body is about tool calling: vLLM's `"auto" tool choice requires --enable-auto-tool-choice
    and --tool-call-parser to be set`, Triton's `"auto" tool choice requires --tool-call-parser to be set`."""
    return bool(_TOOLS_REJECTED.search(body))


def bulk_model_settings(settings: Settings) -> ModelSettings | None:
    """Request settings of bulk answers (evaluation runs) over the app's: the request `priority`
    `LLM_BULK_PRIORITY` in the body (vLLM's OpenAI server reads it under `--scheduling-policy priority`: waiting
    requests are scheduled by ascending priority, so questions, which send none (0), go before bulk work; vLLM docs,
    "scheduling_policy"). None when `LLM_BULK_PRIORITY` is 0 (nothing to send)."""
    if not settings.llm_bulk_priority:
        return None
    return ModelSettings(extra_body={"priority": settings.llm_bulk_priority})
