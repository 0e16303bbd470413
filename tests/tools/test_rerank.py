"""The rerank step's logic with a scripted scorer (no servers): the cross-encoder re-orders only the first `depth`
fused hits, depth 0 leaves the fused ranking as it is without calling the scorer, the result is cut at `top_k`, and
the retriever asks for enough candidates and reports the stage's time."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from agent.config.settings import Settings
from infra import triton
from infra.config import StackConfig
from tests.retrieval_doubles import DENSE, FULL_TEXT, FakeEmbedder, FakeStore, hit
from tools.errors import EmbedderError
from tools.records import ChunkHit
from tools.rerank import rerank
from tools.retrieval import Retriever
from tools.retrieval_config import RetrievalConfig


class ScriptedScorer:
    """Scores each passage by its position in `preferred` (first is best); records every call."""

    def __init__(self, preferred: Sequence[str], shape: tuple[int, ...] | None = None) -> None:
        self.preferred = list(preferred)
        self.calls: list[tuple[str, list[str]]] = []
        self.shape = shape

    async def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append((query, list(passages)))
        scores = np.array(
            [len(self.preferred) - self.preferred.index(p) if p in self.preferred else 0.0 for p in passages],
            dtype=np.float32,
        )
        return scores.reshape(self.shape) if self.shape else scores


FUSED: list[tuple[ChunkHit, float]] = [(hit(f"d{i}#0", f"passage {i}"), 1.0 / i) for i in range(1, 7)]


def ids(ranked: Sequence[tuple[ChunkHit, float]]) -> list[str]:
    return [h.doc_id for h, _ in ranked]


async def test_reranks_only_the_first_depth_hits_and_cuts_at_top_k() -> None:
    scorer = ScriptedScorer(["passage 3", "passage 1", "passage 2", "passage 6"])
    out = await rerank("claim", FUSED, scorer, depth=3, top_k=2)
    assert ids(out) == ["d3", "d1"]
    assert [s for _, s in out] == [4.0, 3.0]  # the cross-encoder's scores replace the fused ones
    assert scorer.calls == [("claim", ["passage 1", "passage 2", "passage 3"])]  # passage 6 was never scored


async def test_hits_beyond_depth_keep_their_fused_order_and_scores() -> None:
    scorer = ScriptedScorer(["passage 2", "passage 1"])
    out = await rerank("claim", FUSED, scorer, depth=2, top_k=4)
    assert ids(out) == ["d2", "d1", "d3", "d4"]
    assert [s for _, s in out][2:] == [1 / 3, 1 / 4]


async def test_equal_scores_keep_the_fused_order() -> None:
    out = await rerank("claim", FUSED, ScriptedScorer([]), depth=6, top_k=6)
    assert ids(out) == ["d1", "d2", "d3", "d4", "d5", "d6"]


async def test_depth_zero_is_off_and_calls_no_scorer() -> None:
    scorer = ScriptedScorer(["passage 6"])
    assert ids(await rerank("claim", FUSED, scorer, depth=0, top_k=3)) == ["d1", "d2", "d3"]
    assert scorer.calls == []


async def test_depth_beyond_the_list_reranks_all_of_it() -> None:
    out = await rerank("claim", FUSED[:3], ScriptedScorer(["passage 3"]), depth=50, top_k=5)
    assert ids(out) == ["d3", "d1", "d2"]


async def test_bad_arguments_and_bad_scores_raise() -> None:
    with pytest.raises(ValueError, match="depth=-1"):
        await rerank("claim", FUSED, ScriptedScorer([]), depth=-1, top_k=3)
    with pytest.raises(ValueError, match="top_k=0"):
        await rerank("claim", FUSED, ScriptedScorer([]), depth=3, top_k=0)
    with pytest.raises(EmbedderError, match=r"shape \(3, 1\) for 3 passages"):
        await rerank("claim", FUSED, ScriptedScorer([], shape=(3, 1)), depth=3, top_k=3)


class SizedStore(FakeStore):
    """The fake store, recording the size each dense search asked for."""

    sizes: list[int]

    async def dense_search(
        self, query: npt.NDArray[np.float32], top_k: int, *args: Any, **kwargs: Any
    ) -> list[ChunkHit]:
        self.sizes.append(top_k)
        return await super().dense_search(query, top_k)


def retriever_with(scorer: ScriptedScorer | None, depth: int, candidates: int = 2) -> tuple[Retriever, list[int]]:
    release = asyncio.Event()
    store = SizedStore(release, DENSE, FULL_TEXT)
    store.sizes = []
    config = RetrievalConfig(candidates=candidates, rerank_depth=depth)
    retriever = Retriever(FakeEmbedder(release), store, config, scorer)
    return retriever, store.sizes


async def test_retriever_reranks_the_fused_head_and_times_the_stage() -> None:
    scorer = ScriptedScorer(["text of f#0", "text of e#0"])
    retriever, sizes = retriever_with(scorer, depth=10)
    result = await retriever.search("claim", top_k=2)
    assert [p.doc_id for p in result.passages] == ["f", "e"]
    assert [p.number for p in result.passages] == [1, 2]
    assert "rerank" in result.timings_ms
    assert sizes == [10]  # each list is asked for at least the rerank depth (candidates is 2)
    assert len(scorer.calls[0][1]) == 5  # every fused hit: the same text under a and b is one


async def test_retriever_without_reranking_keeps_the_fused_ranking() -> None:
    plain, _ = retriever_with(None, depth=10)
    off, sizes = retriever_with(ScriptedScorer(["text of f#0"]), depth=0)
    fused = [p.doc_id for p in (await plain.search("claim", top_k=3)).passages]
    result = await off.search("claim", top_k=3)
    assert [p.doc_id for p in result.passages] == fused
    assert "rerank" not in result.timings_ms and sizes == [3]
    with pytest.raises(ValueError, match="rerank_depth=-1"):
        RetrievalConfig(rerank_depth=-1)


def test_local_triton_loads_the_reranker_only_once_it_is_exported(tmp_path: Path) -> None:
    config = StackConfig.of(Settings(_env_file=None, model_repository=tmp_path))  # type: ignore[call-arg]
    # the support verifier ships in git: always loaded; the reranker is trained, loaded once its graph exists
    assert triton.served_models(config) == ["all-minilm-l6-v2", "all-minilm-l6-v2-query", "minilm-l6-scifact-verifier"]
    onnx = tmp_path / "minilm-l6-scifact-reranker" / "1" / "model.onnx"
    onnx.parent.mkdir(parents=True)
    onnx.write_bytes(b"graph")
    assert triton.served_models(config)[-1] == "minilm-l6-scifact-reranker"


def test_rag_eval_rerank_writes_the_report_and_plot_for_the_depths_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rag eval rerank` passes its depths, limit and timed claims to the eval, then writes the JSON report and the
    plot where asked (the eval itself, against the stack, is replaced by the stored SciFact report)."""
    import json

    from typer.testing import CliRunner

    from agent.cli.main import app
    from evals import rerank_eval

    stored = json.loads((rerank_eval.RESULTS / "rerank-scifact-test.json").read_text())
    asked: list[tuple[Sequence[int], int | None, int]] = []

    async def fake_eval(depths: Sequence[int], limit: int | None, timed_claims: int) -> dict[str, Any]:
        asked.append((depths, limit, timed_claims))
        return {k: v for k, v in stored.items() if k != "plot"}

    monkeypatch.setattr(rerank_eval, "run_rerank_eval", fake_eval)
    out, figure = tmp_path / "rerank.json", tmp_path / "rerank.png"
    args = ["eval", "rerank", "--depth", "20", "--depth", "50", "--limit", "7", "--timed-claims", "3"]
    result = CliRunner().invoke(app, [*args, "--output", str(out), "--plot", str(figure), "--json"])
    assert result.exit_code == 0, result.output
    assert asked == [((20, 50), 7, 3)]
    report = json.loads(result.stdout)
    assert report == json.loads(out.read_text()) and report["plot"] == "rerank.png"
    assert report["depths"]["20"]["ndcg@10"] == stored["depths"]["20"]["ndcg@10"]
    assert figure.read_bytes().startswith(b"\x89PNG")
