"""Embedder replicas against two real tritonservers on their own ports: concurrent queries reach both, and killing
one mid-run fails no query beyond those in flight at the kill; the rest finish on the other.

Each test starts its two servers through `infra.triton` (own data dir and free ports each) and stops them by PID
in a `finally`, whatever the outcome. The kill happens at a point the test controls (after a set number of
answers), never on a clock.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent.config.settings import Settings
from agent.core.app import build_embedder
from infra import processes, triton
from infra.config import StackConfig
from infra.processes import free_port
from tools.errors import EmbedderError

CONCURRENCY = 32
CLAIMS = [f"Claim {i}: vitamin D supplementation changes bone mineral density in adults." for i in range(CONCURRENCY)]


def server_settings(data_dir: Path, url: str = "") -> Settings:
    """Settings of one local Triton in `data_dir` on free ports (or the app's settings for `url`)."""
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=data_dir,
        triton_grpc_url=url or f"127.0.0.1:{free_port()}",
        triton_http_port=free_port(),
        triton_metrics_port=free_port(),
        services=("triton",),
    )


@pytest.fixture
def two_tritons(tmp_path: Path) -> Iterator[tuple[Settings, Settings]]:
    """Two tritonservers serving the embedder, each in its own data dir on its own ports; stopped by PID after."""
    servers = [server_settings(tmp_path / name) for name in ("a", "b")]
    try:
        for server in servers:
            triton.start(StackConfig.of(server))
        yield servers[0], servers[1]
    finally:
        for server in servers:
            triton.stop(StackConfig.of(server))


async def served_requests(settings: Settings) -> int:
    """Successful inference requests of the embedder's model on one server (Triton statistics extension)."""
    async with build_embedder(settings) as client:
        return int((await client.inference_statistics())["success_count"])


async def wait_for_served(servers: list[Settings], at_least: int, deadline_s: float = 30.0) -> list[int]:
    """Each server's `served_requests`, polled until their sum reaches `at_least` (Triton updates its statistics
    after the response is sent) or `deadline_s` seconds pass (then the caller's assertion reports the counts)."""
    give_up = time.monotonic() + deadline_s
    counts = [await served_requests(s) for s in servers]
    while sum(counts) < at_least and time.monotonic() < give_up:
        await asyncio.sleep(0.1)
        counts = [await served_requests(s) for s in servers]
    return counts


def app_settings(a: Settings, b: Settings) -> Settings:
    """The app's settings with TRITON_GRPC_URL listing both servers (shipped in-flight limit and retries)."""
    return server_settings(a.data_dir.parent / "app", f"{a.triton_grpc_url},{b.triton_grpc_url}")


@pytest.mark.stack
async def test_32_concurrent_queries_reach_both_tritons(two_tritons: tuple[Settings, Settings]) -> None:
    a, b = two_tritons
    before = [await served_requests(a), await served_requests(b)]
    async with build_embedder(app_settings(a, b)) as client:
        assert client.endpoints == [a.triton_grpc_url, b.triton_grpc_url]
        vectors = await asyncio.gather(*(client.embed([claim], "query") for claim in CLAIMS))
    assert all(v.shape == (1, 384) for v in vectors)
    after = await wait_for_served([a, b], sum(before) + CONCURRENCY)
    served_a, served_b = after[0] - before[0], after[1] - before[1]
    assert served_a + served_b == CONCURRENCY
    for served in (served_a, served_b):
        assert 0.35 <= served / CONCURRENCY <= 0.65, (served_a, served_b)


@pytest.mark.stack
async def test_killing_one_triton_mid_run_fails_at_most_the_queries_in_flight(
    two_tritons: tuple[Settings, Settings],
) -> None:
    """160 queries at concurrency 32; after the 48th answer, server B is killed (SIGKILL, by PID, its process group
    with the Python backend stub). No query fails beyond those in flight at that moment, every query started
    after it succeeds, and server A serves all of those."""
    a, b = two_tritons
    total, kill_after = 160, 48
    served_a_before = await served_requests(a)
    b_pid = processes.read_pid(StackConfig.of(b).run_dir.resolve(), triton.NAME)
    assert b_pid is not None
    issued = answered = failed = in_flight = 0
    in_flight_at_kill: int | None = None
    started_after_kill = 0
    errors: list[str] = []

    async with build_embedder(app_settings(a, b)) as client:

        async def worker() -> None:
            nonlocal issued, answered, failed, in_flight, in_flight_at_kill, started_after_kill
            while issued < total:
                text = CLAIMS[issued % len(CLAIMS)] + f" ({issued})"
                issued += 1
                started_after_kill += in_flight_at_kill is not None
                in_flight += 1
                try:
                    await client.embed([text], "query")
                    answered += 1
                except EmbedderError as exc:  # the assertion below reports what failed
                    failed += 1
                    errors.append(repr(exc))
                finally:
                    in_flight -= 1
                if answered >= kill_after and in_flight_at_kill is None:
                    # Synchronous: no other worker runs until B and its stub are gone.
                    processes.stop_service(StackConfig.of(b).run_dir.resolve(), triton.NAME, sig=signal.SIGKILL)
                    in_flight_at_kill = in_flight

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        retries = client.stats.retries

    assert in_flight_at_kill is not None and in_flight_at_kill > 0  # the kill came mid-run
    assert not psutil.pid_exists(b_pid) or psutil.Process(b_pid).status() == psutil.STATUS_ZOMBIE
    assert answered + failed == total
    assert failed <= in_flight_at_kill, errors
    assert started_after_kill > 0
    (served_a,) = await wait_for_served([a], served_a_before + started_after_kill)
    served_a -= served_a_before
    assert served_a >= started_after_kill  # every query started after the kill was answered by A
    assert served_a < answered  # B answered its share before the kill
    assert retries >= 1  # some request met the dead server and went on to A
