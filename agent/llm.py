"""The generator model: any OpenAI-compatible chat API (local vLLM, or Triton's OpenAI frontend in production)."""

from __future__ import annotations

from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from agent.settings import Settings

PROFILES: dict[str, OpenAIModelProfile] = {
    "vllm": OpenAIModelProfile(),
    # Triton's OpenAI frontend forces the first tool's schema for tool_choice="required" and drops response_format
    # (Triton openai_frontend docs), so neither is sent to it; max_tokens is always sent (its default is 16).
    "triton": OpenAIModelProfile(openai_supports_tool_choice_required=False, supports_json_schema_output=False),
}


def build_model(settings: Settings) -> OpenAIChatModel:
    """An `OpenAIChatModel` for `settings.llm_model` at `settings.llm_base_url`, with the server's profile."""
    provider = OpenAIProvider(base_url=settings.llm_base_url, api_key=settings.llm_api_key)
    return OpenAIChatModel(settings.llm_model, provider=provider, profile=PROFILES[settings.llm_profile])


def model_settings(settings: Settings) -> ModelSettings:
    """Request settings sent on every call: `max_tokens` always (some servers default to 16), temperature,
    timeout in seconds."""
    return ModelSettings(
        max_tokens=settings.llm_max_tokens, temperature=settings.llm_temperature, timeout=settings.llm_timeout_s
    )
