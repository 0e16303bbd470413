"""Sign-in issuers for the tests of `agent.core.oidc`:

- `Issuer`: an issuer whose keys the test holds (its discovery document and JWKS over an httpx mock transport), to
  forge every kind of bad token (`signed`, `unsigned`, `hs256_with_public_key`);
- `running_provider`: the real OpenID Connect provider `oidc-provider-mock` as a subprocess on a free port (recorded
  under the session's watched server directory, stopped by PID when the block ends, failures included), and
  `Provider.id_token`, which signs a user in without a browser: the authorization form's POST, then the token
  endpoint with the PKCE verifier;
- `Grants`: group grants in memory (`tools.access.GrantBook`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from agent.core.oidc import OidcVerifier
from infra import processes
from tools.access import Role

ISSUER = "https://issuer.test/realms/rag"
AUDIENCE = "rag-client"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
"""A key the issuer does not have (a forger's)."""
PROVIDER = "oidc-provider"
"""The service name of the provider's PID file and log."""
REDIRECT_URI = "http://localhost/signed-in"


def b64(data: bytes) -> str:
    """base64url without padding (JOSE)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(key: Any, kid: str) -> dict[str, Any]:
    """The public JWK of the private `key` (RSA or EC) with `kid`."""
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    jwk: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
    return jwk | {"kid": kid, "use": "sig"}


def claims(**changes: Any) -> dict[str, Any]:
    """A valid token's claims for `ISSUER` and `AUDIENCE`, with `changes` (None drops a claim)."""
    now = int(time.time())
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300, "groups": ["eng", "ops"]}
    return {k: v for k, v in (base | changes).items() if v is not None}


def signed(key: Any = RSA_KEY, alg: str = "RS256", kid: str | None = "k1", **changes: Any) -> str:
    """A token of `claims(**changes)` signed with `key`."""
    return jwt.encode(claims(**changes), key, algorithm=alg, headers={"kid": kid} if kid else None)


def unsigned(payload: Mapping[str, Any]) -> str:
    """A token of `payload` with `alg: none` and no signature."""
    return b64(json.dumps({"alg": "none", "typ": "JWT"}).encode()) + "." + b64(json.dumps(payload).encode()) + "."


def hs256_with_public_key(payload: Mapping[str, Any], public_jwk: Mapping[str, Any]) -> str:
    """A token of `payload` "signed" with HS256 keyed by the issuer's PUBLIC key (its PEM), the classic algorithm
    confusion attack: a verifier that lets the token choose its algorithm would accept it."""
    key = jwt.algorithms.RSAAlgorithm.from_jwk(dict(public_jwk))
    assert isinstance(key, rsa.RSAPublicKey)
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "typ": "JWT"} | ({"kid": public_jwk["kid"]} if "kid" in public_jwk else {})
    signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(dict(payload)).encode())
    return signing_input + "." + b64(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())


def resigned(token: str, key: Any) -> str:
    """`token`'s header and claims signed again with `key` (a forger's): same claims, wrong signature."""
    header = jwt.get_unverified_header(token)
    payload = jwt.decode(token, options={"verify_signature": False})
    return jwt.encode(payload, key, algorithm=header["alg"], headers=header)


class Issuer:
    """An issuer's discovery document and JWKS over an httpx mock transport; counts the JWKS reads; `up` False
    refuses connections."""

    def __init__(self, keys: list[dict[str, Any]] | None = None, issuer: str = ISSUER, up: bool = True) -> None:
        self.keys = keys if keys is not None else [public_jwk(RSA_KEY, "k1"), public_jwk(EC_KEY, "k2")]
        self.issuer, self.up, self.jwks_reads = issuer, up, 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        """The issuer's answer to `request`."""
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path.endswith("/.well-known/openid-configuration"):
            return httpx.Response(200, json={"issuer": self.issuer, "jwks_uri": f"{ISSUER}/certs"})
        if request.url.path.endswith("/certs"):
            self.jwks_reads += 1
            return httpx.Response(200, json={"keys": self.keys})
        return httpx.Response(404)

    def verifier(self, clock: Any = time.monotonic, **options: Any) -> OidcVerifier:
        """A verifier of `ISSUER` tokens for `AUDIENCE` reading this issuer."""
        return OidcVerifier(
            ISSUER,
            AUDIENCE,
            options.pop("algorithms", ("RS256", "ES256")),
            transport=httpx.MockTransport(self.handle),
            clock=clock,
            **options,
        )


class Grants:
    """Group grants in memory: `{group: {collection: role}}`; `roles_for` gives each collection's highest role."""

    def __init__(self, table: Mapping[str, Mapping[str, Role]]) -> None:
        self.table = table
        self.asked: list[tuple[str, ...]] = []

    async def roles_for(self, groups: Iterable[str]) -> Mapping[str, Role]:
        """Collection -> the highest role any of `groups` holds there."""
        groups = tuple(groups)
        self.asked.append(groups)
        roles: dict[str, Role] = {}
        for group in groups:
            for collection, role in self.table.get(group, {}).items():
                if collection not in roles or role.rank > roles[collection].rank:
                    roles[collection] = role
        return roles


@dataclass(frozen=True)
class Provider:
    """A running `oidc-provider-mock`: its issuer URL (as its discovery document names it when reached by
    127.0.0.1)."""

    issuer: str

    def id_token(self, sub: str, client_id: str = "rag", base: str | None = None) -> str:
        """Sign `sub` in as the web page would, without a browser: POST the authorization form (authorization code
        flow with a PKCE S256 challenge), then redeem the code with its verifier at the token endpoint; the ID
        token (RS256, `aud` = `client_id`, `iss` = the URL reached, `base` or `issuer`)."""
        base = base or self.issuer
        verifier = secrets.token_urlsafe(48)
        challenge = b64(hashlib.sha256(verifier.encode()).digest())
        params = {
            "client_id": client_id,
            "redirect_uri": REDIRECT_URI,
            "response_type": "code",
            "scope": "openid profile email",
            "state": secrets.token_urlsafe(8),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        with httpx.Client(base_url=base, timeout=10) as http:
            authorized = http.post("/oauth2/authorize", params=params, data={"sub": sub})
            assert authorized.status_code == 302, authorized.text
            query = parse_qs(urlsplit(authorized.headers["location"]).query)
            assert query["state"] == [params["state"]]
            form = {"grant_type": "authorization_code", "code": query["code"][0], "redirect_uri": REDIRECT_URI}
            issued = http.post("/oauth2/token", data=form | {"code_verifier": verifier}, auth=(client_id, "unused"))
            assert issued.status_code == 200, issued.text
        token: str = issued.json()["id_token"]
        return token

    def jwks(self) -> list[dict[str, Any]]:
        """The provider's public signing keys."""
        keys: list[dict[str, Any]] = httpx.get(f"{self.issuer}/jwks", timeout=10).json()["keys"]
        return keys


@contextmanager
def running_provider(server_dir: Path, users: Sequence[Mapping[str, Any]]) -> Iterator[Provider]:
    """`python -m oidc_provider_mock` on a free port of 127.0.0.1 with the predefined `users` (claims with `sub`),
    ready (its discovery document answers: polled, no fixed sleep); stopped by PID when the block ends, however it
    ends. Its PID file lies under `server_dir/run`, which the session's watchdog stops if pytest dies.

    Raises:
        infra.processes.ServiceError: it exited or did not answer within 60 s (with its log's tail).
    """
    run_dir = server_dir / "run"
    port = processes.free_port()
    argv = [sys.executable, "-m", "oidc_provider_mock", "--port", str(port), "--host", "127.0.0.1"]
    argv += [arg for user in users for arg in ("--user-claims", json.dumps(dict(user)))]
    issuer = f"http://127.0.0.1:{port}"
    pid = processes.spawn(run_dir, PROVIDER, argv)
    try:

        def ready() -> bool:
            return httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200

        processes.wait_until_ready(PROVIDER, ready, timeout_s=60, pid=pid, run_dir=run_dir)
        yield Provider(issuer)
    finally:
        processes.stop_service(run_dir, PROVIDER, timeout_s=10)
