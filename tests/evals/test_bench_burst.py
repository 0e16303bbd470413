"""`rag bench burst` without a server: a phase's summary counts every status and times only the refusals, and the
request the generator sends is one complete HTTP/1.1 POST."""

from __future__ import annotations

import json

from evals.bench_burst import BODY, request_bytes, summarize


def test_a_phase_times_only_its_refusals_and_counts_every_status() -> None:
    results = [(200, 900.0), (503, 10.0), (503, 30.0), (503, 20.0), (0, 5.0)]
    summary = summarize(results)
    assert summary["statuses"] == {"200": 1, "503": 3, "0": 1}
    assert summary["refusal_ms"]["n"] == 3
    assert summary["refusal_ms"]["p50"] == 20.0 and summary["refusal_ms"]["max"] == 30.0
    assert summarize([(200, 1.0)])["refusal_ms"] == {"n": 0, "max": None}


def test_the_request_is_a_whole_post_with_its_length_and_a_closing_connection() -> None:
    raw = request_bytes("127.0.0.1", 8080)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/ask HTTP/1.1\r\n")
    assert f"Content-Length: {len(BODY)}".encode() in head and b"Connection: close" in head
    assert json.loads(body) == {"question": "Vitamin B12 deficiency and homocysteine"}
