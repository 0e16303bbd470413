"""The OpenAI-compatible route tried the way its clients call it, in-process (the app over the in-memory collection
and a pydantic-ai FunctionModel, `tests.openai_rig.Rig`): every Chat Completions parameter checked against
OpenAI's documented ranges before admission and retrieval (a value the LLM server would refuse is a 422 naming it,
never a 502 after the search), and the payloads chat front ends send (Open WebUI, LibreChat: system prompts, content
as arrays of parts, assistant turns with null content, tool turns of another model, title and tag generation
requests, `n`, `stop`, `stream_options`, unknown models) answered or refused in OpenAI's shape, never a 500."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.agent_corpus import COVERED
from tests.openai_rig import Rig, ask, assert_openai_error, chunks

CHAT = "/v1/chat/completions"


@pytest.fixture
def rig() -> Rig:
    return Rig()


def nothing_searched_or_asked(rig: Rig) -> bool:
    return not rig.model.seen and not getattr(rig.collection, "scopes", [])


# OpenAI's ranges (openai-openapi `CreateChatCompletionRequest`): seed is an int64, stop one string or 1-4 strings,
# top_logprobs 0-20, n 1-128 (this service: 1), temperature 0-2, top_p 0-1, penalties -2..2, logit_bias -100..100;
# plus what an LLM server refuses inside those ranges (an empty stop sequence) or outside JSON (NaN, Infinity)
OUT_OF_RANGE = [
    ({"seed": 2**70}, "seed", "9223372036854775807"),
    ({"seed": -(2**63) - 1}, "seed", "-9223372036854775808"),
    ({"stop": ""}, "stop", "empty"),
    ({"stop": ["END", ""]}, "stop", "stop[1] is empty"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    ({"top_p": 1.5}, "top_p", "less than or equal to 1"),
    ({"top_p": -0.1}, "top_p", "greater than or equal to 0"),
    ({"temperature": -1}, "temperature", "greater than or equal to 0"),
    ({"presence_penalty": 2.5}, "presence_penalty", "less than or equal to 2"),
    ({"frequency_penalty": -3}, "frequency_penalty", "greater than or equal to -2"),
    ({"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    ({"max_completion_tokens": -5}, "max_completion_tokens", "greater than or equal to 1"),
    ({"n": 0}, "n", "expected 1"),
    ({"top_logprobs": 21}, "top_logprobs", "less than or equal to 20"),
    ({"logit_bias": {"50256": 101}}, "logit_bias.50256", "less than or equal to 100"),
    ({"stream_options": {"include_usage": "sometimes"}}, "stream_options.include_usage", "boolean"),
]


@pytest.mark.parametrize(("extra", "param", "needle"), OUT_OF_RANGE)
async def test_a_parameter_out_of_openai_range_is_422_naming_it_before_admission(
    extra: dict[str, Any], param: str, needle: str
) -> None:
    rig = Rig(answer_max_in_progress=1, answer_queue_max=0)
    rig.model.gate = asyncio.Event()
    async with rig.http() as client:
        held = asyncio.create_task(client.post(CHAT, json=ask()))  # the one slot is taken: admission would refuse
        await asyncio.wait_for(rig.model.started.wait(), 10)
        for stream in (False, True):
            response = await client.post(CHAT, json=ask(stream=stream, **extra))
            assert needle in assert_openai_error(response, 422, "bad_request", param)
        rig.model.gate.set()
        assert (await held).status_code == 200
    assert len(rig.model.seen) == 1 and len(rig.collection.scopes) == 1  # only the held answer searched and asked


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_non_finite_numbers_are_422(rig: Rig, literal: str) -> None:
    # Python's JSON parser reads these non-JSON literals; they must not reach the LLM server
    body = json.dumps(ask()).removesuffix("}") + f', "temperature": {literal}}}'
    async with rig.http() as client:
        response = await client.post(CHAT, content=body, headers={"content-type": "application/json"})
    assert_openai_error(response, 422, "bad_request", "temperature")
    assert nothing_searched_or_asked(rig)


async def test_values_inside_openai_ranges_are_answered_and_sent_as_the_llm_server_takes_them(rig: Rig) -> None:
    async with rig.http() as client:
        for extra in (
            {"top_p": 0},  # OpenAI's minimum; vLLM requires top_p > 0: sent as greedy decoding
            {"seed": 2**63 - 1, "stop": []},  # an empty list: no stop sequences
            {"seed": -(2**63), "stop": ["END"], "top_logprobs": 0, "logit_bias": {"50256": -100}, "n": 1},
            {"temperature": 2, "top_p": 1, "presence_penalty": -2, "frequency_penalty": 2, "logprobs": False},
        ):
            response = await client.post(CHAT, json=ask(**extra))
            assert response.status_code == 200, (extra, response.text)
    greedy, largest, smallest, edges = rig.model.settings
    assert greedy["temperature"] == 0 and "top_p" not in greedy
    assert largest["seed"] == 2**63 - 1 and "stop_sequences" not in largest
    assert smallest["seed"] == -(2**63) and smallest["stop_sequences"] == ["END"]
    assert edges["temperature"] == 2 and edges["top_p"] == 1 and edges["presence_penalty"] == -2


OPEN_WEBUI_TITLE = (
    "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.\n### Guidelines:\n"
    "- The title should clearly represent the main theme or subject of the conversation.\n### Output:\nJSON format: "
    '{ "title": "your concise title here" }\n### Chat History:\n<chat_history>\nUSER: ' + COVERED + "\nASSISTANT: "
    "It does [1].\n</chat_history>"
)
OPEN_WEBUI_TAGS = (
    "### Task:\nGenerate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more "
    'specific subtopic tags.\n### Output:\nJSON format: { "tags": ["tag1", "tag2", "tag3"] }\n### Chat History:\n'
    "<chat_history>\nUSER: " + COVERED + "\nASSISTANT: It does [1].\n</chat_history>"
)
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Today is 2026-12-01."}

ANSWERED: dict[str, dict[str, Any]] = {
    "open-webui chat": {
        "model": "triton-rag",
        "messages": [SYSTEM, {"role": "user", "content": COVERED}],
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    "open-webui title": {
        "model": "triton-rag",
        "messages": [{"role": "user", "content": OPEN_WEBUI_TITLE}],
        "stream": False,
        "max_tokens": 1000,
    },
    "open-webui tags": {"model": "triton-rag", "messages": [{"role": "user", "content": OPEN_WEBUI_TAGS}]},
    "librechat": {
        "model": "triton-rag-always",
        "user": "6650f1c2a1b2c3d4e5f60718",
        "stream": True,
        "temperature": 1,
        "top_p": 1,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Vitamin B12 homocysteine"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "It raises it [1]."}]},
            {"role": "user", "content": [{"type": "text", "text": COVERED}]},
        ],
    },
    "tool turns of another model": {
        "model": "triton-rag",
        "messages": [
            {"role": "user", "content": "Vitamin B12 and homocysteine?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "It is warm."},
            {"role": "user", "content": COVERED},
        ],
    },
    "an image in an earlier turn": {
        "model": "triton-rag",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Vitamin B12 homocysteine levels"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ],
            },
            {"role": "assistant", "content": "A chart."},
            {"role": "user", "content": COVERED, "name": "alice"},
        ],
    },
    "n, stop and usage without a stream": ask(n=1, stop=["\n\n"], stream=False, stream_options={"include_usage": True})
    | {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tool_choice": "auto"},
    "ollama and vllm extras": ask(top_k=40, min_p=0.05, repeat_penalty=1.1, num_ctx=4096, keep_alive="5m"),
}


@pytest.mark.parametrize("name", list(ANSWERED))
async def test_chat_ui_payloads_are_answered(rig: Rig, name: str) -> None:
    body = ANSWERED[name]
    async with rig.http() as client:
        response = await client.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    if body.get("stream"):
        events = chunks(response.text)
        assert events[-1] == "[DONE]" and not any("error" in e for e in events[:-1] if isinstance(e, dict))
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"])
        assert text == "It does [1]."
        with_usage = bool(body.get("stream_options", {}).get("include_usage"))
        assert (events[-2]["choices"] == [] and events[-2]["usage"]["total_tokens"] > 0) == with_usage
    elif "### Task" not in str(body):  # a title or tags request may well be the refusal: it is answered all the same
        assert response.json()["choices"][0]["message"]["content"] == "It does [1]."
    else:
        assert response.json()["object"] == "chat.completion" and response.json()["choices"][0]["message"]["content"]
    sent = str(rig.model.seen[0]) if rig.model.seen else ""
    assert "sunny" not in sent and "tool_call" not in sent and "image_url" not in sent


REFUSED: dict[str, tuple[dict[str, Any], int, str, str | None]] = {
    "unknown model": (ask(model="gpt-4o-mini"), 404, "model_not_found", "model"),
    "an empty model": (ask(model=""), 404, "model_not_found", "model"),
    "two choices": (ask(n=2), 422, "bad_request", "n"),
    "the last message is a tool result": (
        ask() | {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "c", "content": "x"}]},
        422,
        "bad_request",
        "messages[1].role",
    ),
    "an image in the question": (
        ask()
        | {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "q"}, {"type": "image_url", "image_url": {}}]}
            ]
        },
        422,
        "bad_request",
        "messages[0].content",
    ),
    "a null question": (ask() | {"messages": [{"role": "user", "content": None}]}, 422, "bad_request", "messages[0]"),
    "an empty list of parts": (ask() | {"messages": [{"role": "user", "content": []}]}, 422, "bad_request", None),
    "a title request over the question limit": (ask("### Task:\n" + "x" * 5000), 422, "bad_request", None),
    "a message that is not an object": (ask() | {"messages": ["hello"]}, 422, "bad_request", "messages[0]"),
    "an unknown role": (ask() | {"messages": [{"role": "model", "content": "q"}]}, 422, "bad_request", None),
    "a json_schema response format": (
        ask(response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": {}}}),
        422,
        "bad_request",
        "response_format",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
async def test_chat_ui_payloads_that_cannot_be_answered_are_refused_in_openai_shape(rig: Rig, name: str) -> None:
    body, status, code, param = REFUSED[name]
    async with rig.http() as client:
        for stream in (False, True):
            response = await client.post(CHAT, json=body | {"stream": stream})
            assert response.status_code == status, response.text
            error = response.json()["error"]
            assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"], error
            if param is not None:
                assert error["param"] == param or str(error["param"]).startswith(param), error
    assert nothing_searched_or_asked(rig)
