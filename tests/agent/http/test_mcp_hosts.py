"""The MCP tools called the way hosts and their models call them, in-process (`tests.mcp_rig.connected`):
numbers sent as strings and a filter sent as a JSON string (what models write when a host passes their text on
unparsed) are accepted as the values they spell; what cannot be read as the declared type is still a tool error
naming the argument; and every structured result validates against the output schema the tool declares in
`tools/list` (JSON Schema, checked with `jsonschema`)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.agent_corpus import COVERED
from tests.mcp_rig import connected, rag_app, text_of
from tests.scripted_model import ScriptedModel as Model


@pytest.fixture
def model() -> Model:
    return Model()


LENIENT = [
    ("search", {"query": COVERED, "top_k": "2"}),
    ("search", {"query": COVERED, "top_k": 2.0}),
    ("search", {"query": COVERED, "filter": '{"source": "t"}'}),
    ("search", {"query": COVERED, "filter": "null", "collection": "default"}),
    ("ask", {"question": COVERED, "top_k": "3", "filter": '{"source": ["t", "u"]}'}),
    # a model that fills every optional argument: empty strings and an empty object for "not given"
    ("search", {"query": COVERED, "top_k": "", "filter": "", "collection": ""}),
    ("search", {"query": COVERED, "top_k": None, "filter": {}, "collection": None}),
    ("ask", {"question": COVERED, "top_k": "", "filter": "{}", "collection": ""}),
    ("get_document", {"doc_id": "b12", "collection": ""}),
]


@pytest.mark.parametrize(("tool", "arguments"), LENIENT)
async def test_numbers_as_strings_and_a_filter_as_a_json_string_are_accepted(
    model: Model, tool: str, arguments: dict[str, Any]
) -> None:
    async with connected(rag_app(model)) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    if arguments.get("top_k") in ("2", 2.0):
        assert len(result.structured_content["passages"]) == 2


STILL_WRONG = [
    ("search", {"query": COVERED, "top_k": "two"}, "top_k"),
    ("search", {"query": COVERED, "top_k": "0"}, "top_k"),
    ("search", {"query": COVERED, "filter": '{"source": '}, "filter"),
    ("search", {"query": COVERED, "filter": "[1, 2]"}, "filter"),
]


@pytest.mark.parametrize(("tool", "arguments", "argument"), STILL_WRONG)
async def test_what_cannot_be_read_is_a_tool_error_naming_the_argument(
    model: Model, tool: str, arguments: dict[str, Any], argument: str
) -> None:
    async with connected(rag_app(model)) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and argument in text_of(result)


CALLS = [
    ("search", {"query": COVERED}),
    ("search", {"query": "zebra migration patterns"}),  # no passage found: an empty list
    ("get_document", {"doc_id": "b12"}),
    ("ask", {"question": COVERED}),
    ("ask", {"question": "Who won the 2018 FIFA World Cup?"}),  # the refusal
]


@pytest.mark.parametrize(("tool", "arguments"), CALLS)
async def test_structured_results_match_the_declared_output_schema(
    model: Model, tool: str, arguments: dict[str, Any]
) -> None:
    async with connected(rag_app(model)) as client:
        declared = {t.name: t for t in (await client.list_tools()).tools}[tool]
        result = await client.call_tool(tool, arguments)
    assert not result.is_error and declared.output_schema is not None
    jsonschema.validate(result.structured_content, declared.output_schema, cls=jsonschema.Draft202012Validator)
    jsonschema.Draft202012Validator.check_schema(declared.output_schema)
