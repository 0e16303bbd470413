"""Where the embedder connects, without a server: TRITON_GRPC_URL's endpoints, TRITON_GRPC_CHANNEL_ARGS, the order
calls take the endpoints in, and the slot-wait metric on the app's /metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from agent.config.settings import Settings, SettingsError, describe_validation_error
from agent.core.telemetry import metrics_app
from tools.embedder import TritonEmbedder
from tools.embedder.channel import (
    GRPC_MAX_MESSAGE_BYTES,
    ROUND_ROBIN_SERVICE_CONFIG,
    channel_arguments,
    channel_options,
    endpoint_port,
    split_endpoints,
)
from tools.embedder.endpoints import EndpointPool
from tools.model_specs import get_spec


@pytest.mark.parametrize(
    ("url", "endpoints"),
    [
        ("localhost:8001", ["localhost:8001"]),
        ("[::1]:8001", ["[::1]:8001"]),
        (
            "dns:///triton-embedder-headless.triton-rag.svc.cluster.local:8001",
            ["dns:///triton-embedder-headless.triton-rag.svc.cluster.local:8001"],
        ),
        ("10.0.0.5:8001, 10.0.0.6:8001,", ["10.0.0.5:8001", "10.0.0.6:8001"]),
        ("a:1,dns:///b:2,a:1", ["a:1", "dns:///b:2"]),
        ("ipv4:10.0.0.5:8001,10.0.0.6:8001", ["ipv4:10.0.0.5:8001,10.0.0.6:8001"]),
        ("unix:/run/triton.sock", ["unix:/run/triton.sock"]),
    ],
)
def test_grpc_url_forms_split_into_endpoints(url: str, endpoints: list[str]) -> None:
    assert split_endpoints(url) == endpoints


@pytest.mark.parametrize(
    "url", ["", " , ", "triton", "triton:0", "triton:99999", ":8001", "dns:", "dns:///", "http://triton:8001"]
)
def test_bad_grpc_url_names_the_endpoint(url: str) -> None:
    with pytest.raises(ValueError, match=r"endpoint|host:port|no address|scheme"):
        split_endpoints(url)


@pytest.mark.parametrize(
    ("endpoint", "port"),
    [("localhost:8001", 8001), ("dns:///t:9001", 9001), ("dns://8.8.8.8/t:9002", 9002), ("unix:/s", None)],
)
def test_endpoint_port(endpoint: str, port: int | None) -> None:
    assert endpoint_port(endpoint) == port


def test_channel_args_json_becomes_grpc_arguments_with_large_message_limits() -> None:
    args = {
        "grpc.service_config": ROUND_ROBIN_SERVICE_CONFIG,
        "grpc.keepalive_time_ms": 30000,
        "grpc.keepalive_permit_without_calls": True,
        "grpc.max_receive_message_length": 1024,
    }
    options = dict(channel_options(args))
    assert json.loads(options["grpc.service_config"]) == {"loadBalancingConfig": [{"round_robin": {}}]}
    assert options["grpc.keepalive_time_ms"] == 30000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.max_receive_message_length"] == GRPC_MAX_MESSAGE_BYTES
    with pytest.raises(ValueError, match=r"'grpc\.x'"):
        channel_arguments({"grpc.x": None})


def test_settings_take_a_target_list_and_channel_args_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRITON_GRPC_URL", "127.0.0.1:9101, dns:///triton-b:9102")
    monkeypatch.setenv("TRITON_GRPC_CHANNEL_ARGS", '{"grpc.lb_policy_name": "round_robin"}')
    settings = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    assert settings.triton_grpc_port == 9101  # the local Triton of `rag up` listens on the first
    assert settings.triton_grpc_channel_args == {"grpc.lb_policy_name": "round_robin"}
    client = TritonEmbedder(settings.triton_grpc_url, get_spec("all-minilm-l6-v2"), channel_args={"grpc.x": 1})
    assert client.endpoints == ["127.0.0.1:9101", "dns:///triton-b:9102"]
    assert ("grpc.x", 1) in client.channel_args


def test_channel_args_given_as_json_text_to_the_constructor_are_parsed(tmp_path: Path) -> None:
    text = '{"grpc.lb_policy_name": "round_robin"}'
    settings = Settings.model_validate({"data_dir": tmp_path, "triton_grpc_channel_args": text})
    assert settings.triton_grpc_channel_args == {"grpc.lb_policy_name": "round_robin"}


@pytest.mark.parametrize(
    ("name", "value", "detail"),
    [
        ("TRITON_GRPC_URL", "http://triton:8001/v2", "scheme 'http'"),
        ("TRITON_GRPC_URL", "triton", "is not host:port"),
        ("TRITON_GRPC_CHANNEL_ARGS", "[1]", "dictionary"),
        ("TRITON_GRPC_CHANNEL_ARGS", '{"grpc.x": null}', "'grpc.x'"),
    ],
)
def test_bad_embedder_settings_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str, detail: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as raised:
        Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    message = describe_validation_error(raised.value)
    assert name in message and detail in message, message


def test_local_triton_needs_a_port_in_the_first_endpoint(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path, triton_grpc_url="unix:/run/t.sock", services=("postgres",))  # type: ignore[call-arg]
    with pytest.raises(SettingsError, match="names no port"):
        settings.triton_grpc_port  # noqa: B018


def test_calls_take_endpoints_in_turn_and_a_failed_one_last() -> None:
    pool = EndpointPool(["a:1", "b:2", "c:3"], [], cooldown_s=60.0)
    assert [pool.order()[0] for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    pool.mark_down(1)
    orders = [pool.order() for _ in range(3)]
    assert [o[-1] for o in orders] == [1, 1, 1]  # tried last, so a retry goes elsewhere first
    assert [o[0] for o in orders] == [0, 2, 0]  # round robin among the healthy ones
    pool.mark_up(1)
    assert sorted(pool.order()) == [0, 1, 2] and 1 in [pool.order()[0] for _ in range(3)]
    for i in range(3):
        pool.mark_down(i)
    assert len({pool.order()[0] for _ in range(3)}) == 3  # all down: plain round robin


def test_slot_wait_histogram_is_on_the_apps_metrics() -> None:
    body = TestClient(metrics_app()).get("/").text
    assert "# TYPE rag_embedder_slot_wait_seconds histogram" in body
    assert 'rag_embedder_slot_wait_seconds_bucket{le="0.001"}' in body
