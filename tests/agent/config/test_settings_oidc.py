"""The sign-in settings (`OIDC_*`): the algorithms a token may use (never `none`, never HS*), the audience's
default, blank values read as unset, the leeway's bounds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.config.settings import Settings


def settings(**values: object) -> Settings:
    return Settings.model_validate(values)


def test_sign_in_is_off_by_default_and_blank_values_are_unset() -> None:
    default = settings()
    assert default.oidc_issuer is None and default.oidc_token_audience is None
    assert default.oidc_algorithms == ("RS256", "ES256") and default.oidc_groups_claim == "groups"
    assert (default.oidc_leeway_s, default.oidc_jwks_cache_s, default.oidc_scopes) == (30, 300, "openid profile email")
    blank = settings(oidc_issuer=" ", oidc_client_id="", oidc_audience="")
    assert blank.oidc_issuer is None and blank.oidc_token_audience is None


def test_the_audience_defaults_to_the_client_id_and_one_of_them_is_needed() -> None:
    issuer = "https://login.microsoftonline.com/tenant/v2.0"
    assert settings(oidc_issuer=issuer, oidc_client_id="web").oidc_token_audience == "web"
    both = settings(oidc_issuer=issuer, oidc_client_id="web", oidc_audience="api://rag")
    assert both.oidc_token_audience == "api://rag"
    with pytest.raises(ValidationError, match="neither OIDC_CLIENT_ID nor OIDC_AUDIENCE"):
        settings(oidc_issuer=issuer)
    with pytest.raises(ValidationError, match="oidc_issuer"):
        settings(oidc_issuer="not a url", oidc_client_id="web")


@pytest.mark.parametrize("algorithms", ["none", "HS256", "RS256,hs512", "RS256,None"])
def test_unsigned_and_shared_secret_algorithms_are_refused_at_start_up(algorithms: str) -> None:
    with pytest.raises(ValidationError, match=r"unsigned \(`none`\) and shared-secret \(HS\*\) tokens are never"):
        settings(oidc_algorithms=algorithms)


def test_algorithms_are_a_comma_separated_list_of_public_key_ones() -> None:
    assert settings(oidc_algorithms="RS256, PS256,EdDSA").oidc_algorithms == ("RS256", "PS256", "EdDSA")
    with pytest.raises(ValidationError, match="OIDC_ALGORITHMS names 'XYZ'"):
        settings(oidc_algorithms="XYZ")
    with pytest.raises(ValidationError, match="OIDC_ALGORITHMS is empty"):
        settings(oidc_algorithms=" , ")


@pytest.mark.parametrize("leeway", [-1, 301])
def test_the_leeway_is_bounded(leeway: int) -> None:
    with pytest.raises(ValidationError, match="oidc_leeway_s"):
        settings(oidc_leeway_s=leeway)


def test_every_provider_s_settings_on_the_sign_in_page_load() -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "oidc.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```\n(.*?)```", page, re.S) if b.startswith("OIDC_")]
    assert len(blocks) == 4, "Keycloak, Entra ID, Okta, Google"
    for block in blocks:
        values = dict(line.split("=", 1) for line in block.splitlines())
        assert all(name.lower() in Settings.model_fields for name in values), values
        filled = {k.lower(): re.sub(r"<[^>]+>", "example", v) for k, v in values.items()}
        loaded = settings(**filled)
        assert loaded.oidc_issuer is not None and loaded.oidc_token_audience is not None
