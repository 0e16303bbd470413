"""Sign-in tokens on every route that serves callers (`/v1/ask`, the OpenAI-compatible route, `/mcp`, `/a2a`),
in-process over the in-memory documents, with tokens of the REAL OpenID Connect provider `oidc-provider-mock`
(a subprocess on a free port, `tests.oidc_issuer.running_provider`; signed in without a browser: the authorization
form, then the token endpoint with PKCE): a valid token is a caller with the collections its groups are granted and
its groups' access; a nested group claim; each forged token is 401 with its one-line reason, in the body and in
`WWW-Authenticate`, before the body is read; an unreachable issuer is 503. The checker's own logic:
tests/agent/core/test_oidc.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, TaskState
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from pydantic_ai.models.function import FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.quotas import InMemoryUsage, QuotaMetrics, Quotas
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import CallerIdentity, app_state
from agent.http.errors import ApiError
from infra.processes import free_port
from tests.a2a_rig import ask as a2a_ask
from tests.a2a_rig import served
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.oidc_issuer import (
    OTHER_KEY,
    Grants,
    Issuer,
    Provider,
    hs256_with_public_key,
    resigned,
    running_provider,
    signed,
    unsigned,
)
from tests.openai_rig import Rig, ask, assert_openai_error
from tests.scripted_model import ScriptedModel as Model
from tools.access import PUBLIC_GROUP, Role, caller_access
from tools.in_memory import InMemoryCollection
from tools.ingest import SourceDocument
from tools.records import Usage
from tools.scope import SearchScope

CLIENT_ID = "rag"
USERS: list[dict[str, Any]] = [
    {"sub": "alice", "groups": ["eng"]},
    {"sub": "bob", "realm_access": {"roles": ["ops", "audit"]}, "groups": "solo"},
]
GRANTS = {"eng": {"default": Role.READER}, "ops": {"notes": Role.UPLOADER}, PUBLIC_GROUP: {"public": Role.READER}}
SECRET = SourceDocument("b12-other", "Vitamin B12 (other team)", "Vitamin B12 deficiency raises homocysteine.", "o", {})
"""A document in the collection `other`, which no group is granted."""


@pytest.fixture(scope="module")
def provider(server_root: Path) -> Iterator[Provider]:
    """The real provider with `USERS`, for this module; stopped at its end, failures included."""
    with running_provider(server_root / "oidc-http", USERS) as running:
        yield running


def signed_in_rig(issuer: str, **settings: Any) -> tuple[Rig, Grants]:
    """The OpenAI rig (no API key, no keys) with sign-in through `issuer` and `GRANTS`."""
    rig = Rig(oidc_issuer=issuer, oidc_client_id=CLIENT_ID, **settings)
    grants = Grants(GRANTS)
    app_state(rig.app).grants = grants
    return rig, grants


def read_by(groups: list[str], *collections: str) -> SearchScope:
    return SearchScope(collections=collections).read_by(caller_access(groups))


async def test_a_signed_in_user_asks_over_what_its_groups_are_granted(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, grants = signed_in_rig(provider.issuer)
    token = provider.id_token("alice")
    tenants: list[object] = []
    enter = rig.rag.admission.enter

    def entered(tenant: object = None) -> Any:
        tenants.append(tenant)
        return enter(tenant)

    monkeypatch.setattr(rig.rag.admission, "enter", entered)
    async with rig.http(Authorization=f"Bearer {token}") as client:
        asked = await client.post("/v1/ask", json={"question": COVERED})
        models = await client.get("/v1/models")
    completion = await rig.sdk(token).chat.completions.create(model="triton-rag-always", messages=ask()["messages"])
    assert asked.status_code == 200 and asked.json()["answer"], asked.text
    assert models.status_code == 200 and completion.choices[0].message.content == "It does [1]."
    assert rig.collection.scopes == [read_by(["eng"], "default", "public")] * 2
    assert set(grants.asked) == {("eng", PUBLIC_GROUP)}
    assert tenants == ["sub:alice"] * 2  # its own fair share of admission control, as a key's


async def test_sign_in_is_required_once_configured_and_api_keys_keep_working(provider: Provider) -> None:
    rig, _ = signed_in_rig(provider.issuer)
    async with rig.http() as client:
        anonymous = await client.post("/v1/ask", json={"question": COVERED})
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthorized"
    keyed, _ = signed_in_rig(provider.issuer, api_key=SecretStr("admin-secret"))
    async with keyed.http(Authorization="Bearer admin-secret") as client:
        assert (await client.post("/v1/ask", json={"question": COVERED})).status_code == 200
    assert keyed.collection.scopes == [SearchScope()]  # the admin: every collection, every document


async def test_a_nested_group_claim_and_a_string_claim_give_the_user_s_groups(provider: Provider) -> None:
    nested, grants = signed_in_rig(provider.issuer, oidc_groups_claim="realm_access.roles")
    token = provider.id_token("bob")
    async with nested.http(Authorization=f"Bearer {token}") as client:
        assert (await client.post("/v1/ask", json={"question": COVERED})).status_code == 200
    assert nested.collection.scopes == [read_by(["audit", "ops"], "notes", "public")]
    assert grants.asked == [("audit", PUBLIC_GROUP, "ops")]  # sorted
    flat, grants = signed_in_rig(provider.issuer)
    async with flat.http(Authorization=f"Bearer {token}") as client:
        assert (await client.post("/v1/ask", json={"question": COVERED})).status_code == 200
    assert flat.collection.scopes == [read_by(["solo"], "public")]


@asynccontextmanager
async def mcp_with(issuer: str, token: str) -> AsyncIterator[Client]:
    """The SDK's MCP client to `/mcp` of the app (its lifespan run) signing in through `issuer`, over `DOCUMENTS` in
    `default` and `SECRET` in `other`, sending `Authorization: Bearer <token>`."""
    settings = Settings.model_validate({"refusal_min_score": 0.3, "oidc_issuer": issuer, "oidc_client_id": CLIENT_ID})
    collection = InMemoryCollection(DOCUMENTS)
    await collection.add_documents([SECRET], "other")
    rag = RagApp(settings, Services(collection, collection, FunctionModel(stream_function=Model().stream)))
    app = create_app(settings, rag)
    headers = {"Authorization": f"Bearer {token}"}
    async with app.router.lifespan_context(app):
        app_state(app).grants = Grants(GRANTS)
        async with (
            httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app), base_url="http://localhost", headers=headers
            ) as http,
            Client(streamable_http_client("http://localhost/mcp", http_client=http)) as client,
        ):
            yield client


async def test_a_signed_in_user_s_mcp_tools_see_only_its_collections(provider: Provider) -> None:
    async with mcp_with(provider.issuer, provider.id_token("alice")) as client:
        found = await client.call_tool("search", {"query": COVERED, "top_k": 10})
        refused = await client.call_tool("search", {"query": COVERED, "collection": "other"})
    assert found.structured_content is not None and not found.is_error
    assert {p["doc_id"] for p in found.structured_content["passages"]} <= {d.doc_id for d in DOCUMENTS}
    assert refused.is_error and "forbidden_collection" in refused.content[0].text  # type: ignore[union-attr]


async def test_a_signed_in_user_s_a2a_task_is_answered_and_read_back_by_that_user_only(provider: Provider) -> None:
    settings = Settings.model_validate(
        {"refusal_min_score": 0.3, "oidc_issuer": provider.issuer, "oidc_client_id": CLIENT_ID, "api_key": "admin"}
    )
    collection = InMemoryCollection(DOCUMENTS)
    model = FunctionModel(stream_function=Model().stream)
    app = create_app(settings, RagApp(settings, Services(collection, collection, model)))
    async with served(app) as http:
        app_state(app).grants = Grants(GRANTS)
        outcome = await a2a_ask(http, provider.id_token("alice"), COVERED, streaming=False)
        request = GetTaskRequest(id=outcome.task_id)
        read_back: dict[str, object] = {}
        for who, token in (
            ("alice", provider.id_token("alice")),
            ("bob", provider.id_token("bob")),
            ("admin", "admin"),
        ):
            http.headers["Authorization"] = f"Bearer {token}"
            client = await create_client("http://localhost/a2a", ClientConfig(httpx_client=http))
            try:
                read_back[who] = (await client.get_task(request)).status.state
            except Exception as exc:  # noqa: BLE001 - the client's error for a task it may not see
                read_back[who] = str(exc)
    _, data = outcome.answer()
    assert [c["doc_id"] for c in data["citations"]] == ["b12"]
    assert read_back["alice"] == read_back["admin"] == TaskState.TASK_STATE_COMPLETED
    assert "task not found" in str(read_back["bob"]).lower()


async def test_a_signed_in_user_sees_no_key_s_usage(provider: Provider) -> None:
    rig, _ = signed_in_rig(provider.issuer)
    usage = InMemoryUsage()
    await usage.record(7, date.today(), Usage(requests=3))
    app_state(rig.app).quotas = Quotas(rig.settings, usage, QuotaMetrics.create(CollectorRegistry()))
    async with rig.http(Authorization=f"Bearer {provider.id_token('alice')}") as client:
        mine = await client.get("/v1/usage")
    assert mine.status_code == 200 and mine.json()["usage"] == [], mine.text


def assert_refused(response: httpx.Response, reason: str) -> None:
    """A 401 `unauthorized` with `reason` as its detail and in `WWW-Authenticate` (the API's error shape)."""
    assert response.status_code == 401, response.text
    assert response.json() == {"error": "unauthorized", "detail": reason}
    assert response.headers["www-authenticate"] == f'Bearer error="invalid_token", error_description="{reason}"'


async def refused_everywhere(rig: Rig, token: str, reason: str) -> None:
    """`token` is refused with `reason` on `/v1/ask`, `/mcp` and `/a2a` (before their bodies are read: the body
    is not JSON) and on the OpenAI route (in OpenAI's error shape), with nothing searched."""
    async with rig.http(Authorization=f"Bearer {token}") as client:
        for path in ("/v1/ask", "/mcp", "/a2a"):
            assert_refused(await client.post(path, content=b"{not json"), reason)
        openai = await client.post("/v1/chat/completions", json=ask())
    assert assert_openai_error(openai, 401, "unauthorized") == reason
    assert not getattr(rig.collection, "scopes", [])


async def test_each_forged_token_of_the_real_issuer_is_401_with_its_reason(provider: Provider) -> None:
    rig, _ = signed_in_rig(provider.issuer)
    token = provider.id_token("alice")
    claims = jwt.decode(token, options={"verify_signature": False})
    forged = {
        "bad signature: the token was not signed by the issuer's key": resigned(token, OTHER_KEY),
        f"wrong audience: the token is not for {CLIENT_ID}": provider.id_token("alice", client_id="another-app"),
        "unsigned token (alg none) refused": unsigned(claims),
        "token signed with HS256, a shared-secret algorithm; the issuer signs with a private key": (
            hs256_with_public_key(claims, provider.jwks()[0])
        ),
    }
    for reason, bad in forged.items():
        await refused_everywhere(rig, bad, reason)
    # the same provider reached by another name is another issuer: its discovery document names that one
    port = provider.issuer.rsplit(":", 1)[1]
    other_name, _ = signed_in_rig(f"http://localhost:{port}")
    await refused_everywhere(other_name, token, f"wrong issuer: the token is not from http://localhost:{port}")


async def test_forged_tokens_of_an_issuer_the_test_holds_are_401_with_their_reasons() -> None:
    rig, _ = signed_in_rig("https://issuer.test/realms/rag")
    app_state(rig.app).oidc = Issuer().verifier(leeway_s=0)
    for reason, bad in {
        "token expired": signed(exp=1_000_000),
        "wrong audience: the token is not for rag-client": signed(aud="another-app"),
        "wrong issuer: the token is not from https://issuer.test/realms/rag": signed(iss="https://evil.test"),
        "bad signature: the token was not signed by the issuer's key": signed(OTHER_KEY),
        "unknown signing key (kid 'k9')": signed(kid="k9"),
    }.items():
        await refused_everywhere(rig, bad, reason)


async def test_an_unreachable_issuer_is_503_not_401() -> None:
    rig, _ = signed_in_rig(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    async with rig.http(Authorization=f"Bearer {signed()}") as client:
        for path in ("/v1/ask", "/mcp"):
            response = await client.post(path, json={"question": COVERED})
            assert response.status_code == 503 and response.headers["retry-after"] == "5", response.text
            assert response.json()["error"] == "issuer_unavailable" and "cannot be read" in response.json()["detail"]


def test_writing_needs_role_uploader_in_the_collection() -> None:
    caller = CallerIdentity(("notes", "public"), roles={"notes": Role.UPLOADER, "public": Role.READER}, subject="bob")
    assert caller.target("notes") == "notes" and caller.owner == "sub:bob"
    for collection in ("public", "other", None):
        with pytest.raises(ApiError) as refused:
            caller.target(collection)
        assert (refused.value.status_code, refused.value.kind) == (403, "forbidden_collection")
    assert CallerIdentity(("public",)).target("public") == "public"  # a key scoped to collections: every role
