"""`evals.training`: the progress line the cross-encoder trainers log every `LOG_EVERY` steps."""

from __future__ import annotations

import logging
import time

import pytest

from evals.training import LOG_EVERY, log_progress


def test_progress_is_logged_every_log_every_steps_with_the_mean_of_the_last_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    losses = [100.0] * 5 + [1.0] * (LOG_EVERY - 5) + [2.0] * LOG_EVERY
    caplog.set_level(logging.INFO, logger="evals.training")
    for step in range(2 * LOG_EVERY - 1):
        log_progress(0, step, 50, losses[: step + 1], time.perf_counter())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(f"epoch 1 step {LOG_EVERY}/50: loss ")
    expected = (5 * 100.0 + (LOG_EVERY - 5) * 1.0) / LOG_EVERY
    assert f"loss {expected:.4f} (mean of last {LOG_EVERY})" in lines[0]
    log_progress(1, 2 * LOG_EVERY - 1, 50, losses, time.perf_counter())
    assert caplog.records[-1].getMessage().startswith(f"epoch 2 step {2 * LOG_EVERY}/50: loss 2.0000")
