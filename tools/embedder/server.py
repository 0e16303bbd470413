"""What the embedder asks a Triton server about its models besides inference: statistics, configuration, and
loading or unloading (Triton's statistics and model repository extensions). Plain functions over one connected
`tritonclient.grpc.aio` client; `TritonEmbedder` calls them for each of its endpoints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from tools.embedder.errors import describe
from tools.errors import EmbedderError

STATISTICS_COUNTS = ("inference_count", "execution_count", "success_count", "queue_ns", "compute_ns")
"""The cumulative counters `model_counts` returns."""


async def model_counts(
    client: grpcclient.InferenceServerClient, url: str, model: str, timeout_s: float
) -> dict[str, int]:
    """Cumulative statistics of `model` on one server since it was loaded, summed over its loaded versions.

    Returns:
        `STATISTICS_COUNTS`: items inferred, model executions, successful requests, and total queue and
        compute-infer time of the successful requests in ns (Triton's `inference_stats.*.ns`).

    Raises:
        EmbedderError: Triton at `url` does not answer within `timeout_s` seconds (names the server and model).
    """
    try:
        response = await client.get_inference_statistics(model, client_timeout=timeout_s)
    except InferenceServerException as exc:
        raise EmbedderError(f"Triton at {url}: statistics of {model!r} unavailable: {describe(exc)}") from exc
    counts = dict.fromkeys(STATISTICS_COUNTS, 0)
    for entry in response.model_stats:  # one entry per loaded version
        counts["inference_count"] += int(entry.inference_count)
        counts["execution_count"] += int(entry.execution_count)
        counts["success_count"] += int(entry.inference_stats.success.count)
        counts["queue_ns"] += int(entry.inference_stats.queue.ns)
        counts["compute_ns"] += int(entry.inference_stats.compute_infer.ns)
    return counts


def summarize_counts(counts: Mapping[str, int]) -> dict[str, float]:
    """`model_counts` (of one server, or summed over several) as figures.

    Returns:
        `{"inference_count", "execution_count", "mean_batch", "success_count", "queue_ms", "compute_ms"}`: items
        inferred and model executions (their ratio is the mean batch the dynamic batcher formed; 0.0 before the
        first execution), successful requests, and the mean queue and compute-infer time per successful request
        in ms (`*.ns / success.count`).
    """
    inferences, executions = counts["inference_count"], counts["execution_count"]
    successes = counts["success_count"]
    return {
        "inference_count": float(inferences),
        "execution_count": float(executions),
        "mean_batch": inferences / executions if executions else 0.0,
        "success_count": float(successes),
        "queue_ms": counts["queue_ns"] / successes / 1e6 if successes else 0.0,
        "compute_ms": counts["compute_ns"] / successes / 1e6 if successes else 0.0,
    }


async def model_config(
    client: grpcclient.InferenceServerClient, url: str, model: str, timeout_s: float
) -> dict[str, Any]:
    """The configuration Triton at `url` serves for `model`, as Triton's JSON object.

    Raises:
        EmbedderError: Triton does not answer within `timeout_s` seconds, or has no such model.
    """
    try:
        response = await client.get_model_config(model, as_json=True, client_timeout=timeout_s)
    except InferenceServerException as exc:
        raise EmbedderError(f"Triton at {url}: config of {model!r} unavailable: {describe(exc)}") from exc
    config: dict[str, Any] = response["config"]
    return config


async def load_model(
    client: grpcclient.InferenceServerClient,
    url: str,
    model: str,
    config: Mapping[str, Any] | None = None,
    files: Mapping[str, bytes] | None = None,
) -> None:
    """(Re)load `model` on Triton at `url` (model repository extension), with an optional config override.

    Args:
        config: Triton's JSON form of the config (as `model_config` returns it); None loads the repository's
            `config.pbtxt` for a model not loaded yet, but keeps the config of a loaded one.
        files: model files sent with the override, `{"file:1/model.onnx": bytes}` (needs `config`).

    Raises:
        EmbedderError: the server runs without explicit model control, or the load failed (names the model and
            Triton's reason).
    """
    try:
        await client.load_model(
            model, config=json.dumps(config) if config is not None else None, files=dict(files) if files else None
        )
    except InferenceServerException as exc:
        raise EmbedderError(f"Triton at {url}: loading {model!r} failed: {describe(exc)}") from exc


async def unload_model(client: grpcclient.InferenceServerClient, url: str, model: str) -> None:
    """Unload `model` from Triton at `url` (model repository extension); its in-flight requests finish first.

    Raises:
        EmbedderError: the server refused.
    """
    try:
        await client.unload_model(model)
    except InferenceServerException as exc:
        raise EmbedderError(f"Triton at {url}: unloading {model!r} failed: {describe(exc)}") from exc
