"""What the local stack (`infra.postgres`, `infra.triton`, `infra.vllm`, `infra.stack`) needs to know: plain values.

`infra/` never imports the application's settings; the commands that start and stop the stack (the CLI's
`up`/`down`/`status`, test fixtures, the embedder benchmark) build a `StackConfig` from theirs with
`StackConfig.of(settings)`, which copies the fields below by name.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StackConfig:
    """Paths, ports, timeouts and model names of the local services.

    Units are in the field names (`_s` seconds, `_gib` GiB). `database_url_file` is where the embedded Postgres'
    URL is recorded on start (and removed on stop) so that the application finds it without importing `infra`.
    """

    data_dir: Path
    model_repository: Path
    triton_grpc_port: int
    triton_http_port: int
    triton_metrics_port: int
    triton_grpc_url: str
    embedder_model: str
    embedder_interactive_model: str
    triton_extra_models: tuple[str, ...]
    reranker_model: str
    support_check: str
    support_model: str
    triton_python_env: Path
    triton_start_timeout_s: float
    database_url: str | None
    database_url_file: Path
    llm_base_url: str
    llm_model: str
    vllm_port: int
    vllm_kvcache_space_gib: int
    vllm_max_model_len: int
    vllm_nice: int
    vllm_start_timeout_s: float
    services: tuple[str, ...]

    @property
    def run_dir(self) -> Path:
        """Directory of PID files and service logs (`<data_dir>/run`)."""
        return self.data_dir / "run"

    @classmethod
    def of(cls, source: Any) -> StackConfig:
        """Copy every field of this class from the same-named attribute of `source` (e.g. the app's settings).

        Raises:
            AttributeError: `source` lacks one of the fields.
        """
        return cls(**{f.name: getattr(source, f.name) for f in fields(cls)})
