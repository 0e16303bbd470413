"""A Python-backend stub that stalls (real Triton, real model): no request is ever answered with another's vectors.

The stub is stopped (SIGSTOP) while requests are at Triton, standing for a stub starved of CPU: Triton gives up on
the batch after 1 s without a health mark. Before the fix, the resumed stub sent that batch's answers late and
Triton handed them to the next batch: a request got another request's embeddings (wrong shape, or right shape and
wrong vectors), then Triton aborted. Now the first stub failure makes the client refuse everything that server
answers, with an error that says to restart it (`tools.embedder.errors.EmbedderStubFailedError`).
"""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import psutil
import pytest

from agent.config.settings import Settings
from agent.core.wiring import build_embedder
from infra import processes
from infra.config import StackConfig
from tools.embedder import EmbedderStubFailedError

FIRST = [f"Claim {i}: vitamin D supplementation lowers the risk of fracture in adults over {50 + i}." for i in range(8)]
SECOND = [f"Claim {i}: statins reduce cardiovascular events in patients under {40 + i} years of age." for i in range(8)]
"""Two requests of the same size and length bucket: a misattributed answer would have the right shape."""
THIRD = ["A short one.", "Another short text."]


def stub_pid(settings: Settings, model: str) -> int:
    """PID of the one Python-backend stub serving `model` on the Triton that `settings` run (its command line names
    the model's file, `<repository>/<model>/1/model.onnx`)."""
    pid = processes.read_pid(StackConfig.of(settings).run_dir, "triton")
    assert pid is not None
    stubs = [
        c.pid
        for c in psutil.Process(pid).children(recursive=True)
        if "python_backend_stub" in c.name() and any(f"/{model}/1/" in arg for arg in c.cmdline())
    ]
    assert len(stubs) == 1, stubs
    return int(stubs[0])


@pytest.mark.parametrize("stopped_s", [1.4, 2.8])
async def test_after_a_stub_failure_no_request_gets_another_requests_vectors(
    own_triton: Settings, stopped_s: float
) -> None:
    """The stub stopped `stopped_s` seconds from before the first request: past Triton's 1 s wait for a health mark
    just (the stub resumes while the next batch is at Triton) or by far (the next batches fail too)."""
    # the bulk model: one instance, so one stub serves every batch (the questions' model runs two)
    async with build_embedder(own_triton, workload="bulk", timeout_s=120.0) as emb:
        references = [await emb.embed(texts) for texts in (FIRST, SECOND, THIRD)]
        stub = stub_pid(own_triton, emb.model_name)
        os.kill(stub, signal.SIGSTOP)
        try:
            first = asyncio.create_task(emb.embed(FIRST))
            await asyncio.sleep(0.3)  # the first batch is at the stopped stub; the others queue behind it
            rest = [asyncio.create_task(emb.embed(texts)) for texts in (SECOND, THIRD)]
            await asyncio.sleep(stopped_s - 0.3)
        finally:
            os.kill(stub, signal.SIGCONT)
        answers = await asyncio.gather(first, *rest, return_exceptions=True)
        for texts, answer, reference in zip((FIRST, SECOND, THIRD), answers, references, strict=True):
            if not isinstance(answer, BaseException):  # only ever its own vectors
                assert answer.shape == (len(texts), emb.spec.dim)
                np.testing.assert_allclose(answer, reference, atol=1e-5)
        assert isinstance(answers[0], EmbedderStubFailedError), answers[0]
        for answer in answers:
            if isinstance(answer, BaseException):
                assert isinstance(answer, EmbedderStubFailedError), answer
                assert "Restart it" in str(answer) and "is not healthy" in str(answer)
        # Nothing more is taken from that server.
        with pytest.raises(EmbedderStubFailedError):
            await emb.embed(SECOND)
