"""Where the embedding client connects and how: the endpoints of `TRITON_GRPC_URL`, and the gRPC channel options
(tritonclient's defaults, the caller's arguments such as load balancing and keepalive, large message limits).

An endpoint is any gRPC target `grpc.aio.insecure_channel` accepts (tritonclient passes it through unchanged):
`host:port`, or a target with a name-resolver scheme (gRPC's "gRPC Name Resolution" doc), e.g.
`dns:///triton-embedder-headless:8001`, whose every resolved address gets a subchannel; the channel's
load-balancing policy (`round_robin` through `grpc.service_config` or `grpc.lb_policy_name`) then spreads calls
over them. A comma-separated list gives one channel per endpoint, spread by the client itself
(`tools.embedder.client`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tritonclient.grpc import KeepAliveOptions

GRPC_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Minimum gRPC send/receive limit, bytes; a full bge-large request (64 x 512 int64 ids and mask) is 0.5 MiB and
its answer 256 KiB, but a custom model may return token states (64 x 512 x 1024 float32 = 128 MiB), far above
gRPC's 4 MiB default receive limit."""

_MESSAGE_LIMIT_KEYS = ("grpc.max_send_message_length", "grpc.max_receive_message_length")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:(?!\d+$)", re.IGNORECASE)
"""A scheme prefix, told apart from `host:port` by what follows the colon."""
RESOLVER_SCHEMES = frozenset({"dns", "ipv4", "ipv6", "unix", "unix-abstract", "vsock", "xds"})
"""Name-resolver schemes of gRPC core (gRPC's "gRPC Name Resolution" doc, and xDS)."""

ROUND_ROBIN_SERVICE_CONFIG: dict[str, Any] = {"loadBalancingConfig": [{"round_robin": {}}]}
"""gRPC service config selecting the `round_robin` policy (gRPC's "Load Balancing" and "Service Config" docs): the
value of the channel argument `grpc.service_config` (as JSON text) that spreads calls over every address a
`dns:///` target resolves to, instead of `pick_first`'s one connection."""


def split_endpoints(url: str) -> list[str]:
    """The endpoints of `TRITON_GRPC_URL`: one gRPC target, or a comma-separated list of them.

    Args:
        url: e.g. `localhost:8001`, `dns:///triton-embedder-headless.triton-rag.svc.cluster.local:8001`, or
            `10.0.0.5:8001,10.0.0.6:8001`.

    Returns:
        The targets, stripped, in order, duplicates dropped. A value starting `ipv4:` or `ipv6:` is one target:
        gRPC's own address-list form (`ipv4:10.0.0.5:8001,10.0.0.6:8001`), one channel over all its addresses.

    Raises:
        ValueError: no endpoint, or one that is neither `host:port` (port 1..65535) nor a target with a gRPC
            resolver scheme (`RESOLVER_SCHEMES`; names the endpoint).
    """
    parts = [url] if url.strip().lower().startswith(("ipv4:", "ipv6:")) else url.split(",")
    endpoints = list(dict.fromkeys(part.strip() for part in parts if part.strip()))
    if not endpoints:
        raise ValueError(f"{url!r} names no endpoint; expected host:port, a gRPC target or a comma-separated list")
    for endpoint in endpoints:
        if _SCHEME.match(endpoint):
            scheme = endpoint.split(":", 1)[0].lower()
            if scheme not in RESOLVER_SCHEMES:
                raise ValueError(
                    f"{endpoint!r} has scheme {scheme!r}; expected host:port or a gRPC target with one of "
                    f"{', '.join(sorted(RESOLVER_SCHEMES))} (e.g. dns:///host:port)"
                )
            if not endpoint.split(":", 1)[1].strip("/"):
                raise ValueError(f"{endpoint!r} is a gRPC target with no address, e.g. dns:///host:port")
            continue
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{endpoint!r} is not host:port (port 1..65535) or a gRPC target such as dns:///host:port")
    return endpoints


def endpoint_port(endpoint: str) -> int | None:
    """The TCP port of an endpoint (`host:port`, `dns:///host:port`, `ipv4:a.b.c.d:port`), or None without one
    (e.g. `unix:` sockets, or a `dns:` name relying on the default port)."""
    address = endpoint.split(",")[0]
    if _SCHEME.match(address):
        address = address.split(":", 1)[1].lstrip("/")
        address = address.rsplit("/", 1)[-1]
    _, sep, port = address.rpartition(":")
    return int(port) if sep and port.isdigit() else None


def channel_arguments(args: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """`TRITON_GRPC_CHANNEL_ARGS` (a JSON object) as gRPC channel arguments: `(name, int | str)` pairs.

    Booleans become 0/1; an object or list (e.g. `{"grpc.service_config": {"loadBalancingConfig": [{"round_robin":
    {}}]}}`) becomes its JSON text, which is what gRPC expects for `grpc.service_config`.

    Raises:
        ValueError: a value that is not a number, string, boolean, object or list (names the argument).
    """
    pairs: list[tuple[str, Any]] = []
    for name, value in (args or {}).items():
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, Mapping | list):
            value = json.dumps(value, separators=(",", ":"))
        elif isinstance(value, float) and value.is_integer():
            value = int(value)
        elif not isinstance(value, int | str):
            raise ValueError(f"channel argument {name!r} is {value!r}; expected a number, a string or a JSON object")
        pairs.append((name, value))
    return pairs


def channel_options(extra: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None) -> list[tuple[str, Any]]:
    """gRPC channel options: tritonclient's defaults (keepalive), overridden by `extra`, message limits kept large.

    `tritonclient.grpc.aio.InferenceServerClient(channel_args=...)` replaces *all* its default options (message
    size limits included, which then fall back to gRPC's 4 MiB receive limit). This function starts from the same
    defaults, applies `extra`, and raises both message-size limits to at least `GRPC_MAX_MESSAGE_BYTES` (-1, gRPC's
    "unlimited", is kept).

    Args:
        extra: gRPC channel arguments, `(name, value)` pairs or a mapping (`channel_arguments` converts the
            values), e.g. `{"grpc.keepalive_time_ms": 10000}`.

    Returns:
        The merged option list, one entry per name.
    """
    keepalive = KeepAliveOptions()
    options: dict[str, Any] = {
        "grpc.max_send_message_length": GRPC_MAX_MESSAGE_BYTES,
        "grpc.max_receive_message_length": GRPC_MAX_MESSAGE_BYTES,
        "grpc.keepalive_time_ms": keepalive.keepalive_time_ms,
        "grpc.keepalive_timeout_ms": keepalive.keepalive_timeout_ms,
        "grpc.keepalive_permit_without_calls": keepalive.keepalive_permit_without_calls,
        "grpc.http2.max_pings_without_data": keepalive.http2_max_pings_without_data,
    }
    options.update(channel_arguments(extra) if isinstance(extra, Mapping) else dict(extra or ()))
    for key in _MESSAGE_LIMIT_KEYS:
        if int(options[key]) != -1:
            options[key] = max(int(options[key]), GRPC_MAX_MESSAGE_BYTES)
    return list(options.items())
