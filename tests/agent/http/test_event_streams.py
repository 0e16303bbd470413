"""The answer streams (`/v1/ask/stream`, `/v1/chat/completions` with `stream: true`) as proxies and clients treat
them, in-process (the app over the in-memory collection and a gated pydantic-ai FunctionModel): a client that goes
away mid-answer cancels the LLM request and gives its admission slot back by the time the response ends, whatever
ASGI spec version the server speaks (2.3: Starlette watches for the disconnect; 2.4: nobody does unless the route
does); and the streams tell proxies not to transform (compress, buffer) them and are never gzipped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from agent.http import openai_chat
from tests.agent_corpus import COVERED
from tests.openai_rig import Rig, ask

STREAMS = {
    "/v1/ask/stream": {"question": COVERED},
    "/v1/chat/completions": ask(stream=True),
}


class RawCall:
    """One POST through raw ASGI with `spec_version`: `sent` records what the app sent; `disconnect()` makes the
    client go away (the next `receive` returns `http.disconnect`)."""

    def __init__(self, rig: Rig, path: str, body: dict[str, Any], spec_version: str) -> None:
        self.path, self.spec_version = path, spec_version
        self.body = json.dumps(body).encode()
        self.gone = asyncio.Event()
        self.sent: list[MutableMapping[str, Any]] = []
        self.delivered = False
        self.task = asyncio.create_task(rig.app(self.scope(), self.receive, self.send))

    async def receive(self) -> dict[str, Any]:
        if not self.delivered:
            self.delivered = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)

    def scope(self) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": self.spec_version},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"rag"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("rag", 80),
        }


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
@pytest.mark.parametrize("path", list(STREAMS))
async def test_a_client_gone_mid_answer_frees_the_llm_and_the_slot_when_the_response_ends(
    path: str, spec_version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_chat, "KEEPALIVE_S", 3600.0)  # no keep-alive write would find the client gone
    rig = Rig(answer_max_in_progress=1, answer_queue_max=0)
    rig.model.gate = asyncio.Event()  # the model writes only when told to: it is mid-answer when the client goes
    call = RawCall(rig, path, STREAMS[path], spec_version)
    await asyncio.wait_for(rig.model.started.wait(), 10)
    assert rig.rag.admission.in_progress == 1
    call.gone.set()
    await asyncio.wait_for(call.task, 10)  # the bound only stops a broken run: the response ends at the disconnect
    assert rig.model.cancelled and rig.rag.admission.in_progress == 0
    async with rig.http() as client:  # the slot takes the next question at once
        rig.model.gate.set()
        assert (await client.post(path, json=STREAMS[path])).status_code == 200


@pytest.mark.parametrize("path", list(STREAMS))
async def test_streams_say_no_transform_and_are_never_compressed(rig: Rig, path: str) -> None:
    async with rig.http(**{"Accept-Encoding": "gzip, deflate, br"}) as client:
        response = await client.post(path, json=STREAMS[path])
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    directives = {d.strip() for d in response.headers["cache-control"].split(",")}
    assert {"no-cache", "no-transform"} <= directives, response.headers
    assert response.headers["x-accel-buffering"] == "no" and "content-encoding" not in response.headers
    assert len(response.headers.get_list("cache-control")) == 1


@pytest.fixture
def rig() -> Rig:
    return Rig()
