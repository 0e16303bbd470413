"""The HTTP error contract as a whole: every error kind the server can answer is in the error table of the HTTP API
page (docs/http-api.md), and a body the server cannot read (not UTF-8, not JSON) is one kind and status on every
route. In-process, no server."""

from __future__ import annotations

import re

from agent.http import errors, openai_errors
from tests.conftest import REPO_ROOT
from tests.http_rig import assert_error, serve

ROOT = REPO_ROOT
_LITERAL_KINDS = re.compile(
    r'error_json\(\s*\d+,\s*"(\w+)"'  # the guards, the drain, /mcp
    r'|ApiError\(\s*\d+,\s*"(\w+)"'  # routes
    r'|Failure\(\s*"(\w+)"'  # agent.core.failures and the routes
    r'|\bkind = "(\w+)"'  # the agent's typed errors
    r'|OpenAIError\(\s*\d+,[^()]*?,\s*"(\w+)"'  # the OpenAI-compatible routes
)
NOT_HTTP = {"agent_error", "service_error"}
"""Kinds no HTTP answer carries: the errors' abstract base, the CLI's own."""


def answered_kinds() -> set[str]:
    """Every error kind the server's code can put in an answer."""
    kinds = set(errors.STATUS_OF_KIND) | set(errors.KIND_OF_STATUS.values())
    kinds |= set(openai_errors.KIND_OF_STATUS.values())
    for source in (ROOT / "agent").rglob("*.py"):
        for match in _LITERAL_KINDS.finditer(source.read_text()):
            kinds.add(next(group for group in match.groups() if group))
    return kinds - NOT_HTTP


def docs_error_table() -> str:
    """The error table of the HTTP API page."""
    text = (ROOT / "docs" / "http-api.md").read_text()
    start = text.index("| status | `error` |")
    return text[start : text.index("\n\n", start)]


def test_the_docs_error_table_lists_every_kind_the_server_answers() -> None:
    table = docs_error_table()
    kinds = answered_kinds()
    assert {"unauthorized", "shutting_down", "forbidden_origin", "payload_too_large"} <= kinds  # the scan works
    missing = sorted(kind for kind in kinds if f"`{kind}`" not in table)
    assert missing == [], f"add these kinds to the error table of docs/http-api.md: {missing}"


async def test_a_body_that_is_not_utf8_is_the_same_error_as_malformed_json() -> None:
    json_header = {"Content-Type": "application/json"}
    async with serve().client() as client:
        for path in ("/v1/ask", "/v1/documents"):
            for body in (b'{"question": "caf\xe9 cr\xe8me"}', b"{not json"):
                response = await client.post(path, content=body, headers=json_header)
                assert_error(response, 422, "bad_request", "body")
        for body in (b'{"model": "triton-rag", "messages": [{"role": "user", "content": "caf\xe9"}]}', b"{not json"):
            response = await client.post("/v1/chat/completions", content=body, headers=json_header)
            assert response.status_code == 422, response.text
            assert response.json()["error"]["code"] == "bad_request"
