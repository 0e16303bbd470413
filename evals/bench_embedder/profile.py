"""Where one `rag bench embedder` point's time goes, and which CPU configuration serves it best.

`profile_point` runs one closed-loop point (short queries, concurrency C) through the real client and splits the
mean request latency the caller sees into:

- `client_prepare_ms`: tokenization and padding in the client (timed alone over the same texts);
- `slot_wait_ms`: waiting for one of the client's `max_in_flight` slots (`rag_embedder_slot_wait_seconds`);
- `triton_queue_ms`: in Triton's dynamic batcher queue (statistics extension, `queue.ns` per request);
- `triton_compute_ms`: compute input + infer + output per request (for the Python-based backend this includes the
  shared-memory hand-off to the stub process and back);
- `grpc_and_client_ms`: the rest, i.e. gRPC (serialization, HTTP/2, the aio event loop) on both sides.

Per model execution it compares Triton's `compute_infer` at each batch size (`batch_stats`) with the same batch
under ONNX Runtime in this process (same graph, threads and bucket): the difference is the serving backend's
per-execution cost (the Python stub's IPC and tensor copies).

`sweep_configs` then measures the same point for each `Variant` (instance count, ORT threads per instance, queue
delay, preferred batch sizes, the client's in-flight limit), loading each through the model repository extension.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient

from evals.bench_embedder.load import measured_load, run_load, summarize
from tools.embedder import TritonEmbedder, pad_to_bucket
from tools.embedder.metrics import SLOT_WAIT_SECONDS
from tools.onnx_session import open_session, run_pooled


@dataclass(frozen=True)
class Variant:
    """One serving configuration of the embedder model.

    Attributes:
        instances: Triton model instances (`instance_group.count`; one Python stub process each).
        threads: ONNX Runtime intra-op threads per instance.
        queue_delay_us: `max_queue_delay_microseconds`; None removes `dynamic_batching`.
        preferred: `preferred_batch_size` values (empty: unset).
        max_in_flight: the client's in-flight limit (`TRITON_MAX_IN_FLIGHT`).
    """

    instances: int = 1
    threads: int = 2
    queue_delay_us: int | None = 2000
    preferred: tuple[int, ...] = ()
    max_in_flight: int = 8

    @property
    def label(self) -> str:
        """A short name, e.g. `2x1 thr, delay 2000 us, in-flight 32`."""
        batching = "no batching" if self.queue_delay_us is None else f"delay {self.queue_delay_us} us"
        preferred = f", preferred {'/'.join(map(str, self.preferred))}" if self.preferred else ""
        return f"{self.instances}x{self.threads} thr, {batching}{preferred}, in-flight {self.max_in_flight}"


def variant_config(base: dict[str, Any], variant: Variant) -> dict[str, Any]:
    """The model config (Triton JSON) of `variant` over the repository's `base` config (not modified).

    Parameters are replaced by the ORT thread counts alone (the `nice` of the bulk model is dropped, as in every
    benchmark setup), `instance_group` by one CPU-or-GPU group of `variant.instances`.
    """
    config: dict[str, Any] = {k: v for k, v in base.items() if k != "dynamic_batching"}
    config["parameters"] = {
        "intra_op_thread_count": {"string_value": str(variant.threads)},
        "inter_op_thread_count": {"string_value": "1"},
    }
    config["instance_group"] = [{"count": variant.instances}]
    if variant.queue_delay_us is not None:
        batching: dict[str, Any] = {**base.get("dynamic_batching", {})}
        batching["max_queue_delay_microseconds"] = str(variant.queue_delay_us)
        batching.pop("preferred_batch_size", None)
        if variant.preferred:
            batching["preferred_batch_size"] = list(variant.preferred)
        config["dynamic_batching"] = batching
    return config


def _slot_wait() -> tuple[float, float]:
    """(sum seconds, count) of `rag_embedder_slot_wait_seconds` so far in this process."""
    total = count = 0.0
    for metric in SLOT_WAIT_SECONDS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_sum"):
                total += sample.value
            elif sample.name.endswith("_count"):
                count += sample.value
    return total, count


async def _model_stats(url: str, model: str) -> dict[str, Any]:
    """Triton's statistics of `model` (first version entry) as JSON: cumulative since load."""
    client = grpcclient.InferenceServerClient(url)
    try:
        response = await client.get_inference_statistics(model, as_json=True)
    finally:
        await client.close()
    stats: dict[str, Any] = response["model_stats"][0]
    return stats


def _ns(entry: dict[str, Any], key: str) -> tuple[int, int]:
    item = entry.get(key, {})
    return int(item.get("count", 0)), int(item.get("ns", 0))


def stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per-request and per-execution figures between two statistics snapshots of one model (Triton JSON).

    Returns:
        `requests`, `executions`, `mean_batch`, mean per request `queue_ms`, `compute_input_ms`, `compute_infer_ms`,
        `compute_output_ms`; and `per_batch`: batch size -> `{"executions", "compute_infer_ms"}` (mean per
        execution of that size).
    """
    out: dict[str, Any] = {}
    stats_a, stats_b = after.get("inference_stats", {}), before.get("inference_stats", {})
    n_a, _ = _ns(stats_a, "success")
    n_b, _ = _ns(stats_b, "success")
    requests = n_a - n_b
    executions = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    inferences = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    out["requests"], out["executions"] = requests, executions
    out["mean_batch"] = inferences / executions if executions else 0.0
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        ns = _ns(stats_a, key)[1] - _ns(stats_b, key)[1]
        out[f"{key}_ms"] = ns / requests / 1e6 if requests else 0.0
    earlier = {int(b["batch_size"]): b for b in before.get("batch_stats", [])}
    per_batch: dict[int, dict[str, float]] = {}
    for entry in after.get("batch_stats", []):
        size = int(entry["batch_size"])
        count, ns = _ns(entry, "compute_infer")
        if size in earlier:
            c0, ns0 = _ns(earlier[size], "compute_infer")
            count, ns = count - c0, ns - ns0
        if count:
            per_batch[size] = {"executions": count, "compute_infer_ms": ns / count / 1e6}
    out["per_batch"] = dict(sorted(per_batch.items()))
    return out


def client_prepare_ms(embedder: TritonEmbedder, texts: Sequence[str], samples: int = 300) -> float:
    """Mean ms the client spends tokenizing and padding one query (no network), over `samples` texts."""
    start = time.perf_counter()
    for i in range(samples):
        pad_to_bucket(embedder.tokenize([texts[i % len(texts)]], "query"), embedder.buckets)
    return (time.perf_counter() - start) / samples * 1000


def in_process_ms(model_file: Path, threads: int, batch_sizes: Sequence[int], bucket: int = 32) -> dict[int, float]:
    """Mean ms of one ONNX Runtime run of the pooled graph in this process per batch size, at `bucket` tokens."""
    session = open_session(model_file, threads)
    out: dict[int, float] = {}
    rng = np.random.default_rng(0)
    for size in batch_sizes:
        ids = rng.integers(1000, 20000, size=(size, bucket), dtype=np.int64)
        mask = np.ones_like(ids)
        run_pooled(session, ids, mask)
        runs = max(5, 200 // size)
        start = time.perf_counter()
        for _ in range(runs):
            run_pooled(session, ids, mask)
        out[size] = (time.perf_counter() - start) / runs * 1000
    return out


async def profile_point(
    embedder: TritonEmbedder,
    url: str,
    texts: Sequence[str],
    n: int,
    concurrency: int,
    server_pid: int | None,
    max_seconds: float = 60.0,
) -> dict[str, Any]:
    """One closed-loop point of single-query requests, with its latency split (see the module docstring).

    Returns:
        `point` (rps, p50/p95/p99 ms, n), `mean_latency_ms`, the split's parts in ms, `server` (`stats_delta`),
        `client_cpu_cores` and `server_cpu_cores`.
    """

    async def call(text: str) -> object:
        return await embedder.embed([text], "query")

    await run_load(call, texts, min(16, n), concurrency, 10.0)
    before = await _model_stats(url, embedder.model_name)
    wait0 = _slot_wait()
    latencies, wall, client_cpu, server_cpu = await measured_load(call, texts, n, concurrency, max_seconds, server_pid)
    wait1 = _slot_wait()
    server = stats_delta(before, await _model_stats(url, embedder.model_name))
    point = summarize("profile", "short", concurrency, latencies, wall)
    mean_ms = float(np.mean(latencies)) * 1000
    waits = wait1[1] - wait0[1]
    slot_ms = (wait1[0] - wait0[0]) / waits * 1000 if waits else 0.0
    prepare = client_prepare_ms(embedder, texts)
    compute = server["compute_input_ms"] + server["compute_infer_ms"] + server["compute_output_ms"]
    return {
        "point": {k: v for k, v in asdict(point).items() if k in ("rps", "p50_ms", "p95_ms", "p99_ms", "n")},
        "mean_latency_ms": mean_ms,
        "client_prepare_ms": prepare,
        "slot_wait_ms": slot_ms,
        "triton_queue_ms": server["queue_ms"],
        "triton_compute_ms": compute,
        "grpc_and_client_ms": mean_ms - prepare - slot_ms - server["queue_ms"] - compute,
        "server": server,
        "client_cpu_cores": client_cpu,
        "server_cpu_cores": server_cpu,
    }


def backend_overhead(server: dict[str, Any], ort_ms: dict[int, float]) -> dict[int, dict[str, float]]:
    """Per batch size: Triton's compute_infer per execution, the in-process ORT run, and their difference (ms)."""
    out = {}
    for size, entry in server["per_batch"].items():
        if size in ort_ms:
            triton_ms = entry["compute_infer_ms"]
            out[size] = {
                "executions": entry["executions"],
                "triton_compute_infer_ms": triton_ms,
                "in_process_ms": ort_ms[size],
                "overhead_ms": triton_ms - ort_ms[size],
            }
    return out
