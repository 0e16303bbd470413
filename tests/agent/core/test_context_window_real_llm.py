"""`rag ask --top-k 40` against the real vLLM (4096-token context, SmolLM2's own tokenizer found in the converted model
folder): the 40 passages do not fit, so the lowest-ranked are dropped and the question is answered instead of vLLM's
400 (agent/core/context_window.py). The test stores 48 documents of its own (one ~200-token chunk each) and removes
them."""

from __future__ import annotations

import json

import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from tests.conftest import run_cli
from tools.ingest import SourceDocument

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
SENTENCE = (
    "In study {n}, vitamin B12 deficiency was associated with raised plasma homocysteine in {m} adults, and "
    "supplementation lowered homocysteine within weeks; folate status and kidney function modified the effect. "
)
DOCUMENTS = [
    SourceDocument(f"ctx-{n:02d}", f"Homocysteine study {n}", SENTENCE.format(n=n, m=100 + n) * 4, "ctx-test", {})
    for n in range(48)
]


@pytest.mark.llm
async def test_top_k_40_is_fitted_to_the_served_context_and_answered(
    llm_settings: Settings, postgres_url: str, triton_server: Settings
) -> None:
    patient = llm_settings.model_copy(update={"triton_timeout_s": 600.0, "refusal_min_score": -1.0})
    async with RagApp.from_settings(patient) as rag:
        await rag.add_documents(DOCUMENTS)
    try:
        result = run_cli(llm_settings, "ask", "--json", "--top-k", "40", CLAIM)
        assert result.returncode == 0, result.stderr
        body = json.loads(result.stdout)
        assert body["answer"].strip() and body["refused"] is False
        assert 0 < len(body["dropped_passages"]) < 40, body["dropped_passages"]
        assert not {c["chunk_id"] for c in body["citations"]} & set(body["dropped_passages"])
        assert "estimated" not in result.stderr  # counted with the model's own tokenizer
    finally:
        async with RagApp.from_settings(patient) as rag:
            await rag.delete_documents(source="ctx-test")
