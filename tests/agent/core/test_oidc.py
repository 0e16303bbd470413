"""The sign-in token checker (`agent.core.oidc`) against an issuer whose keys the test holds (its discovery document
and JWKS served by an httpx mock transport): each forged token is refused with its own one-line reason, a good one
gives its subject and groups; the claim path and the key cache. The real issuer (oidc-provider-mock):
tests/agent/http/test_oidc_http.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agent.core.errors import IssuerUnavailableError
from agent.core.oidc import Identity, OidcVerifier, TokenRefused, claim_at, groups_of, looks_like_jwt
from tests.oidc_issuer import (
    AUDIENCE,
    EC_KEY,
    ISSUER,
    OTHER_KEY,
    RSA_KEY,
    Issuer,
    claims,
    hs256_with_public_key,
    public_jwk,
    signed,
    unsigned,
)


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    yield Issuer([public_jwk(RSA_KEY, "k1"), public_jwk(EC_KEY, "k2")])


async def refusal(verifier: OidcVerifier, token: str) -> str:
    with pytest.raises(TokenRefused) as refused:
        await verifier.verify(token)
    reason = str(refused.value)
    assert reason and "\n" not in reason and '"' not in reason
    return reason


async def test_a_token_of_the_issuer_gives_its_subject_and_groups(issuer: Issuer) -> None:
    verifier = issuer.verifier()
    assert await verifier.verify(signed()) == Identity("alice", ("eng", "ops"))
    assert await verifier.verify(signed(EC_KEY, "ES256", "k2", groups="solo")) == Identity("alice", ("solo",))
    assert await verifier.verify(signed(groups=None, aud=[AUDIENCE, "other"])) == Identity("alice", ())


async def test_each_forged_token_is_refused_with_its_own_reason(issuer: Issuer) -> None:
    verifier = issuer.verifier(leeway_s=0)
    reasons = {
        "bad signature": await refusal(verifier, signed(OTHER_KEY)),
        "wrong audience": await refusal(verifier, signed(aud="someone-else")),
        "wrong issuer": await refusal(verifier, signed(iss="https://evil.test")),
        "expired": await refusal(verifier, signed(exp=int(time.time()) - 5)),
        "alg none": await refusal(verifier, unsigned(claims())),
        "HS256 with the public key": await refusal(
            verifier, hs256_with_public_key(claims(), public_jwk(RSA_KEY, "k1"))
        ),
        "unknown key": await refusal(verifier, signed(kid="k9")),
        "malformed": await refusal(verifier, "abc.def.ghi"),
        "no sub": await refusal(verifier, signed(sub=None)),
        "not yet valid": await refusal(verifier, signed(iat=int(time.time()) + 600)),
        "ES256 header on an RSA key": await refusal(verifier, signed(EC_KEY, "ES256", "k1")),
        "RS384 not allowed": await refusal(verifier, signed(alg="RS384")),
    }
    assert reasons == {
        "bad signature": "bad signature: the token was not signed by the issuer's key",
        "wrong audience": f"wrong audience: the token is not for {AUDIENCE}",
        "wrong issuer": f"wrong issuer: the token is not from {ISSUER}",
        "expired": "token expired",
        "alg none": "unsigned token (alg none) refused",
        "HS256 with the public key": "token signed with HS256, a shared-secret algorithm; the issuer signs with a "
        "private key",
        "unknown key": "unknown signing key (kid 'k9')",
        "malformed": "malformed token: its header is not base64url JSON",
        "no sub": "token lacks the required claim sub",
        "not yet valid": "token not valid yet (iat or nbf in the future)",
        "ES256 header on an RSA key": reasons["ES256 header on an RSA key"],
        "RS384 not allowed": "token algorithm RS384 is not one of OIDC_ALGORITHMS (RS256, ES256)",
    }
    assert reasons["ES256 header on an RSA key"].startswith("the issuer's key does not fit algorithm ES256")
    assert (await refusal(verifier, "rag_not-a-jwt")).startswith("malformed token")
    odd = await refusal(verifier, signed(kid='k"9\\\n\u00e9'))  # goes into a header: printable ASCII, no quotes
    assert odd.startswith("unknown signing key (kid ") and odd.isascii() and odd.isprintable() and "\\" not in odd


async def test_the_leeway_admits_a_token_just_expired(issuer: Issuer) -> None:
    token = signed(exp=int(time.time()) - 10)
    assert (await issuer.verifier(leeway_s=60).verify(token)).subject == "alice"
    assert await refusal(issuer.verifier(leeway_s=0), token) == "token expired"


async def test_an_unknown_key_reads_the_keys_again_at_most_once_per_interval(issuer: Issuer) -> None:
    now = [1000.0]
    verifier = issuer.verifier(clock=lambda: now[0])
    await verifier.verify(signed())
    assert issuer.jwks_reads == 1
    await refusal(verifier, signed(kid="rotated"))
    assert issuer.jwks_reads == 1  # the keys were read within KEY_REFETCH_S
    now[0] += 11
    for _ in range(5):  # a flood of made-up key ids: one more read
        await refusal(verifier, signed(kid="rotated"))
    assert issuer.jwks_reads == 2
    issuer.keys = [*issuer.keys, public_jwk(OTHER_KEY, "rotated")]  # the issuer rotates in a new key
    now[0] += 11
    assert (await verifier.verify(signed(OTHER_KEY, kid="rotated"))).subject == "alice"
    assert issuer.jwks_reads == 3
    await verifier.verify(signed())
    assert issuer.jwks_reads == 3  # cached
    now[0] += 301
    issuer.up = False  # keys read before are kept while the issuer is down
    assert (await verifier.verify(signed())).subject == "alice"


async def test_an_unreachable_or_mismatched_issuer_is_unavailable_not_a_refusal() -> None:
    down = Issuer([public_jwk(RSA_KEY, "k1")], up=False)
    with pytest.raises(IssuerUnavailableError, match="cannot be read"):
        await down.verifier().verify(signed())
    other = Issuer([public_jwk(RSA_KEY, "k1")], issuer="https://issuer.test/realms/other")
    with pytest.raises(
        IssuerUnavailableError, match=r"names issuer 'https://issuer\.test/realms/other', not OIDC_ISSUER"
    ):
        await other.verifier().verify(signed())


def test_claims_at_a_dotted_path_become_groups() -> None:
    token = {"realm_access": {"roles": ["ops", "eng", "ops", " ", 7]}, "groups": "solo", "https://x.test/groups": ["a"]}
    assert groups_of(token, "realm_access.roles") == ("eng", "ops")
    assert groups_of(token, "groups") == ("solo",)
    assert groups_of(token, "https://x.test/groups") == ("a",)  # a claim named with dots
    assert groups_of(token, "realm_access.missing") == groups_of(token, "realm_access") == ()
    assert claim_at(token, "realm_access.roles.0") is None


def test_only_three_base64url_parts_look_like_a_jwt() -> None:
    assert looks_like_jwt(signed()) and looks_like_jwt("a.b.")
    assert not any(looks_like_jwt(t) for t in ("rag_abc", "a.b", "a.b.c.d", "a b.c.d", ".b.c", "admin-secret"))
