"""gRPC channel options of the embedding client: tritonclient's defaults, the caller's arguments, large message
limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonclient.grpc import KeepAliveOptions

GRPC_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Minimum gRPC send/receive limit, bytes; a full bge-large request (64 x 512 int64 ids and mask) is 0.5 MiB and
its answer 256 KiB, but a custom model may return token states (64 x 512 x 1024 float32 = 128 MiB), far above
gRPC's 4 MiB default receive limit."""

_MESSAGE_LIMIT_KEYS = ("grpc.max_send_message_length", "grpc.max_receive_message_length")


def channel_options(extra: Sequence[tuple[str, Any]] | None = None) -> list[tuple[str, Any]]:
    """gRPC channel options: tritonclient's defaults (keepalive), overridden by `extra`, message limits kept large.

    `tritonclient.grpc.aio.InferenceServerClient(channel_args=...)` replaces *all* its default options (message
    size limits included, which then fall back to gRPC's 4 MiB receive limit). This function starts from the same
    defaults, applies `extra`, and raises both message-size limits to at least `GRPC_MAX_MESSAGE_BYTES` (-1, gRPC's
    "unlimited", is kept).

    Args:
        extra: `(name, value)` gRPC channel arguments, e.g. `[("grpc.keepalive_time_ms", 10000)]`.

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
    options.update(dict(extra or ()))
    for key in _MESSAGE_LIMIT_KEYS:
        if int(options[key]) != -1:
            options[key] = max(int(options[key]), GRPC_MAX_MESSAGE_BYTES)
    return list(options.items())
