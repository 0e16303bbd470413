"""The retrieval configuration refuses what no retrieval can run, before any search. Pure logic, no server."""

from __future__ import annotations

from typing import Any

import pytest

from tools.retrieval_config import RetrievalConfig
from tools.rm3 import Rm3Params


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "sparse"}, "retrieval mode 'sparse'"),
        ({"fusion": "mean"}, "fusion='mean'"),
        ({"alpha": 1.5}, r"alpha=1\.5"),
        ({"normalisation": "max"}, "normalisation='max'"),
        ({"rrf_k": 0.0}, r"rrf_k=0\.0"),
        ({"candidates": 0}, "candidates=0"),
        ({"weights": (1.0,)}, r"weights=\(1\.0,\)"),
        ({"full_text_match": "some"}, "full_text_match='some'"),
        ({"full_text_rank": "tf"}, "full_text_rank='tf'"),
        ({"ef_search": 0}, "ef_search=0"),
        ({"rm3": Rm3Params(), "full_text_rank": "ts_rank_cd"}, "RM3 feedback needs BM25"),
        ({"rerank_depth": -1}, "rerank_depth=-1"),
    ],
)
def test_invalid_values_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetrievalConfig(**values)


def test_a_config_is_a_frozen_value() -> None:
    config = RetrievalConfig(fusion="rrf", rm3=Rm3Params(5, 10, 0.5))
    assert config == RetrievalConfig(fusion="rrf", rm3=Rm3Params(5, 10, 0.5)) != RetrievalConfig()
    with pytest.raises(AttributeError):
        config.mode = "dense"  # type: ignore[misc]
