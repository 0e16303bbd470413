"""Settings validation, the derived values other layers read, and the embedder factory. Pure logic, no server."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from agent.cli.main import app
from agent.config.settings import Settings, SettingsError, describe_validation_error, split_host_port
from agent.core.app import build_embedder
from infra.config import StackConfig
from tools.embedder import PRIORITY_BULK, PRIORITY_INTERACTIVE


def make(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("TRITON_", "LLM_", "VLLM_", "DATABASE_", "CHUNK_", "SERVICES")):
            monkeypatch.delenv(name)


def test_defaults_are_consistent() -> None:
    settings = make()
    assert settings.llm_base_url == "http://localhost:9000/v1" and settings.vllm_port == 9000
    assert settings.triton_grpc_port == 8001


def test_unset_llm_url_follows_the_vllm_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_PORT", "9100")
    assert Settings(_env_file=None).llm_base_url == "http://localhost:9100/v1"  # type: ignore[call-arg]
    assert make(vllm_port=9200, llm_base_url="http://gpu-host:9000/v1").llm_base_url == "http://gpu-host:9000/v1"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"chunk_tokens": 100, "chunk_overlap_tokens": 100},
            "CHUNK_OVERLAP_TOKENS=100 must be smaller than CHUNK_TOKENS=100",
        ),
        ({"llm_base_url": "http://127.0.0.1:8000/v1"}, "port 8000 but the local vLLM listens on VLLM_PORT=9000"),
        ({"triton_http_port": 8001}, "share a port: TRITON_GRPC_URL=8001, TRITON_HTTP_PORT=8001"),
        ({"vllm_port": 8002, "llm_base_url": "http://localhost:8002/v1"}, "TRITON_METRICS_PORT=8002, VLLM_PORT=8002"),
        ({"triton_grpc_url": "localhost"}, "TRITON_GRPC_URL: 'localhost' is not host:port"),
        ({"triton_grpc_url": "localhost:99999"}, "TRITON_GRPC_URL: 'localhost:99999' is not host:port"),
        ({"llm_base_url": "localhost:9000/v1"}, "LLM_BASE_URL: "),
        ({"database_url": "mysql://db/rag"}, "DATABASE_URL: 'mysql://db/rag' is not a postgresql:// URL"),
        ({"vllm_port": 0}, "VLLM_PORT: Input should be greater than or equal to 1"),
    ],
)
def test_contradictions_and_bad_values_are_one_readable_line(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        make(**values)
    line = describe_validation_error(info.value)
    assert message in line and "\n" not in line


def test_remote_llm_and_no_local_vllm_need_no_agreement() -> None:
    assert make(llm_base_url="http://triton:9000/v1").vllm_port == 9000
    assert make(llm_base_url="http://localhost:8000/v1", services=("postgres", "triton")).vllm_port == 9000


def test_host_port_parsing() -> None:
    assert split_host_port("localhost:8001") == ("localhost", 8001)
    assert split_host_port("[::1]:8001") == ("::1", 8001)
    assert make(triton_grpc_url="triton.internal:18001").triton_grpc_port == 18001
    with pytest.raises(ValueError, match="not host:port"):
        split_host_port("http://triton:8001/v2")


def test_database_url_comes_from_the_setting_or_the_recorded_embedded_server(tmp_path: Path) -> None:
    assert make(database_url="postgresql://u@db/rag").resolved_database_url() == "postgresql://u@db/rag"
    settings = make(data_dir=tmp_path)
    with pytest.raises(SettingsError, match="run `rag up`"):
        settings.resolved_database_url()
    settings.database_url_file.parent.mkdir(parents=True)
    settings.database_url_file.write_text("postgresql://postgres:@/postgres?host=/tmp/x\n")
    assert settings.resolved_database_url() == "postgresql://postgres:@/postgres?host=/tmp/x"


def test_stack_config_copies_the_settings_it_needs(tmp_path: Path) -> None:
    settings = make(data_dir=tmp_path, triton_grpc_url="localhost:18001", vllm_port=19000)
    config = StackConfig.of(settings)
    assert config.triton_grpc_port == 18001 and config.vllm_port == 19000
    assert config.run_dir == settings.run_dir and config.database_url_file == settings.database_url_file


def test_embedder_factory_applies_every_client_setting() -> None:
    settings = make(triton_timeout_s=7.0, triton_retries=5, triton_connect_timeout_s=2.0, triton_max_in_flight=3)
    embedder = build_embedder(settings)
    assert (embedder.url, embedder.model_name) == ("localhost:8001", "all-minilm-l6-v2-query")
    assert (embedder.timeout_s, embedder.retries, embedder.connect_timeout_s, embedder.max_in_flight) == (
        7.0,
        5,
        2.0,
        3,
    )
    other = build_embedder(settings, model="all-minilm-l6-v2-int8", timeout_s=120.0, buckets=[32, 64])
    assert (other.model_name, other.timeout_s, other.retries) == ("all-minilm-l6-v2-int8", 120.0, 5)
    assert other.buckets[:2] == [32, 64]  # the client adds the model limit as the last bucket


def test_questions_and_ingestion_get_their_own_model_priority_and_slots() -> None:
    settings = make(triton_max_in_flight=3)
    interactive, bulk = build_embedder(settings), build_embedder(settings, workload="bulk")
    assert (interactive.model_name, interactive.priority, interactive.max_in_flight) == (
        "all-minilm-l6-v2-query",
        PRIORITY_INTERACTIVE,
        3,
    )
    assert (bulk.model_name, bulk.priority, bulk.max_in_flight) == ("all-minilm-l6-v2", PRIORITY_BULK, 4)
    assert PRIORITY_INTERACTIVE < PRIORITY_BULK  # Triton: 1 is the highest level
    # one model for both (production bge-large): questions go first by priority instead
    shared = make(embedder_query_model="all-minilm-l6-v2")
    assert build_embedder(shared).model_name == build_embedder(shared, workload="bulk").model_name
    # a model without an interactive twin serves both
    int8 = make(embedder_model="all-minilm-l6-v2-int8")
    assert int8.embedder_interactive_model == "all-minilm-l6-v2-int8"
    assert StackConfig.of(settings).embedder_interactive_model == "all-minilm-l6-v2-query"


def test_cli_reports_bad_settings_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_BASE_URL", "http://localhost:1234/v1")
    monkeypatch.setenv("VLLM_PORT", "9000")
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "LLM_BASE_URL=http://localhost:1234/v1" in result.stderr and "VLLM_PORT=9000" in result.stderr


@pytest.mark.parametrize("value", ["postgres,triton", " postgres , triton ", '["postgres", "triton"]'])
def test_services_are_read_comma_separated_or_as_json(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICES", value)
    assert Settings(_env_file=None).services == ("postgres", "triton")  # type: ignore[call-arg]


def test_an_unknown_service_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICES", "postgres,redis")
    with pytest.raises(ValidationError, match="redis"):
        Settings(_env_file=None)  # type: ignore[call-arg]
