"""`rag eval ...` and `rag bench ...` command groups (registered on the `rag` CLI in `agent/cli/main.py`).

Each evaluation or benchmark module adds its command here with `@eval_app.command(...)` / `@bench_app.command(...)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, cast

import typer

if TYPE_CHECKING:
    from agent.config.settings import Settings
    from tools.ingest import IngestReport
    from tools.retrieval_config import RetrievalMode

eval_app = typer.Typer(
    help="Evaluations on real data: retrieval quality, answer quality, comparisons.", no_args_is_help=True
)
bench_app = typer.Typer(help="Load benchmarks that print figures.", no_args_is_help=True)


def ingest_ceiling_line(report: IngestReport, settings: Settings) -> str:
    """`rag ingest --ceiling`: the run's chunks/s against the in-process ONNX Runtime ceiling on a sample of its
    chunks (`evals.ingest_ceiling`; needs the `local` extra's onnxruntime)."""
    from agent.core.wiring import build_embedder
    from evals.ingest_ceiling import ceiling_line

    model_file = settings.model_repository / settings.embedder_model / "1" / "model.onnx"
    return ceiling_line(model_file, build_embedder(settings), report.chunks_per_s, report.sample)


@eval_app.command("retrieval")
def retrieval(
    split: Annotated[
        str, typer.Option(help="Split: `test` (report) or `train` (tuning); with --dataset, its qrels/SPLIT.tsv.")
    ] = "test",
    variant: Annotated[
        list[str] | None,
        typer.Option(help="Corpus variant(s): `passage` (one 256-token passage per doc) and/or `chunked`."),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Evaluate only the first N queries of the split.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report only.")] = False,
    tune: Annotated[
        bool, typer.Option("--tune", help="Also grid-search RRF k and the dense weight (use with --split train).")
    ] = False,
    output: Annotated[
        Path | None, typer.Option(help="Write the JSON report here (default: DATA_DIR/evals/retrieval-SPLIT.json).")
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) to evaluate instead of SciFact, in "
            "its own scratch database (re-runs reuse its vectors)."
        ),
    ] = None,
) -> None:
    """SciFact retrieval (BEIR protocol), or any BEIR folder's with --dataset: nDCG@10, recall@10/100, MRR@10 of
    dense, full-text and hybrid search through Triton and pgvector, HNSW recall@10 against exact search, and (for
    SciFact) the published reference figures."""
    from evals.retrieval_cli import run_retrieval_command

    run_retrieval_command(split, variant, limit, as_json, output, tune, dataset)


@eval_app.command("tune-fusion")
def tune_fusion(
    rm3: Annotated[
        bool, typer.Option("--rm3/--no-rm3", help="Also try RM3 feedback on the full-text leg (8 settings).")
    ] = True,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N claims of each split.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report only.")] = False,
    output: Annotated[
        Path | None, typer.Option(help="Write the JSON report here (default: DATA_DIR/evals/tune-fusion.json).")
    ] = None,
) -> None:
    """Choose the hybrid fusion on SciFact train and report test with the chosen parameters: RRF (k, dense weight)
    and the convex combination of normalised scores (alpha, normalisation), each with plain BM25 or RM3 as the
    full-text leg. Candidate lists are fetched once through the stack and cached; the grid runs in Python."""
    from evals.fusion_cli import run_tune_fusion_command

    run_tune_fusion_command(limit, rm3, as_json, output)


@eval_app.command("rerank")
def rerank(
    depth: Annotated[
        list[int] | None, typer.Option("--depth", min=1, help="Rerank depths (repeatable; default 20 50 100).")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="First N test claims only.")] = None,
    output: Annotated[
        Path | None, typer.Option(help="Report JSON (default evals/results/rerank-scifact-test.json).")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Figure (default evals/results/rerank-scifact-test.png).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    timed_claims: Annotated[int, typer.Option(min=1, help="Claims whose rerank latency is timed at each depth.")] = 40,
) -> None:
    """The rerank stage on SciFact test: nDCG@10 and recall@10 of the hybrid (fused) ranking and of the reranked
    ranking at each depth, the latency the stage adds per question (p50/p95, concurrency 1) and a plot. Needs `rag up`
    with the reranker on Triton (`python -m evals.train_reranker`, then `rag down` / `rag up`)."""
    from evals.rerank_eval import run_rerank_command

    run_rerank_command(depth, limit, output, plot, as_json, timed_claims)


@eval_app.command("support")
def support(
    limit: Annotated[int | None, typer.Option(min=1, help="First N test claims only.")] = None,
    output: Annotated[
        Path | None, typer.Option(help="Report JSON (default evals/results/support-scifact-test.json).")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Figure (default evals/results/support-scifact-test.png).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
) -> None:
    """The support verifier on SciFact test (SciFact paper's metrics, oracle abstracts): sentence selection and
    selection + label P/R/F1, label accuracy given gold rationales, per-class F1, SUPPORT precision at the shipped
    thresholds, the embedding-similarity baseline beside, targets and anchors. Needs the local Triton (`rag up --only
    triton`)."""
    from evals.support_eval import run_support_command

    run_support_command(limit, output, plot, as_json)


@eval_app.command("answers")
def answers(
    split: Annotated[str, typer.Option(help="SciFact split: `test` to report, `train` to tune.")] = "test",
    cases: Annotated[Path | None, typer.Option(help="Cases file (YAML/JSON, pydantic-evals format) instead.")] = None,
    ids: Annotated[list[str] | None, typer.Option("--id", help="Only these claim ids (repeatable).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Evaluate only the first N cases.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Cases answered at once.")] = 1,
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, max=100, help="Passages per answer.")] = None,
    out: Annotated[Path, typer.Option(help="Run directory: summary.json, results.json, report.md, plots.")] = Path(
        ".rag/evals/answers"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary JSON only.")] = False,
) -> None:
    """Answer quality (verdict accuracy vs the majority baseline, citation precision/recall, refusal rate) and
    latency per stage on SciFact claims, through the running stack. Exit code 2 when any case failed (it scores 0
    in every score), 1 when the run could not start."""
    from evals.answers_cli import run_answers_command
    from evals.scifact import Split

    if split not in ("train", "test"):
        raise typer.BadParameter(f"split {split!r}: expected 'train' or 'test'")
    run_answers_command(cast(Split, split), cases, ids, limit, concurrency, top_k, out, as_json)


@eval_app.command("export-feedback")
def export_feedback(
    out: Annotated[Path, typer.Argument(help="Folder to write: corpus.jsonl, queries.jsonl, qrels/, cases.yaml.")],
    rating: Annotated[str | None, typer.Option(help="Only `up` or only `down` ratings.")] = None,
    since: Annotated[str | None, typer.Option(help="Only ratings from this ISO 8601 date or time (UTC) on.")] = None,
    collection: Annotated[
        list[str] | None, typer.Option("--collection", help="Only answers over this collection (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the export's summary JSON only.")] = False,
) -> None:
    """Rated answers as regression tests (docs/feedback.md): a BEIR folder for `rag eval retrieval --dataset OUT`
    (queries from rated questions, qrels from up-voted answers' cited documents and "right source" corrections,
    the documents involved read from the store) and `OUT/cases.yaml` for `rag eval answers --cases` (question,
    expected sources, the rated answer and what was wrong). No API key or token is exported."""
    import asyncio
    import json

    from agent.config.settings import Settings
    from agent.core.errors import InputError
    from agent.core.feedback import parse_since
    from evals.feedback_export import export_from_store

    if rating not in (None, "up", "down"):
        raise InputError(f"--rating {rating!r}; expected up or down")
    summary = asyncio.run(
        export_from_store(out, Settings(), cast(Literal["up", "down"] | None, rating), parse_since(since), collection)
    )
    if as_json:
        print(json.dumps(summary))
        return
    typer.echo(
        f"{summary['ratings']} ratings ({summary['up']} up, {summary['down']} down) → {out}: {summary['queries']} "
        f"queries ({summary['judged_queries']} judged), {summary['documents']} documents"
        + (f", {len(summary['missing_documents'])} no longer stored" if summary["missing_documents"] else "")
    )
    typer.echo(f"next: rag eval retrieval --dataset {out}; rag eval answers --cases {out / 'cases.yaml'}")


@eval_app.command("followups")
def followups(
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N follow-up pairs (all: 231).")] = 150,
    corpus_docs: Annotated[
        int | None,
        typer.Option(
            min=1, help="Documents searched: the pairs' gold documents plus a fixed sample of the rest (all: 5183)."
        ),
    ] = 1000,
    output: Annotated[
        Path | None,
        typer.Option(help="Write the JSON report here (default: evals/results/followups-scifact-test.json)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report only.")] = False,
) -> None:
    """Follow-up search queries on SciFact test: two-turn conversations made from claims by rule (the second turn
    names the subject by a pronoun); recall@10 and nDCG@10 of the raw follow-up, the condensed query, the LLM rewrite
    and the original claim, with the rewrite's added latency and fallback rate. Needs `rag up`."""
    from evals.followup_eval import run_followups_command

    run_followups_command(limit, corpus_docs, output, as_json)


@eval_app.command("compare")
def compare_runs(
    run_a: Annotated[Path, typer.Argument(help="Run directory A (baseline).")],
    run_b: Annotated[Path, typer.Argument(help="Run directory B (candidate).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per-metric difference B - A between two `rag eval answers` runs."""
    from evals.answers_cli import run_compare_command

    run_compare_command(run_a, run_b, as_json)


@bench_app.command("embedder")
def bench_embedder(
    requests: Annotated[int, typer.Option(min=1, help="Requests per (setup, short, concurrency) point.")] = 200,
    abstract_requests: Annotated[int, typer.Option(min=1, help="Requests per abstract point.")] = 48,
    bucket: Annotated[
        list[int] | None, typer.Option(min=1, help="Client padding buckets (repeatable; default 32 64 128 192 256).")
    ] = None,
    concurrency: Annotated[
        list[int] | None, typer.Option(min=1, help="Concurrency to sweep (repeatable; default 1 8 32 64).")
    ] = None,
    length: Annotated[
        list[str] | None, typer.Option(help="Text lengths: `short` (claims) and/or `abstract` (default both).")
    ] = None,
    setup: Annotated[
        list[str] | None,
        typer.Option(
            help="Setups: triton_dynamic, triton_no_batching, naive, ceiling (repeatable; default all), and "
            "triton_replicas (two Tritons behind one client: the share each serves; only when named)."
        ),
    ] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="Model threads of every setup (default: CPUs).")] = None,
    queue_delay_us: Annotated[int, typer.Option(min=0, help="Dynamic batcher max_queue_delay_microseconds.")] = 2000,
    sweep_queue_delay_us: Annotated[
        list[int] | None, typer.Option(min=0, help="Also sweep these queue delays (short, concurrency 32).")
    ] = None,
    int8: Annotated[bool, typer.Option(help="Also measure the int8 model (if exported) at concurrency 32.")] = True,
    max_seconds_per_point: Annotated[float, typer.Option(min=1, help="Stop a point after this many seconds.")] = 30.0,
    port_base: Annotated[int, typer.Option(min=0, help="First of 10 ports for the bench servers (0: free ports).")] = 0,
    repeats: Annotated[
        int, typer.Option(min=1, help="Rounds: every point once per round, setups alternating; medians reported.")
    ] = 3,
    max_in_flight: Annotated[
        int | None, typer.Option(min=1, help="The Triton client's in-flight limit (default: TRITON_MAX_IN_FLIGHT).")
    ] = None,
    profile: Annotated[
        bool,
        typer.Option(
            help="Instead: profile short queries at concurrency 32 (where the time goes) under each serving "
            "configuration of evals.bench_embedder.profile, --repeats rounds, --requests per point."
        ),
    ] = False,
    plot: Annotated[Path | None, typer.Option(help="Plot file (default DATA_DIR/bench/bench-embedder.png).")] = None,
    output: Annotated[Path | None, typer.Option(help="Also write the JSON report to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only.")] = False,
) -> None:
    """Embedding service load test: Triton with and without dynamic batching, a naive FastAPI + Transformers
    server and the in-process ONNX Runtime ceiling; throughput, p50/p95/p99 and server mean batch per point."""
    from agent.config.settings import Settings
    from evals.bench_embedder import SETUPS, BenchParams, run_bench_command

    data_dir = Settings().data_dir / "bench"
    defaults = BenchParams()
    params = BenchParams(
        requests=requests,
        abstract_requests=abstract_requests,
        buckets=tuple(bucket) if bucket else None,
        concurrencies=tuple(concurrency or defaults.concurrencies),
        lengths=tuple(length or defaults.lengths),
        setups=tuple(setup or defaults.setups),
        threads=threads or defaults.threads,
        queue_delay_us=queue_delay_us,
        queue_delays_us=tuple(sweep_queue_delay_us or ()),
        int8=int8,
        max_seconds_per_point=max_seconds_per_point,
        port_base=port_base,
        data_dir=data_dir,
        repeats=repeats,
        max_in_flight=max_in_flight,
    )
    if profile:
        from evals.bench_embedder.profile_run import run_profile_command

        run_profile_command(params, as_json, output)
        return
    for name in params.lengths:
        if name not in ("short", "abstract"):
            raise typer.BadParameter(f"--length {name!r}: expected 'short' or 'abstract'")
    for name in params.setups:
        if name not in SETUPS:
            raise typer.BadParameter(f"--setup {name!r}: expected one of {', '.join(SETUPS)}")
    run_bench_command(params, as_json, plot or data_dir / "bench-embedder.png", output)


@bench_app.command("page")
def bench_page(
    runs: Annotated[int, typer.Option(min=1, help="Page opens measured (after one warm-up).")] = 10,
    output: Annotated[
        Path | None, typer.Option(help="Write the JSON report here (default: DATA_DIR/bench/page-settle.json).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only.")] = False,
) -> None:
    """The web page's settle time in headless Chromium with the 5,183 SciFact documents in Postgres (database
    `<database>_page`, filled once): p50 and max of settle, last-page and search-by-id times (target: settle under
    1 s)."""
    from evals.page_settle import run_page_settle_command

    run_page_settle_command(runs, output, as_json)


@bench_app.command("query")
def bench_query(
    requests: Annotated[int, typer.Option(min=1, help="Queries per (mode, concurrency) point, claims cycled.")] = 300,
    concurrency: Annotated[
        list[int] | None, typer.Option(min=1, help="Concurrency to sweep (repeatable; default 1 8 32 64).")
    ] = None,
    mode: Annotated[
        list[str] | None, typer.Option(help="Retrieval modes: dense, full_text, hybrid (repeatable; default all).")
    ] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, max=100, help="Passages per query.")] = None,
    scale: Annotated[
        int | None, typer.Option(min=2, help="Also measure search p50 growth on an N-times replicated store.")
    ] = None,
    rebuild_scale: Annotated[bool, typer.Option(help="Rebuild the scaled database even if it is complete.")] = False,
    filter_selectivity: Annotated[
        str | None,
        typer.Option(
            "--filter-selectivity",
            metavar="S,S",
            help="Filtered mode instead of the sweep: shares of chunks a metadata filter matches, e.g. 0.01,0.001; "
            "recall@10 against the exact filtered search and filtered vs unfiltered p50, on a tagged copy of the "
            "stored corpus (database <name>_filtered).",
        ),
    ] = None,
    repeats: Annotated[
        int, typer.Option(min=1, help="Rounds: every point once per round, modes alternating; medians reported.")
    ] = 3,
    access: Annotated[
        str | None,
        typer.Option(
            "--access",
            metavar="GROUP[,GROUP]",
            help="Also search as a caller in these groups (row-level security) and report restricted / "
            "unrestricted p50 latency (target <= 1.15).",
        ),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Plot file (default DATA_DIR/bench/bench-query.png).")] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON report to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only (progress on stderr).")] = False,
) -> None:
    """Query path through the app (embed on Triton + search in Postgres) per retrieval mode and concurrency:
    queries/s, p50/p95/p99, embed/search split, Triton mean batch, embed-only ratio, and search growth with scale."""
    from evals.bench_query import MODES, QueryBenchParams, run_query_bench_command

    modes = tuple(mode or MODES)
    for name in modes:
        if name not in MODES:
            raise typer.BadParameter(f"--mode {name!r}: expected one of {', '.join(MODES)}")
    defaults = QueryBenchParams()
    try:
        selectivities = tuple(float(v) for v in (filter_selectivity or "").split(",") if v.strip())
    except ValueError:
        raise typer.BadParameter(
            f"--filter-selectivity {filter_selectivity!r}: expected comma-separated shares, e.g. 0.01,0.001"
        ) from None
    if any(not 0 < s <= 1 for s in selectivities):
        raise typer.BadParameter(f"--filter-selectivity {filter_selectivity!r}: expected shares in (0, 1]")
    params = QueryBenchParams(
        requests=requests,
        concurrencies=tuple(concurrency or defaults.concurrencies),
        modes=cast("tuple[RetrievalMode, ...]", modes),
        top_k=top_k,
        scale=scale,
        rebuild_scale=rebuild_scale,
        filter_selectivities=selectivities,
        repeats=repeats,
        access_groups=tuple(g.strip() for g in (access or "").split(",") if g.strip()),
    )
    run_query_bench_command(params, as_json, plot, out)


@bench_app.command("cache")
def bench_cache(
    claims: Annotated[int, typer.Option(min=1, help="Distinct SciFact test claims the question log draws from.")] = 60,
    questions: Annotated[int, typer.Option(min=1, help="Questions replayed (drawn with replacement).")] = 300,
    distractors: Annotated[int, typer.Option(min=0, help="Abstracts stored besides the claims' gold ones.")] = 200,
    llm_delay_ms: Annotated[float, typer.Option(min=0, help="The scripted LLM's time per answer, ms.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the claims and of the log.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON report to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only (progress on stderr).")] = False,
) -> None:
    """The answer cache through HTTP: a question log with repeats replayed against a small SciFact corpus (a scratch
    database on the running Postgres and Triton) with a scripted LLM; hit and miss latency p50/p95/p99, hit rate,
    and the target hit p50 <= 20 ms."""
    from agent.config.settings import Settings
    from evals.bench_cache import CacheBenchParams, run_cache_bench_command

    try:
        params = CacheBenchParams(claims, questions, distractors, llm_delay_ms, seed)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    run_cache_bench_command(Settings(), params, as_json, out)


@bench_app.command("sync")
def bench_sync(
    files: Annotated[int, typer.Option(min=10, help="Files in the synced folder (SciFact abstracts).")] = 200,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON report to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only (progress on stderr).")] = False,
) -> None:
    """`rag sync` on a folder of SciFact abstracts (a scratch database on the running Postgres and Triton): the
    initial sync, a re-sync after 3 edits, 2 deletions and 1 rename (chunks embedded against chunks changed, time),
    the check that it equals a fresh ingest of the folder, and a sync with nothing changed (target: 0 embed calls, 0
    documents written)."""
    from agent.config.settings import Settings
    from evals.bench_sync import run_sync_bench_command

    run_sync_bench_command(Settings(), files, as_json, out)


@bench_app.command("serve")
def bench_serve(
    url: Annotated[str, typer.Option(help="Base URL of the running `rag serve` (loopback).")] = "http://127.0.0.1:8080",
    api_key: Annotated[
        str | None, typer.Option(envvar="API_KEY", help="Bearer key when the server has API_KEY (default: $API_KEY).")
    ] = None,
    concurrency: Annotated[
        list[int] | None, typer.Option(min=1, help="Closed-loop concurrency levels (repeatable; default 1 8 32 128).")
    ] = None,
    requests: Annotated[
        int, typer.Option(min=1, help="Requests per closed-loop level (at least twice its concurrency are sent).")
    ] = 64,
    max_seconds_per_level: Annotated[
        float, typer.Option(min=1, help="Stop sending in a closed-loop level after this many seconds.")
    ] = 600.0,
    overload: Annotated[
        float, typer.Option(min=0, help="Open-loop Poisson rate as a multiple of the measured capacity (0: none).")
    ] = 4.0,
    open_loop_seconds: Annotated[float, typer.Option(min=1, help="How long open-loop arrivals go on, s.")] = 300.0,
    open_loop_requests: Annotated[int, typer.Option(min=1, help="Most open-loop arrivals.")] = 2000,
    endpoint: Annotated[
        str, typer.Option(help="`stream` (/v1/ask/stream: latency and TTFT) or `ask` (/v1/ask: latency only).")
    ] = "stream",
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, max=100, help="Passages per answer.")] = None,
    timeout: Annotated[float, typer.Option(min=1, help="Client timeout of one request, seconds.")] = 600.0,
    seed: Annotated[int, typer.Option(help="Seed of the Poisson arrivals.")] = 0,
    llm_tokenizer: Annotated[
        Path | None,
        typer.Option(help="The LLM's tokenizer.json (file or folder) for tokens/s; default the local LLM's, if any."),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Plot file (default DATA_DIR/bench/bench-serve.png).")] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON report to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only (progress on stderr).")] = False,
) -> None:
    """End-to-end load on a running `rag serve` over HTTP with SciFact claims: closed-loop concurrency levels, then
    Poisson arrivals at --overload x the measured capacity; goodput, latency and TTFT p50/p95/p99, rejections and
    their latency, errors by kind, LLM tokens/s, and the overload targets."""
    from agent.config.settings import Settings
    from evals.bench_serve import ServeBenchParams, ServerUnreachableError, run_serve_bench_command

    settings = Settings()
    if llm_tokenizer is None:
        local = settings.data_dir / "llm" / settings.llm_model / "tokenizer.json"
        llm_tokenizer = local if local.is_file() else None
    if endpoint not in ("stream", "ask"):
        raise typer.BadParameter(f"--endpoint {endpoint!r}: expected 'stream' or 'ask'")
    try:
        params = ServeBenchParams(
            url=url.rstrip("/"),
            api_key=api_key,
            endpoint=cast('Literal["stream", "ask"]', endpoint),
            concurrencies=tuple(concurrency or ServeBenchParams.concurrencies),
            requests=requests,
            max_seconds_per_level=max_seconds_per_level,
            overload=overload,
            open_loop_seconds=open_loop_seconds,
            open_loop_requests=open_loop_requests,
            timeout_s=timeout,
            top_k=top_k,
            seed=seed,
            llm_tokenizer=llm_tokenizer,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        run_serve_bench_command(params, as_json, plot or settings.data_dir / "bench" / "bench-serve.png", out)
    except ServerUnreachableError as exc:
        raise typer.BadParameter(f"--url {url}: {exc}; start it with `rag serve`") from None


@eval_app.command("fidelity")
def fidelity(
    claims: Annotated[int, typer.Option(min=1, help="First N judged SciFact test claims.")] = 100,
    distractors: Annotated[int, typer.Option(min=0, help="Abstracts added besides the claims' gold ones.")] = 300,
    book_docs: Annotated[int, typer.Option(min=1, help="Documents printed one per page for the page check.")] = 20,
    output: Annotated[
        Path, typer.Option(help="Results file (the docs' table reads evals/results/fidelity.json).")
    ] = Path(".rag/evals/fidelity.json"),
    format_: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            help="Renderings to run (repeatable; jsonl, pdf, html, docx, scanned; default all; JSONL always runs). "
            "A partial run updates its rows of an existing output file.",
        ),
    ] = None,
) -> None:
    """Format fidelity: SciFact documents rendered as PDF (headless Chromium), HTML, DOCX and scanned image-only PDF
    (read by OCR), each ingested into a fresh database of the configured Postgres; nDCG@10 on the claims against the
    JSONL ingest of the same documents (target within 0.01, 0.02 for the scan), and cited PDF pages (printed and
    scanned) against where the text is printed."""
    from evals.fidelity import FORMATS
    from evals.fidelity_cli import run_fidelity_command

    formats = tuple(format_) if format_ else FORMATS
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise typer.BadParameter(f"{sorted(unknown)}; expected some of {', '.join(FORMATS)}", param_hint="--format")
    run_fidelity_command(claims, distractors, book_docs, output, formats)


@bench_app.command("extract")
def extract(
    docs: Annotated[int, typer.Option(min=1, help="SciFact abstracts rendered as PDF, HTML and DOCX.")] = 200,
    output: Annotated[Path, typer.Option(help="Results file (the docs read evals/results/extract-bench.json).")] = Path(
        ".rag/evals/extract-bench.json"
    ),
    ocr_docs: Annotated[int, typer.Option(min=1, help="Of those, abstracts scanned and read back by OCR.")] = 20,
) -> None:
    """Extraction libraries on real files: pages/s of pypdfium2 and pypdf on Debian's PDFs and on printed SciFact
    abstracts, word fidelity against the source text; trafilatura vs markitdown on web pages (boilerplate leaks);
    python-docx on Word files; Tesseract OCR on scans of the printed abstracts (at OCR_DPI). Writes the results JSON
    and prints it."""
    import json

    from agent.config.settings import Settings
    from evals.extract_bench import run_extract_bench

    results = run_extract_bench(docs, min(ocr_docs, docs), Settings().ocr_dpi)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


@bench_app.command("mixed")
def bench_mixed(
    workload: Annotated[
        list[str] | None, typer.Option(help="Bulk workloads: ingest, upload, eval (repeatable; default all).")
    ] = None,
    concurrency: Annotated[
        list[int] | None, typer.Option(min=1, help="Question concurrency levels (repeatable; default 1 8).")
    ] = None,
    retrieval_requests: Annotated[int, typer.Option(min=1, help="Retrievals per probe.")] = 40,
    answer_requests: Annotated[int, typer.Option(min=1, help="Whole answers per probe.")] = 8,
    answers: Annotated[bool, typer.Option(help="Also probe whole answers (TTFT); needs the LLM.")] = True,
    ingest_docs: Annotated[int, typer.Option(min=1, help="SciFact abstracts the ingest workload stores.")] = 1500,
    upload_files: Annotated[int, typer.Option(min=1, help="PDFs in the upload job.")] = 20,
    upload_pages: Annotated[int, typer.Option(min=1, help="Pages (abstracts) per uploaded PDF.")] = 10,
    eval_cases: Annotated[int, typer.Option(min=1, help="Claims the eval workload answers.")] = 40,
    eval_concurrency: Annotated[int, typer.Option(min=1, help="Concurrency of the eval workload.")] = 8,
    seed: Annotated[
        int | None, typer.Option(help="Order of the answer probes' claims (default: a fresh one, in the report).")
    ] = None,
    out: Annotated[Path, typer.Option(help="JSON report (the plot is written beside it as .png).")] = Path(
        ".rag/bench/bench-mixed.json"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only (progress on stderr).")] = False,
) -> None:
    """Questions beside bulk work on the same stack: retrieval and answer latency (p50/p95/p99, TTFT) idle and
    while an ingest, an upload job or an eval run goes on, and each bulk workload's rate alone and beside them."""
    from agent.config.settings import Settings
    from evals.bench_mixed import WORKLOADS, MixedBenchParams, Workload, run_mixed_bench_command

    chosen = tuple(workload or WORKLOADS)
    for name in chosen:
        if name not in WORKLOADS:
            raise typer.BadParameter(f"--workload {name!r}: expected one of {', '.join(WORKLOADS)}")
    params = MixedBenchParams(
        workloads=cast(tuple[Workload, ...], chosen),
        concurrencies=tuple(concurrency or (1, 8)),
        retrieval_requests=retrieval_requests,
        answer_requests=answer_requests,
        answers=answers,
        ingest_docs=ingest_docs,
        upload_files=upload_files,
        upload_pages=upload_pages,
        eval_cases=eval_cases,
        eval_concurrency=eval_concurrency,
        seed=seed,
    )
    run_mixed_bench_command(Settings(), params, as_json, out)


@bench_app.command("quota")
def bench_quota(
    requests: Annotated[int, typer.Option(min=1, help="Refusals measured per phase.")] = 400,
    warmup: Annotated[int, typer.Option(min=0, help="Unmeasured refusals before each phase.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results JSON only.")] = False,
    out: Annotated[Path, typer.Option(help="Results file (the docs read evals/results/bench-quota.json).")] = Path(
        ".rag/bench/bench-quota.json"
    ),
) -> None:
    """Latency of the 429 `quota_exceeded` refusal of an API key over its requests per minute or tokens per day,
    p50/p95/p99 ms, one client and 16 at once, on /v1/chat/completions and /v1/ask of the real HTTP app (in-memory
    answers, keys and usage; no stack needed); also checks the refusals made no LLM call."""
    from evals.bench_quota import QuotaBenchParams, run_quota_bench_command

    run_quota_bench_command(QuotaBenchParams(requests, warmup), as_json, out)


@bench_app.command("fairness")
def bench_fairness(
    flood_clients: Annotated[int, typer.Option(min=1, help="Clients of the flooding key at once.")] = 64,
    duration: Annotated[float, typer.Option(min=1, help="Seconds of flood.")] = 20.0,
    answer_s: Annotated[float, typer.Option(min=0.01, help="Seconds each answer holds its slot.")] = 0.5,
    key_share: Annotated[float, typer.Option(min=0.01, max=1.0, help="ANSWER_KEY_SHARE of the server.")] = 0.5,
    honour_retry_after: Annotated[
        bool, typer.Option(help="The flooding clients wait out each refusal's Retry-After.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results JSON only.")] = False,
    out: Annotated[Path, typer.Option(help="Results file (the docs read evals/results/bench-fairness.json).")] = Path(
        ".rag/bench/bench-fairness.json"
    ),
) -> None:
    """One API key floods the real HTTP app while another asks once a second: the share of the steady key's
    requests answered (target >= 90 %), each key's outcomes and latency p50/p95/p99 ms (in-memory answers holding
    their slot a fixed time; no stack needed)."""
    from evals.bench_fairness import FairnessBenchParams, run_fairness_bench_command

    params = FairnessBenchParams(flood_clients, duration, answer_s=answer_s, key_share=key_share)
    run_fairness_bench_command(params, honour_retry_after, as_json, out)


@bench_app.command("burst")
def bench_burst(
    clients: Annotated[int, typer.Option(min=1, help="Clients arriving at once in each burst.")] = 128,
    bursts: Annotated[int, typer.Option(min=1, help="Bursts (each after the last one's answers ended).")] = 5,
    rate: Annotated[
        float, typer.Option(min=0, help="Open-loop arrivals per second after the bursts (0: none).")
    ] = 100.0,
    seconds: Annotated[float, typer.Option(min=0, help="Seconds of open-loop arrivals.")] = 10.0,
    answer_s: Annotated[float, typer.Option(min=0.01, help="Seconds each admitted answer holds its slot.")] = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results JSON only.")] = False,
    out: Annotated[Path, typer.Option(help="Results file.")] = Path(".rag/bench/bench-burst.json"),
) -> None:
    """Refusal latency when clients arrive together: bursts of 128 at once and open-loop arrivals against the real
    HTTP app in its own process (in-memory answers holding their slot), from a load generator at higher priority;
    refusals' p50/p95/p99/max per phase, target p99 < 250 ms (no stack needed)."""
    from evals.bench_burst import BurstParams, render, run_burst_bench
    from evals.plots import emit_report

    params = BurstParams(clients=clients, bursts=bursts, rate=rate, seconds=seconds, answer_s=answer_s)
    emit_report(run_burst_bench(params), as_json, out, render)


@bench_app.command("support")
def bench_support(
    answers: Annotated[int, typer.Option(min=1, help="Stored answers checked (after the warm-up).")] = 100,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=20, help="Passages retrieved per claim.")] = 5,
    max_sentences: Annotated[int, typer.Option(min=1, help="Each answer cut to this many sentences.")] = 8,
    concurrency: Annotated[
        list[int] | None, typer.Option(help="Concurrency of the verifier throughput points (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object only.")] = False,
    out: Annotated[Path | None, typer.Option(help="Write the JSON report here.")] = None,
) -> None:
    """Added latency of the per-sentence support check per answer (p50/p95/p99 ms; the stored local-model answers to
    SciFact test claims, passages from the running stack) and the verifier's throughput on Triton (pairs/s)."""
    from evals.bench_support import SupportBenchParams, run_support_bench_command

    params = SupportBenchParams(answers, top_k, max_sentences, tuple(concurrency or (1, 4, 16)))
    run_support_bench_command(params, as_json, out)
