"""`filter` and `collection` on `/v1/ask` and `/v1/ask/stream`, in-process over the in-memory collection (the
app and fake model of test_http_contract.py): a filter narrows what is searched and cited; a bad filter or
collection is a 422 naming it, before anything is searched."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent_corpus import COVERED
from tests.http_rig import Served, assert_error, serve, sse_events
from tools.ingest import SourceDocument

NUTRITION = SourceDocument(
    "b12-nutrition", "Vegan diets", "Homocysteine levels in vegans.", "n.md", {"team": "nutrition", "year": 2021}
)
"""Shares two words with COVERED (hashed bag-of-words cosine 0.33, above the refusal threshold 0.3), fewer than
the `b12` document, which ranks first without a filter."""


async def served_with_papers() -> Served:
    """The contract test's app, plus `NUTRITION` in collection `papers`."""
    served = serve()
    await served.collection.add_documents([NUTRITION], collection="papers")
    return served


@pytest.mark.parametrize(
    "scope",
    [
        {"filter": {"team": "nutrition"}},
        {"filter": {"year": [2020, 2021]}},
        {"collection": "papers"},
        {"filter": {"source": "n.md"}, "collection": "papers"},
    ],
)
async def test_a_filter_narrows_the_cited_documents(scope: dict[str, Any]) -> None:
    served = await served_with_papers()
    async with served.client() as client:
        everything = (await client.post("/v1/ask", json={"question": COVERED, "top_k": 2})).json()
        narrowed = await client.post("/v1/ask", json={"question": COVERED, "top_k": 2} | scope)
        stream = await client.post("/v1/ask/stream", json={"question": COVERED, "top_k": 2} | scope)
    assert [c["doc_id"] for c in everything["citations"]] == ["b12"]
    assert narrowed.status_code == 200, narrowed.text
    assert [c["doc_id"] for c in narrowed.json()["citations"]] == ["b12-nutrition"]
    result = sse_events(stream.text)[-1]
    assert result[0] == "result" and [c["doc_id"] for c in result[1]["citations"]] == ["b12-nutrition"]


async def test_a_filter_nothing_matches_refuses_without_calling_the_model() -> None:
    served = await served_with_papers()
    async with served.client() as client:
        body = (await client.post("/v1/ask", json={"question": COVERED, "filter": {"year": "2021"}})).json()
    assert body["refused"] is True and body["citations"] == [] and not served.script.started.is_set()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"filter": {"team": []}}, "filter 'team'"),
        ({"filter": {"team": {"a": 1}}}, "filter 'team'"),
        ({"filter": {"ingested_after": "yesterday"}}, "filter 'ingested_after'"),
        ({"filter": {"source": 3}}, "filter 'source'"),
        ({"filter": ["team", "bio"]}, "filter"),
        ({"collection": "Not A Name"}, "collection 'Not A Name'"),
    ],
)
async def test_a_bad_filter_is_a_422_naming_the_key(extra: dict[str, Any], needle: str) -> None:
    served = await served_with_papers()
    async with served.client() as client:
        for path in ("/v1/ask", "/v1/ask/stream"):
            response = await client.post(path, json={"question": COVERED} | extra)
            assert_error(response, 422, "bad_request", needle)
            assert response.json()["detail"].count(needle) == 1, response.text  # once, though validated twice
    assert not served.collection.searches
