"""The in-process ceiling of the embedder benchmark: the served graph under ONNX Runtime, no serving layer."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from evals.bench_embedder.load import kind_of, n_requests, summarize
from evals.bench_embedder.params import BenchParams, Point
from tools.embedder import TritonEmbedder, pad_to_bucket
from tools.onnx_session import open_session, run_pooled
from tools.records import TextKind

log = logging.getLogger(__name__)

CEILING_BATCH_SIZES = (1, 8, 16, 32, 64)


def ceiling_points(
    embedder: TritonEmbedder, model_file: Path, setup: str, texts: dict[str, list[str]], params: BenchParams
) -> tuple[list[Point], dict[str, dict[int, float]]]:
    """The served (pooled) graph under ONNX Runtime in process at each of CEILING_BATCH_SIZES; the best batch size
    per length is the ceiling.

    `embedder` is used only for tokenization (same truncation) and its bucket list; nothing is sent to Triton.
    Texts are sorted by length first (the best case for padding), so this is an upper bound for any server.

    Returns:
        one point per length (the best batch size; latency = per batch, tokenization + padding + run) and the
        throughput in sequences/s of every batch size tried, per length.
    """
    session = open_session(model_file, params.threads)
    points: list[Point] = []
    curves: dict[str, dict[int, float]] = {}
    for length in params.lengths:
        pool = texts[length]
        kind = kind_of(length)
        sample = [pool[i % len(pool)] for i in range(max(n_requests(params, length), max(CEILING_BATCH_SIZES)))]
        # Sorted by token count, as the client sorts a multi-text call: each batch pads to the least bucket.
        lengths = [len(t) for t in embedder.tokenize(sample, kind)]
        sample = [sample[i] for i in np.argsort(lengths, kind="stable")]

        def run_batch(batch: list[str], kind: TextKind = kind) -> npt.NDArray[np.float32]:
            input_ids, mask = pad_to_bucket(embedder.tokenize(batch, kind), embedder.buckets)
            return run_pooled(session, input_ids, mask)

        best: Point | None = None
        curves[length] = {}
        for batch_size in CEILING_BATCH_SIZES:
            batches = [sample[i : i + batch_size] for i in range(0, len(sample), batch_size)]
            run_batch(batches[0])  # warm-up
            latencies = []
            start = time.perf_counter()
            for batch in batches:
                t0 = time.perf_counter()
                run_batch(batch)
                latencies.append(time.perf_counter() - t0)
                if time.perf_counter() - start > params.max_seconds_per_point:
                    break
            wall = time.perf_counter() - start
            done = sum(len(b) for b in batches[: len(latencies)])
            point = summarize(setup, length, batch_size, latencies, wall)
            point.seq_per_s = point.rps = done / wall
            point.mean_batch = float(batch_size)
            curves[length][batch_size] = point.seq_per_s
            if best is None or point.seq_per_s > best.seq_per_s:
                best = point
        assert best is not None
        log.info("%s", best)
        points.append(best)
    return points, curves
