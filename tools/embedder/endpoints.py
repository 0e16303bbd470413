"""The embedder's Triton endpoints: one gRPC channel each, taken in turn, with a failed one set aside for a while.

`TRITON_GRPC_URL` lists one or more endpoints (`tools.embedder.channel.split_endpoints`). Each gets its own
`tritonclient.grpc.aio` client (one HTTP/2 connection, or one per resolved address under a `dns:///` target with
the `round_robin` policy). Calls take the endpoints in turn (round robin over one shared counter), so N concurrent
single-text queries over two endpoints split N/2 and N/2. An endpoint whose call failed with UNAVAILABLE is tried
last for `cooldown_s` seconds (passive health: no probe traffic); when every endpoint is set aside the order is
plain round robin again, so a recovered server is found by the next call.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import tritonclient.grpc.aio as grpcclient

from tools.errors import EmbedderError

DEFAULT_COOLDOWN_S = 2.0
"""How long an endpoint that answered UNAVAILABLE is tried last, seconds: the longest retry backoff of the client,
so that a retry never waits for a server already known to be down."""


class EndpointPool:
    """The gRPC clients of a list of endpoints and the order calls take them in.

    Args:
        endpoints: gRPC targets (`host:port`, `dns:///host:port`, ...), at least one.
        channel_args: the gRPC channel options of every channel (`tools.embedder.channel.channel_options`).
        cooldown_s: seconds an endpoint marked down (`mark_down`) is tried after the others.

    Raises:
        ValueError: no endpoint, or a negative cooldown.
    """

    def __init__(
        self, endpoints: Sequence[str], channel_args: list[tuple[str, Any]], cooldown_s: float = DEFAULT_COOLDOWN_S
    ) -> None:
        if not endpoints or cooldown_s < 0:
            raise ValueError(f"expected at least one endpoint and cooldown_s >= 0; got {endpoints}, {cooldown_s}")
        self.endpoints = list(endpoints)
        self.channel_args = channel_args
        self.cooldown_s = cooldown_s
        self._clients: list[grpcclient.InferenceServerClient] = []
        self._down_until = [0.0] * len(self.endpoints)
        self._turn = itertools.count()

    @property
    def is_open(self) -> bool:
        """True between `open()` and `close()`."""
        return bool(self._clients)

    def open(self) -> None:
        """Create one client (gRPC channel) per endpoint; channels connect lazily, on their first call."""
        if not self._clients:
            self._clients = [
                grpcclient.InferenceServerClient(endpoint, channel_args=self.channel_args)
                for endpoint in self.endpoints
            ]

    async def close(self) -> None:
        """Close every channel (idempotent); in-flight calls on them fail."""
        clients, self._clients = self._clients, []
        for client in clients:
            await client.close()

    def client(self, index: int) -> grpcclient.InferenceServerClient:
        """The client of endpoint `index`.

        Raises:
            EmbedderError: the pool is closed (not connected, or closed during the call).
        """
        if not self._clients:
            raise EmbedderError("TritonEmbedder is not connected; use `async with` or call connect()")
        return self._clients[index]

    def order(self) -> list[int]:
        """Endpoint indices for the next call: those not marked down in turn (round robin among them), then those
        marked down within the last `cooldown_s` seconds (in turn too; all of them when every one is down)."""
        turn = next(self._turn)
        now = time.monotonic()
        healthy = [i for i in range(len(self.endpoints)) if self._down_until[i] <= now]
        down = [i for i in range(len(self.endpoints)) if self._down_until[i] > now]
        return [*_rotate(healthy, turn), *_rotate(down, turn)]

    def mark_down(self, index: int) -> None:
        """Try endpoint `index` last for the next `cooldown_s` seconds (it answered UNAVAILABLE)."""
        self._down_until[index] = time.monotonic() + self.cooldown_s

    def mark_up(self, index: int) -> None:
        """Endpoint `index` answered: take it in turn again."""
        self._down_until[index] = 0.0


def _rotate(items: list[int], turn: int) -> list[int]:
    if not items:
        return items
    k = turn % len(items)
    return items[k:] + items[:k]
