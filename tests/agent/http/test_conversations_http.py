"""The conversation routes and `/v1/ask` with `conversation_id`, in-process without servers: the app of `rag serve`
with a `RagApp` over the in-memory collection, the in-memory conversation log and a scripted FunctionModel. Create,
list (pages), read, delete; a follow-up over `/v1/ask` and `/v1/ask/stream` searched with the earlier turn's subject
and stored; unknown ids are 404 `conversation_not_found` before anything runs; the API key guards every route."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest
from pydantic import SecretStr

from tests.conversation_rig import FOLLOW_UP, SUBJECT, ConversationServed, texts
from tests.http_rig import assert_error, sse_events


@pytest.fixture
def served() -> ConversationServed:
    return ConversationServed()


async def test_follow_up_over_ask_uses_the_earlier_turn_and_is_stored(served: ConversationServed) -> None:
    async with served.client() as client:
        created = await client.post("/v1/conversations")
        assert created.status_code == 201, created.text
        conversation = created.json()
        assert set(conversation) == {"id", "title", "created_at", "updated_at", "turn_count"}
        cid = conversation["id"]
        first = (await client.post("/v1/ask", json={"question": SUBJECT, "conversation_id": cid})).json()
        assert first["conversation_id"] == cid and first["searches"] == [SUBJECT]
        response = await client.post("/v1/ask", json={"question": FOLLOW_UP, "conversation_id": cid})
        second = response.json()
        assert response.status_code == 200, second
        assert "Vitamin B12" in second["searches"][0] and not second["refused"]
        assert texts(served.model.seen[-1])[0] == ("user", SUBJECT)
        read = (await client.get(f"/v1/conversations/{cid}")).json()
        one_off = (await client.post("/v1/ask", json={"question": FOLLOW_UP})).json()
    assert read["title"] == SUBJECT and read["turn_count"] == 2
    assert [(t["n"], t["question"]) for t in read["turns"]] == [(1, SUBJECT), (2, FOLLOW_UP)]
    assert read["turns"][1]["citations"][0]["doc_id"] == "b12" and read["turns"][1]["answer"] == second["answer"]
    assert one_off["conversation_id"] is None and one_off["refused"]  # without the id: a one-off, not stored
    assert (await served.rag.conversation(UUID(read["id"]))).turn_count == 2


async def test_follow_up_over_the_stream_carries_the_conversation_id(served: ConversationServed) -> None:
    async with served.client() as client:
        cid = (await client.post("/v1/conversations", json={"title": "streamed"})).json()["id"]
        await client.post("/v1/ask/stream", json={"question": SUBJECT, "conversation_id": cid})
        stream = await client.post("/v1/ask/stream", json={"question": FOLLOW_UP, "conversation_id": cid})
        read = (await client.get(f"/v1/conversations/{cid}")).json()
    events = sse_events(stream.text)
    assert events[0][0] == "tool_call" and "Vitamin B12" in events[0][1]["args"]["query"]
    name, result = events[-1]
    assert name == "result" and result["conversation_id"] == cid and not result["refused"]
    assert read["title"] == "streamed" and [t["question"] for t in read["turns"]] == [SUBJECT, FOLLOW_UP]


async def test_unknown_conversation_is_a_404_before_any_work(served: ConversationServed) -> None:
    unknown = str(uuid4())
    async with served.client() as client:
        for path in ("/v1/ask", "/v1/ask/stream"):
            response = await client.post(path, json={"question": SUBJECT, "conversation_id": unknown})
            assert_error(response, 404, "conversation_not_found", unknown)
        assert_error(await client.get(f"/v1/conversations/{unknown}"), 404, "conversation_not_found")
        assert_error(await client.delete(f"/v1/conversations/{unknown}"), 404, "conversation_not_found")
        assert_error(await client.get("/v1/conversations/not-a-uuid"), 422, "bad_request", "conversation_id")
        bad = {"question": SUBJECT, "conversation_id": "nope"}
        assert_error(await client.post("/v1/ask", json=bad), 422, "bad_request", "conversation_id")
    assert not served.collection.searches and served.model.seen == []


async def test_list_pages_newest_first_and_delete(served: ConversationServed) -> None:
    async with served.client() as client:
        ids = [(await client.post("/v1/conversations", json={"title": f"c{i}"})).json()["id"] for i in range(3)]
        await client.post("/v1/ask", json={"question": SUBJECT, "conversation_id": ids[0]})
        first = (await client.get("/v1/conversations?limit=2")).json()
        rest = (await client.get("/v1/conversations", params={"limit": 2, "cursor": first["next_cursor"]})).json()
        assert [c["title"] for c in first["conversations"]] == ["c0", "c2"] and first["total"] == 3
        assert [c["title"] for c in rest["conversations"]] == ["c1"] and rest["next_cursor"] is None
        assert first["conversations"][0]["turn_count"] == 1
        deleted = await client.delete(f"/v1/conversations/{ids[0]}")
        assert deleted.status_code == 200 and deleted.json() == {"deleted": ids[0]}
        assert_error(await client.get(f"/v1/conversations/{ids[0]}"), 404, "conversation_not_found")
        assert (await client.get("/v1/conversations")).json()["total"] == 2
        assert_error(await client.get("/v1/conversations?cursor=zzz"), 422, "bad_request", "cursor")
        assert_error(await client.get("/v1/conversations?limit=0"), 422, "bad_request", "limit")
        too_long = await client.post("/v1/conversations", json={"title": "x" * 201})
        assert_error(too_long, 422, "bad_request", "title")
        assert_error(await client.post("/v1/conversations", json={"title": "a\u0000b"}), 422, "bad_request", "NUL")


async def test_api_key_guards_the_conversation_routes() -> None:
    served = ConversationServed(api_key=SecretStr("s3cret-key"))
    async with served.client() as client:
        assert_error(await client.post("/v1/conversations"), 401, "unauthorized")
        assert_error(await client.get("/v1/conversations"), 401, "unauthorized")
        assert_error(await client.get(f"/v1/conversations/{uuid4()}"), 401, "unauthorized")
        assert_error(await client.delete(f"/v1/conversations/{uuid4()}"), 401, "unauthorized")
    async with served.client(Authorization="Bearer s3cret-key") as client:
        assert (await client.post("/v1/conversations")).status_code == 201
        assert (await client.get("/v1/conversations")).json()["total"] == 1
