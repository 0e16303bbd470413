"""Questions before bulk work at the shared servers (real Triton, real vLLM).

Triton: questions are embedded by the embedder's interactive twin (`all-minilm-l6-v2-query`, the same ONNX file
under its own name), so a question is answered while an ingestion request is held in the bulk model's queue. The
bulk model is reloaded on a Triton of the test's own with a dynamic batcher that holds a one-text batch for 60 s
(`max_queue_delay_microseconds`), standing for a long bulk batch at a deterministic point: no clock is raced.
vLLM: the local server schedules by request priority, so a bulk request's `priority` is accepted (a server without
`--scheduling-policy priority` answers 400).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from agent.config.settings import Settings
from agent.core.llm import bulk_model_settings
from agent.core.wiring import build_embedder

pytestmark = pytest.mark.stack

HOLD_S = 60
"""How long the reloaded bulk model's batcher holds a one-text batch, s: far beyond any question's time."""


async def test_a_question_is_embedded_while_a_bulk_request_waits_in_the_bulk_models_queue(
    own_triton: Settings,
) -> None:
    async with (
        build_embedder(own_triton, workload="bulk", timeout_s=HOLD_S * 2) as bulk,
        build_embedder(own_triton) as interactive,
    ):
        assert interactive.model_name == own_triton.embedder_interactive_model != bulk.model_name
        config: dict[str, Any] = await bulk.model_config()
        config["dynamic_batching"] = {"max_queue_delay_microseconds": str(HOLD_S * 1_000_000)}
        await bulk.load_model(config=config)
        before = await bulk.inference_statistics()

        held = asyncio.create_task(bulk.embed(["A held bulk chunk about statins."]))
        vectors = await interactive.embed(["Do statins reduce cardiovascular events?"], "query")
        assert vectors.shape == (1, interactive.spec.dim)
        assert not held.done()  # the bulk request still waits; the question did not
        assert (await bulk.inference_statistics())["execution_count"] == before["execution_count"]

        # A full batch (64 texts in the same length bucket) closes the held one at once.
        filler = [f"Bulk chunk {i} about statins." for i in range(bulk.max_batch_size - 1)]
        rest = await bulk.embed(filler)
        assert (await held).shape == (1, bulk.spec.dim) and rest.shape == (len(filler), bulk.spec.dim)
        assert bulk.priority > interactive.priority  # Triton: 1 is the highest level


@pytest.mark.llm
async def test_the_local_vllm_schedules_bulk_requests_by_priority(llm_settings: Settings) -> None:
    bulk = bulk_model_settings(llm_settings)
    assert bulk is not None
    body = {
        "model": llm_settings.llm_model,
        "messages": [{"role": "user", "content": "Say yes."}],
        "max_tokens": 2,
        **bulk["extra_body"],  # type: ignore[dict-item]
    }
    async with httpx.AsyncClient(timeout=120.0) as client:
        response = await client.post(f"{llm_settings.llm_base_url}/chat/completions", json=body)
    # Without --scheduling-policy priority vLLM refuses any priority but 0 (400 "not enabled").
    assert response.status_code == 200, response.text
    assert body["priority"] == llm_settings.llm_bulk_priority > 0
