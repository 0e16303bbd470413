"""What `rag serve` checks before routing or parsing (agent/http/guards.py), the exact `/metrics` route, document ids
holding `/`, and the drain's answers, in-process on the real FastAPI app (`agent.http.create_app`) over httpx's
ASGI transport: no server, no lifespan (routes that need the `RagApp` get a small in-memory one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr, ValidationError

from agent.config.settings import Settings, SettingsError
from agent.core.admission import AdmissionController
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.http import create_app
from agent.http.deps import app_state
from agent.http.guards import LOOPBACK_HOSTS, allowed_hosts_for, documents_body_bytes, require_key_off_loopback
from tests.conftest import REPO_ROOT

KEY = "s3cret-clé"  # non-ASCII: clients send it as UTF-8 bytes


class MemoryDocuments:
    """The part of `RagApp` the document and ask routes use before any answer: stored ids and admission control."""

    def __init__(self, *doc_ids: str) -> None:
        self.stored = set(doc_ids)
        self.admission = AdmissionController(max_in_progress=1, queue_max=1, deadline_s=30.0)

    async def delete_documents(
        self, doc_ids: Sequence[str] = (), source: str | None = None, *, collections: Sequence[str] | None = None
    ) -> list[str]:
        deleted = sorted(self.stored & set(doc_ids))
        self.stored -= set(deleted)
        return deleted


def base_settings(**update: Any) -> Settings:
    return Settings(_env_file=None, **update)  # type: ignore[call-arg]


def app_with(settings: Settings, rag: object | None = None) -> FastAPI:
    app = create_app(settings)
    app_state(app).rag = cast(RagApp, rag or MemoryDocuments())  # only the document routes are called
    return app


def client(app: FastAPI, host: str = "127.0.0.1:8080") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


async def test_an_empty_api_key_is_refused_when_settings_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_KEY", "  ")
    with pytest.raises(ValidationError, match="API_KEY is set but empty"):
        Settings(_env_file=None)  # type: ignore[call-arg]


async def test_a_key_read_with_a_trailing_newline_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_KEY", "from-a-secret-file\n")
    app = app_with(Settings(_env_file=None))  # type: ignore[call-arg]
    async with client(app) as http:
        ok = await http.delete("/v1/documents/x", headers={"Authorization": "Bearer from-a-secret-file"})
    assert ok.status_code == 404 and ok.json()["error"] == "document_not_found"


async def test_a_non_ascii_key_matches_as_utf8_and_only_so() -> None:
    app = app_with(base_settings(api_key=SecretStr(KEY)), MemoryDocuments("d1"))
    async with client(app) as http:
        latin1 = await http.delete("/v1/documents/d1", headers={b"Authorization": b"Bearer " + KEY.encode("latin-1")})
        assert latin1.status_code == 401
        utf8 = await http.delete("/v1/documents/d1", headers={b"Authorization": b"Bearer " + KEY.encode("utf-8")})
        assert utf8.status_code == 200 and utf8.json() == {"deleted": ["d1"]}


class MegabyteBody:
    """A streamed request body of 100 MB in 1 MB pieces; `pulled` counts the pieces the server read."""

    def __init__(self) -> None:
        self.pulled = 0

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body, counted as it is read."""
        for _ in range(100):  # 100 MB if it were all read
            self.pulled += 1
            yield b"x" * 1_000_000


async def test_auth_is_checked_before_the_body_is_read_or_parsed() -> None:
    app = app_with(base_settings(api_key=SecretStr(KEY)))
    body = MegabyteBody()

    async with client(app) as http:
        malformed = await http.post("/v1/documents", content=b"{not json", headers={"Content-Type": "application/json"})
        assert malformed.status_code == 401, malformed.text
        assert malformed.json()["error"] == "unauthorized" and malformed.headers["www-authenticate"] == "Bearer"
        big = await http.post("/v1/ask", content=body.pieces())
    assert big.status_code == 401 and body.pulled <= 1


async def test_an_unknown_key_holder_token_is_refused_before_the_body_is_read_or_parsed() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["a"])
    app = app_with(base_settings())
    app_state(app).keys = keys  # what the lifespan opens
    body = MegabyteBody()

    unknown = {"Authorization": "Bearer rag_notakey", "Content-Type": "application/json"}
    async with client(app) as http:
        for path in ("/v1/documents", "/v1/ask", "/v1/chat/completions", "/mcp"):
            malformed = await http.post(path, content=b"{not json", headers=unknown)
            assert malformed.status_code == 401, (path, malformed.text)
            assert "unauthorized" in malformed.text and malformed.headers["www-authenticate"] == "Bearer"
        big = await http.post("/v1/ask", content=body.pieces(), headers=unknown)
        assert big.status_code == 401 and body.pulled <= 1
        known = await http.post("/v1/ask", content=b"{not json", headers={"Authorization": f"Bearer {token}"})
        assert known.status_code == 422 and known.json()["error"] == "bad_request"  # a real holder's body is parsed


async def test_bodies_over_the_limit_get_413_whether_announced_or_streamed() -> None:
    app = app_with(base_settings(max_body_bytes=1000, upload_max_request_bytes=3000))
    pulled = 0

    async def body(prefix: bytes, chunks: int = 50) -> AsyncIterator[bytes]:
        nonlocal pulled
        pulled = 0
        for _ in range(chunks):
            pulled += 1
            yield prefix + b" " * 400

    async with client(app) as http:
        announced = await http.post("/v1/ask", content=b"{" + b" " * 2000 + b"}")
        assert announced.status_code == 413, announced.text
        assert announced.json()["error"] == "payload_too_large" and "MAX_BODY_BYTES" in announced.json()["detail"]
        streamed = await http.post("/v1/ask", content=body(b'{"question": "'), headers={"Content-Type": "text/json"})
        assert streamed.status_code == 413, streamed.text
        assert streamed.json()["error"] == "payload_too_large"
        assert pulled <= 4  # reading stopped just past the limit
        small = await http.post("/v1/ask", json={"question": ""})
        assert small.status_code == 422 and small.json()["error"] == "bad_request"  # under the limit: parsed

        # file uploads have their own limit
        too_big = await http.post("/v1/documents/files", content=b"-" * 4000)
        assert too_big.status_code == 413 and "UPLOAD_MAX_REQUEST_BYTES" in too_big.json()["detail"]


async def test_a_json_documents_body_over_what_its_characters_can_take_is_refused_unread() -> None:
    settings = base_settings(max_body_bytes=1000, documents_max_text_chars=1000)
    limit = documents_body_bytes(settings)  # 1000 + 12 * 1000 bytes
    pulled = 0

    async def body(size: int, chunk: int = 64 * 1024) -> AsyncIterator[bytes]:
        nonlocal pulled
        pulled = 0
        yield b'{"documents": [{"doc_id": "a", "text": "'
        while pulled < size:
            pulled += chunk
            yield b"x" * chunk

    declared = 100 * 1024 * 1024
    async with client(app_with(settings)) as http:
        announced = await http.post("/v1/documents", content=body(declared), headers={"Content-Length": str(declared)})
        assert announced.status_code == 413, announced.text
        assert announced.json()["error"] == "payload_too_large"
        assert "DOCUMENTS_MAX_TEXT_CHARS" in announced.json()["detail"]
        assert pulled == 0  # refused from Content-Length: not a byte read

        chunked = await http.post("/v1/documents", content=body(declared, chunk=1024))
        assert chunked.status_code == 413 and chunked.json()["error"] == "payload_too_large"
        assert pulled <= limit + 2 * 1024  # reading stopped at the limit, the rest never buffered

        # just over the character limit in JSON's longest spelling (12 bytes a character): read, parsed, and refused
        # by the route for its characters
        emoji = "\U0001f600" * 1001
        escaped = json.dumps({"documents": [{"doc_id": "a", "text": emoji}]}).encode()
        assert len(escaped) > 12 * 1001
        parsed = await http.post("/v1/documents", content=escaped, headers={"Content-Type": "application/json"})
        assert parsed.status_code == 413 and "hold 1001 characters" in parsed.json()["detail"], parsed.text


async def test_a_foreign_host_header_is_refused_on_a_loopback_server() -> None:
    settings = base_settings()
    hosts = allowed_hosts_for(settings, "127.0.0.1")
    assert hosts == LOOPBACK_HOSTS
    app = app_with(settings.model_copy(update={"allowed_hosts": hosts}), MemoryDocuments("d1"))
    async with client(app, host="rebound.attacker.example:8080") as http:
        foreign = await http.delete("/v1/documents/d1")
    assert foreign.status_code == 400 and foreign.json()["error"] == "host_not_allowed"
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080"):
        async with client(app, host=host) as http:
            assert (await http.get("/metrics")).status_code == 200, host
    async with client(app) as http:
        assert (await http.delete("/v1/documents/d1")).json() == {"deleted": ["d1"]}


def test_allowed_hosts_default_to_any_on_all_interfaces_and_follow_the_setting() -> None:
    assert allowed_hosts_for(base_settings(), "0.0.0.0") == ("*",)
    assert allowed_hosts_for(base_settings(), "localhost") == LOOPBACK_HOSTS
    assert allowed_hosts_for(base_settings(allowed_hosts="rag.example.com, *.internal"), "0.0.0.0") == (
        "rag.example.com",
        "*.internal",
    )


def test_listening_beyond_loopback_without_a_key_is_refused() -> None:
    with pytest.raises(SettingsError, match="API_KEY is unset"):
        require_key_off_loopback(base_settings(), "0.0.0.0")
    require_key_off_loopback(base_settings(), "127.0.0.1")
    require_key_off_loopback(base_settings(api_key=SecretStr("k")), "0.0.0.0")
    # with a sign-in issuer every request needs a token (or a key): serving beyond loopback is allowed
    require_key_off_loopback(base_settings(oidc_issuer="https://id.example.com", oidc_client_id="rag"), "0.0.0.0")
    env = {k: v for k, v in os.environ.items() if k not in ("API_KEY", "ALLOWED_HOSTS")}
    result = subprocess.run(
        [sys.executable, "-m", "agent", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "API_KEY is unset" in result.stderr, result.stderr


async def test_document_ids_with_slashes_are_deleted_and_a_missing_one_is_document_not_found() -> None:
    rag = MemoryDocuments("a/handbook.md", "b/c/notes.txt")
    async with client(app_with(base_settings(), rag)) as http:
        plain = await http.delete("/v1/documents/a/handbook.md")
        assert plain.status_code == 200 and plain.json() == {"deleted": ["a/handbook.md"]}
        encoded = await http.delete("/v1/documents/b%2Fc%2Fnotes.txt")
        assert encoded.status_code == 200 and encoded.json() == {"deleted": ["b/c/notes.txt"]}
        missing = await http.delete("/v1/documents/a/handbook.md")
        assert missing.status_code == 404 and missing.json()["error"] == "document_not_found"
        unknown = await http.get("/v1/no-such-route")
        assert unknown.status_code == 404 and unknown.json()["error"] == "not_found"


async def test_metrics_answers_200_without_a_redirect() -> None:
    async with client(app_with(base_settings(api_key=SecretStr(KEY)))) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200, response.headers
    assert "rag_requests" in response.text and response.headers["content-type"].startswith("text/plain")


async def test_no_path_redirects_to_the_server_s_own_address_and_metrics_slash_answers_directly() -> None:
    async with client(app_with(base_settings(api_key=SecretStr(KEY)))) as http:
        slash = await http.get("/metrics/", headers={"Host": "127.0.0.1:8080"})
        assert slash.status_code == 200 and "rag_requests" in slash.text, slash.headers
        keyed = {b"Authorization": b"Bearer " + KEY.encode()}
        for path in ("/v1/documents/", "/v1/jobs/", "/health/"):
            response = await http.get(path, headers=keyed)
            assert response.status_code in (404, 405) and "location" not in response.headers, (path, response.headers)
    app = app_with(base_settings())
    app_state(app).drain.begin(30.0)
    async with client(app) as http:
        assert (await http.get("/metrics/")).status_code == 200  # scraped while draining, like /metrics


async def test_while_draining_requests_and_health_get_503_and_metrics_still_answers() -> None:
    app = app_with(base_settings(), MemoryDocuments("d1"))
    app_state(app).drain.begin(30.0)
    async with client(app) as http:
        health = await http.get("/health")
        assert health.status_code == 503 and health.json()["error"] == "shutting_down"
        assert (await http.get("/ready")).status_code == 503  # the readiness probe takes the pod out of the Service
        assert health.headers["retry-after"] == "1" and health.headers["connection"] == "close"
        assert (await http.delete("/v1/documents/d1")).status_code == 503
        assert (await http.get("/metrics")).status_code == 200


async def test_other_sites_pages_change_nothing_and_nothing_is_framed_or_sniffed() -> None:
    """On the default keyless loopback server, a page of another site (a form post, `fetch(mode: "no-cors")`)
    cannot delete, upload or ask: its browser says where it comes from (`Sec-Fetch-Site`, `Origin`); the server's
    own page and clients that are not browsers can. Every response forbids framing and type sniffing."""
    settings = base_settings()
    app = app_with(settings.model_copy(update={"allowed_hosts": LOOPBACK_HOSTS}), MemoryDocuments("d1", "d2"))
    cross = [
        {"Sec-Fetch-Site": "cross-site", "Origin": "https://attacker.example"},
        {"Sec-Fetch-Site": "same-site"},  # another port of localhost
        {"Origin": "https://attacker.example"},  # a browser that sends no Sec-Fetch-* headers
        {"Origin": "null"},  # a sandboxed frame, a file
        {"Origin": "http://127.0.0.1:3000"},
    ]
    async with client(app) as http:
        for headers in cross:
            deleted = await http.delete("/v1/documents/d1", headers=headers)
            assert deleted.status_code == 403 and deleted.json()["error"] == "forbidden_origin", (headers, deleted.text)
            form = await http.post("/v1/documents/files", files={"files": ("x.txt", b"hello")}, headers=headers)
            assert form.status_code == 403, (headers, form.text)
            assert (await http.post("/v1/ask", json={"question": "q"}, headers=headers)).status_code == 403
        own = {"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8080"}
        assert (await http.delete("/v1/documents/d1", headers=own)).json() == {"deleted": ["d1"]}
        assert (await http.delete("/v1/documents/d2")).json() == {"deleted": ["d2"]}  # curl, an SDK
        read = await http.get("/metrics", headers=cross[0])  # reading changes nothing
    assert read.status_code == 200
    for response in (read, deleted):
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["content-security-policy"] == "frame-ancestors 'none'"
        assert response.headers["x-content-type-options"] == "nosniff"
