"""oidc-provider-mock (a real OpenID Connect issuer: discovery, authorize form, token endpoint, JWKS) in a subprocess
on a free port, for the sign-in tests: `MockIssuer`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

from infra.processes import free_port, spawn, stop_pid, wait_until_ready

NAME = "oidc-issuer"
"""The issuer's name for `infra.processes`: its log is `<run_dir>/oidc-issuer.log`."""

START_TIMEOUT_S = 60.0
"""How long `MockIssuer` waits for the issuer's discovery document, seconds."""


class MockIssuer:
    """`python -m oidc_provider_mock -p <free port>` with predefined users (`users`: their claims, each with `sub`),
    started in its own session with its output and PID file in `run_dir`; ready once its discovery document answers,
    stopped by its PID on exit (even when the test failed). Its tokens last `token_max_age_s` seconds.

    Raises (on enter):
        infra.processes.ServiceError: the issuer exited, or did not answer within `START_TIMEOUT_S` (with its log's
            tail).
    """

    def __init__(self, users: list[dict[str, Any]], run_dir: Path, token_max_age_s: int = 3600) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.users, self.run_dir, self.token_max_age_s = users, run_dir, token_max_age_s
        self.pid: int | None = None

    def __enter__(self) -> MockIssuer:
        command = [sys.executable, "-m", "oidc_provider_mock", "-p", str(self.port), "-e", str(self.token_max_age_s)]
        for user in self.users:
            command += ["--user-claims", json.dumps(user)]
        self.pid = spawn(self.run_dir, NAME, command)
        try:
            discovery = f"{self.url}/.well-known/openid-configuration"
            wait_until_ready(
                NAME,
                lambda: httpx.get(discovery, timeout=2).status_code == 200,
                START_TIMEOUT_S,
                self.pid,
                self.run_dir,
            )
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pid is not None:
            stop_pid(self.pid, timeout_s=10)
            self.pid = None
