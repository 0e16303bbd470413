"""Retrieval ranks as the settings say, built in one place (`wiring.retrieval_config`), and the in-memory double
ranks by default as the service does. Pure logic, no server."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from agent.config.settings import Settings
from agent.core.wiring import retrieval_config
from tools.in_memory import InMemoryCollection
from tools.ingest import SourceDocument
from tools.retrieval_config import RetrievalConfig
from tools.rm3 import Rm3Params


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


def test_the_configs_defaults_are_the_apps() -> None:
    assert retrieval_config(settings()) == RetrievalConfig()
    assert InMemoryCollection().config == RetrievalConfig()


SETTING_OF_FIELD: dict[str, tuple[str, Any]] = {
    "mode": ("retrieval_mode", "dense"),
    "candidates": ("retrieval_candidates", 7),
    "fusion": ("fusion_method", "rrf"),
    "rrf_k": ("rrf_k", 9.0),
    "alpha": ("fusion_alpha", 0.3),
    "normalisation": ("fusion_normalisation", "z_score"),
    "full_text_match": ("full_text_match", "all"),
    "full_text_rank": ("full_text_rank", "bm25_exhaustive"),
    "bm25_k1": ("bm25_k1", 1.2),
    "bm25_b": ("bm25_b", 0.75),
    "ef_search": ("hnsw_ef_search", 40),
    "rerank_depth": ("rerank_depth", 20),
}
"""A value other than the default for each field of `RetrievalConfig` that one setting gives."""


def test_every_setting_reaches_its_field() -> None:
    rm3 = {"rm3": True, "rm3_fb_docs": 3, "rm3_fb_terms": 4, "rm3_original_weight": 0.7}
    weights = {"rrf_weight_dense": 0.5, "rrf_weight_full_text": 2.0}
    config = retrieval_config(settings(**dict(SETTING_OF_FIELD.values()), **rm3, **weights))
    expected = {name: value for name, (_, value) in SETTING_OF_FIELD.items()}
    assert config == RetrievalConfig(**expected, weights=(0.5, 2.0), rm3=Rm3Params(3, 4, 0.7))
    default = RetrievalConfig()
    assert all(getattr(config, f.name) != getattr(default, f.name) for f in fields(RetrievalConfig))


async def test_the_in_memory_double_fuses_as_configured() -> None:
    docs = [SourceDocument(i, "", text, "s", {}) for i, text in [("a", "zebra stripes"), ("b", "zebra")]]
    query = "zebra stripes"  # "a" is first in both lists: normalised 1 in each, reciprocal rank 1 in each
    convex = (await InMemoryCollection(docs).search(query, 2)).passages
    assert convex[0].doc_id == "a" and convex[0].score == pytest.approx(1.0)
    rrf = RetrievalConfig(fusion="rrf", rrf_k=4.0, weights=(0.5, 1.0))
    fused = (await InMemoryCollection(docs, rrf).search(query, 2)).passages
    assert fused[0].doc_id == "a" and fused[0].score == pytest.approx(0.5 / 5 + 1.0 / 5)
