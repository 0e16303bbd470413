"""The feedback routes in-process, without servers (in-memory answers, records and keys): rating `/v1/ask` answers and
chat completions, reading, counting and deleting ratings, careful text, and tenants that never see each other's
feedback. Against the real stack: tests/agent/http/test_feedback_stack.py."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import pytest
from prometheus_client import REGISTRY
from pydantic import SecretStr

from agent.core.keys import InMemoryKeys
from agent.http.deps import app_state, get_keys
from tests.agent_corpus import COVERED, OFF_TOPIC
from tests.http_rig import assert_error
from tests.openai_rig import Rig, ask

ADMIN_KEY = "admin-secret"


def rated_total(rating: str) -> float:
    return REGISTRY.get_sample_value("rag_feedback_total", {"rating": rating}) or 0.0


async def keyed(rig: Rig, *collections: list[str]) -> list[str]:
    """Keys over each of `collections` in `rig`'s app; their tokens."""
    keys = InMemoryKeys()
    tokens = [(await keys.create(c))[1] for c in collections]
    app_state(rig.app).keys = keys
    rig.app.dependency_overrides[get_keys] = lambda: keys
    return tokens


async def asked(rig: Rig, token: str | None = None, question: str = COVERED, **extra: Any) -> dict[str, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with rig.http(**headers) as client:
        response = await client.post("/v1/ask", json={"question": question, **extra})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_an_answer_is_rated_listed_counted_and_deleted() -> None:
    rig = Rig()
    answer = await asked(rig, top_k=2)
    before = rated_total("down")
    async with rig.http() as client:
        body = {
            "answer_id": answer["answer_id"],
            "rating": "down",
            "comment": "wrong vitamin",
            "right_source": "folate",
        }
        rated = await client.post("/v1/feedback", json=body)
        assert rated.status_code == 200, rated.text
        out = rated.json()
        assert (out["answer_id"], out["rating"], out["comment"], out["right_source"]) == (
            answer["answer_id"],
            "down",
            "wrong vitamin",
            "folate",
        )
        # what it rates: the question and query searched, retrieved (cited or not) and cited passages, the scope
        assert out["question"] == COVERED and out["searches"] == [COVERED] and out["answer"] == answer["answer"]
        assert [c["chunk_id"] for c in out["cited"]] == [c["chunk_id"] for c in answer["citations"]]
        assert len(out["retrieved"]) == 2 and {"chunk_id", "doc_id", "score", "passage"} <= set(out["retrieved"][0])
        assert out["llm_model"] and out["policy"] == "always" and out["collections"] == ["default"]
        assert rated_total("down") == before + 1
        # a second rating replaces the first and keeps its comment
        again = (await client.post("/v1/feedback", json={"answer_id": answer["answer_id"], "rating": "up"})).json()
        assert (again["rating"], again["comment"]) == ("up", "wrong vitamin")
        listed = (await client.get("/v1/feedback")).json()["feedback"]
        assert [f["answer_id"] for f in listed] == [answer["answer_id"]]
        assert (await client.get("/v1/feedback", params={"rating": "down"})).json()["feedback"] == []
        assert (await client.get("/v1/feedback", params={"since": "2999-01-01"})).json()["feedback"] == []
        assert len((await client.get("/v1/feedback", params={"collection": "default"})).json()["feedback"]) == 1
        counts = (await client.get("/v1/feedback/counts", params={"days": 3})).json()
        assert counts["days"] == 3 and counts["totals"] == {"up": 1, "down": 0, "total": 1}
        assert (await client.get(f"/v1/feedback/{answer['answer_id']}")).json()["rating"] == "up"
        deleted = await client.delete(f"/v1/feedback/{answer['answer_id']}")
        assert deleted.status_code == 204
        assert_error(await client.get(f"/v1/feedback/{answer['answer_id']}"), 404, "answer_not_found")
        assert_error(await client.delete(f"/v1/feedback/{answer['answer_id']}"), 404, "answer_not_found")
        gone = {"answer_id": answer["answer_id"], "rating": "up"}
        assert_error(await client.post("/v1/feedback", json=gone), 404, "answer_not_found")


async def test_a_completion_is_rated_by_its_id_both_ways() -> None:
    rig = Rig()
    async with rig.http() as client:
        completion = (await client.post("/v1/chat/completions", json=ask())).json()
        refused = (await client.post("/v1/chat/completions", json=ask(OFF_TOPIC))).json()
        assert completion["id"].startswith("chatcmpl-") and UUID(completion["id"].removeprefix("chatcmpl-"))
        rated = await client.post("/v1/feedback", json={"response_id": completion["id"], "rating": "up"})
        assert rated.status_code == 200 and rated.json()["answer_id"] == completion["id"].removeprefix("chatcmpl-")
        path = f"/v1/chat/completions/{refused['id']}/feedback"
        down = await client.post(path, json={"rating": "down", "comment": "it is covered"})
        assert down.status_code == 200, down.text
        assert down.json()["refused"] is True and down.json()["cited"] == []
        assert (await client.get(f"/v1/feedback/{refused['id']}")).json()["comment"] == "it is covered"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"comment": "a\x00b"}, "comment"),
        ({"right_source": "doc\x00"}, "right_source"),
        ({"comment": "x" * 2001}, "comment"),
        ({"rating": "meh"}, "rating"),
        ({"answer_id": "not-a-uuid"}, "answer_id"),
        ({"answer_id": None, "response_id": "chatcmpl-123"}, "response_id"),
        ({"answer_id": None}, "exactly one of answer_id and response_id"),
    ],
)
async def test_bad_ratings_are_422_naming_the_field(extra: dict[str, Any], named: str) -> None:
    rig = Rig()
    answer = await asked(rig)
    body = {k: v for k, v in ({"answer_id": answer["answer_id"], "rating": "up"} | extra).items() if v is not None}
    async with rig.http() as client:
        response = await client.post("/v1/feedback", json=body)
    assert_error(response, 422, "bad_request", named)


async def test_a_comment_is_stored_and_returned_as_text_never_as_html() -> None:
    rig = Rig()
    answer = await asked(rig)
    comment = '<script>alert("x")</script> & <b>bold</b>'
    async with rig.http() as client:
        rated = await client.post(
            "/v1/feedback", json={"answer_id": answer["answer_id"], "rating": "down", "comment": comment}
        )
        listed = await client.get("/v1/feedback")
    for response in (rated, listed):  # JSON, never a page: the text is a JSON string for the client to escape
        assert response.headers["content-type"] == "application/json"
    assert rated.json()["comment"] == comment and listed.json()["feedback"][0]["comment"] == comment


async def test_tenants_never_see_or_rate_each_other_s_answers() -> None:
    rig = Rig(api_key=SecretStr(ADMIN_KEY))
    alice, bob = await keyed(rig, ["papers"], ["notes"])
    hers = await asked(rig, alice)
    his = await asked(rig, bob)
    async with rig.http(Authorization=f"Bearer {bob}") as client:
        # another key's answer is exactly a missing one: rating, reading, deleting
        missing = {"answer_id": str(uuid4()), "rating": "up"}
        foreign = {"answer_id": hers["answer_id"], "rating": "up"}
        unknown, other = (
            await client.post("/v1/feedback", json=missing),
            await client.post("/v1/feedback", json=foreign),
        )
        assert_error(other, 404, "answer_not_found")
        assert unknown.json()["detail"].replace(missing["answer_id"], "") == other.json()["detail"].replace(
            hers["answer_id"], ""
        )
        assert_error(await client.delete(f"/v1/feedback/{hers['answer_id']}"), 404, "answer_not_found")
        assert (await client.post("/v1/feedback", json={"answer_id": his["answer_id"], "rating": "down"})).is_success
        assert [f["answer_id"] for f in (await client.get("/v1/feedback")).json()["feedback"]] == [his["answer_id"]]
        assert_error(await client.get("/v1/feedback", params={"collection": "papers"}), 403, "forbidden_collection")
        assert (await client.get("/v1/feedback/counts")).json()["totals"]["total"] == 1
    async with rig.http(Authorization=f"Bearer {alice}") as client:
        assert (await client.post("/v1/feedback", json=foreign)).is_success
        assert [f["answer_id"] for f in (await client.get("/v1/feedback")).json()["feedback"]] == [hers["answer_id"]]
        assert (await client.get("/v1/feedback/counts")).json()["totals"] == {"up": 1, "down": 0, "total": 1}
    async with rig.http(Authorization=f"Bearer {ADMIN_KEY}") as client:
        every = (await client.get("/v1/feedback")).json()["feedback"]
        assert {f["answer_id"] for f in every} == {hers["answer_id"], his["answer_id"]}
        assert all("owner" not in f and "key_id" not in f for f in every)
        assert (await client.get("/v1/feedback", params={"collection": "papers"})).json()["feedback"][0][
            "answer_id"
        ] == hers["answer_id"]
        assert (await client.delete(f"/v1/feedback/{his['answer_id']}")).status_code == 204
