"""Check a TensorRT-LLM model repository before Triton loads it: each Python model's `initialize` requirements
against its `config.pbtxt`, the ensemble's wiring, and the tensors Triton's OpenAI frontend sends and reads.

Upstream's Python models (`triton_backend/all_models/inflight_batcher_llm/{preprocessing,postprocessing}/1/model.py`
of TensorRT-LLM) read some config entries unconditionally in `initialize`: `model_config['parameters']['X']` raises
KeyError when parameter X is missing, and `pb_utils.get_input_config_by_name(model_config, 'X')['data_type']` (or
the output variant) fails when tensor X is not declared. A hand-reduced config therefore fails at load time, on the
GPU host. `initialize_requirements` reads those accesses from the model's source (Python's `ast`, nothing is
imported or run); `check_model` compares them with the config. `model_repository/llama-3.1-8b-instruct-trtllm/
build.sh` runs this module over the repository it generates at the pinned TensorRT-LLM commit, and compares the
requirements it finds with the ones recorded in `initialize_requirements.json` beside it (read from upstream's
sources, see that file), which the tests check the committed expectations against.

Usage: `python -m infra.trtllm_check REPOSITORY [--ensemble NAME] [--requirements FILE]`; exit 1 on any problem.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

# What Triton's OpenAI frontend sends to and reads from a non-vLLM model (server
# python/openai/openai_frontend/engine/utils/triton.py, _create_trtllm_generate_request, r26.07).
FRONTEND_SENDS = frozenset(
    {
        "text_input",
        "stream",
        "max_tokens",
        "stop_words",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
        "seed",
        "temperature",
        "guided_decoding_guide_type",
        "guided_decoding_guide",
        "return_num_input_tokens",
        "return_num_output_tokens",
    }
)
FRONTEND_READS = frozenset({"text_output", "num_input_tokens", "num_output_tokens"})
DEFAULT_ENSEMBLE = "llama-3.1-8b-instruct"
"""The ensemble's name: the vLLM model's, so LLM_MODEL is the same for both backends."""


@dataclass(frozen=True)
class Requirements:
    """What a Python model's `initialize` reads from its config: parameters it indexes (KeyError when missing),
    parameters it reads with `.get` (optional), and input/output tensors whose config it looks up by name."""

    parameters: frozenset[str] = field(default_factory=frozenset)
    optional_parameters: frozenset[str] = field(default_factory=frozenset)
    inputs: frozenset[str] = field(default_factory=frozenset)
    outputs: frozenset[str] = field(default_factory=frozenset)

    def to_json(self) -> dict[str, list[str]]:
        """Sorted lists, for `initialize_requirements.json`."""
        return {k: sorted(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Iterable[str]]) -> Requirements:
        """Inverse of `to_json`."""
        keys = ("parameters", "optional_parameters", "inputs", "outputs")
        return cls(**{k: frozenset(data.get(k, ())) for k in keys})


def _is_parameters(node: ast.AST) -> bool:
    """`<anything>['parameters']`, e.g. `model_config['parameters']`."""
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "parameters"


def _string_lists(func: ast.FunctionDef) -> dict[str, list[str]]:
    """Names bound to a list or tuple of string literals in `func`: `names = ["A", "B"]`."""
    lists: dict[str, list[str]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple)):
            values = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(values) == len(node.value.elts):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        lists[target.id] = values
    return lists


def _loop_bindings(func: ast.FunctionDef) -> dict[int, dict[str, list[str]]]:
    """For each node inside a `for NAME in <list of literals or a name bound to one>:` loop, by `id(node)`: the
    loop variable's possible values (the innermost loop wins)."""
    lists = _string_lists(func)
    bindings: dict[int, dict[str, list[str]]] = {}

    def visit(node: ast.AST, scope: dict[str, list[str]]) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            values: list[str] | None = None
            if isinstance(node.iter, ast.Name):
                values = lists.get(node.iter.id)
            elif isinstance(node.iter, (ast.List, ast.Tuple)):
                values = [e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if values is not None:
                scope = {**scope, node.target.id: values}
        bindings[id(node)] = scope
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(func, {})
    return bindings


def initialize_requirements(source: str) -> Requirements:
    """The config entries `TritonPythonModel.initialize` in `source` (a model.py) reads.

    Recognised: `X['parameters']['NAME']` (required), `X['parameters'].get('NAME')` (optional),
    `pb_utils.get_input_config_by_name(cfg, NAME)` and `get_output_config_by_name(cfg, NAME)` with NAME a string
    literal or a loop variable over a list of literals.

    Raises:
        ValueError: `source` has no `initialize` method.
    """
    tree = ast.parse(source)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "initialize"]
    if not functions:
        raise ValueError("no initialize() in the model source")
    func = functions[0]
    bindings = _loop_bindings(func)
    required: set[str] = set()
    optional: set[str] = set()
    tensors: dict[str, set[str]] = {"get_input_config_by_name": set(), "get_output_config_by_name": set()}
    for node in ast.walk(func):
        if isinstance(node, ast.Subscript) and _is_parameters(node.value) and isinstance(node.slice, ast.Constant):
            required.add(str(node.slice.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name == "get" and _is_parameters(node.func.value) and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant):
                    optional.add(str(arg.value))
            elif name in tensors and len(node.args) >= 2:
                arg = node.args[1]
                if isinstance(arg, ast.Constant):
                    tensors[name].add(str(arg.value))
                elif isinstance(arg, ast.Name) and arg.id in bindings[id(node)]:
                    tensors[name].update(bindings[id(node)][arg.id])
    return Requirements(
        parameters=frozenset(required),
        optional_parameters=frozenset(optional - required),
        inputs=frozenset(tensors["get_input_config_by_name"]),
        outputs=frozenset(tensors["get_output_config_by_name"]),
    )


def load_config(path: Path) -> Any:
    """`path` (a config.pbtxt) parsed into Triton's `ModelConfig` (unknown fields and bad syntax raise)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def check_model(config: Any, requirements: Requirements) -> list[str]:
    """Problems of `config` (a `ModelConfig`) for a Python model with `requirements`: each is a load-time failure."""
    problems = []
    params = set(config.parameters)
    for name in sorted(requirements.parameters - params):
        problems.append(f"{config.name}: parameter {name!r} is read unconditionally by initialize() (KeyError)")
    for kind, declared, needed in (
        ("input", {i.name for i in config.input}, requirements.inputs),
        ("output", {o.name for o in config.output}, requirements.outputs),
    ):
        for name in sorted(needed - declared):
            problems.append(f"{config.name}: initialize() looks up the config of {kind} {name!r}, not declared")
    return problems


def check_ensemble(configs: Mapping[str, Any], ensemble: str) -> list[str]:
    """Problems of the ensemble `ensemble` among `configs` (name -> `ModelConfig`): every step reads tensors that
    exist (ensemble inputs or earlier outputs) into inputs the step declares with the same data type, maps every
    required input, writes only declared outputs; the ensemble's outputs are produced; and it takes every tensor the
    OpenAI frontend sends and produces every one it reads."""
    problems: list[str] = []
    if ensemble not in configs:
        return [f"no model named {ensemble!r} (the frontend serves the ensemble under LLM_MODEL)"]
    top = configs[ensemble]
    if top.platform != "ensemble":
        return [f"{ensemble}: platform {top.platform!r}, expected 'ensemble'"]
    inputs = {i.name: i for i in top.input}
    for name in sorted(FRONTEND_SENDS - set(inputs)):
        problems.append(f"{ensemble}: no input {name!r}, which the OpenAI frontend sends")
    available = {name: i.data_type for name, i in inputs.items()}
    for step in top.ensemble_scheduling.step:
        model = configs.get(step.model_name)
        if model is None:
            problems.append(f"{ensemble}: step {step.model_name!r} is not in the repository")
            continue
        declared = {i.name: i for i in model.input}
        for key, value in step.input_map.items():
            if key not in declared:
                problems.append(f"{step.model_name}: no input {key!r}")
            elif value not in available:
                problems.append(f"{step.model_name}.{key} reads {value!r}, produced by no earlier step")
            elif available[value] != declared[key].data_type:
                problems.append(f"{step.model_name}.{key}: data type differs from {value!r}")
        for name in sorted({i.name for i in model.input if not i.optional} - set(step.input_map)):
            problems.append(f"{step.model_name}: required input {name!r} is not mapped")
        outputs = {o.name: o.data_type for o in model.output}
        for key, value in step.output_map.items():
            if key not in outputs:
                problems.append(f"{step.model_name}: no output {key!r}")
            else:
                available[value] = outputs[key]
    produced = {o.name for o in top.output} & set(available)
    problems += [f"{ensemble}: output {o.name!r} is produced by no step" for o in top.output if o.name not in available]
    for name in sorted(FRONTEND_READS - produced):
        problems.append(f"{ensemble}: no output {name!r}, which the OpenAI frontend reads")
    return problems


def check_repository(repository: Path, ensemble: str, recorded: Mapping[str, Requirements] | None) -> list[str]:
    """Every problem of `repository`: per Python model (a `1/model.py` next to its config) its `initialize`
    requirements against its config, and against `recorded` (the reviewed upstream version) when given; then the
    ensemble. Raises on unparsable configs (`google.protobuf.text_format.ParseError`)."""
    configs = {p.parent.name: load_config(p) for p in sorted(repository.glob("*/config.pbtxt"))}
    problems: list[str] = []
    for name, config in configs.items():
        if config.backend != "python":
            continue
        source = repository / name / "1" / "model.py"
        if not source.is_file():
            problems.append(f"{name}: python backend but no {source}")
            continue
        found = initialize_requirements(source.read_text(encoding="utf-8"))
        if recorded is not None and name in recorded and recorded[name] != found:
            problems.append(
                f"{name}: initialize() of this model.py reads {found.to_json()}, the recorded upstream version "
                f"{recorded[name].to_json()}: review the change and update initialize_requirements.json"
            )
        problems += check_model(config, found)
    return problems + check_ensemble(configs, ensemble)


def main(
    repository: Annotated[Path, typer.Argument(help="The TensorRT-LLM model repository to check.")],
    ensemble: Annotated[str, typer.Option(help="The ensemble the frontend serves (LLM_MODEL).")] = DEFAULT_ENSEMBLE,
    requirements: Annotated[
        Path | None, typer.Option(help="initialize_requirements.json: the reviewed requirements per model.")
    ] = None,
) -> None:
    """Check REPOSITORY; print each problem; exit 1 when there is any."""
    recorded = None
    if requirements is not None:
        data = json.loads(requirements.read_text(encoding="utf-8"))
        recorded = {name: Requirements.from_json(req) for name, req in data["models"].items()}
    problems = check_repository(repository, ensemble, recorded)
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"{repository}: every Python model's initialize() requirements and the ensemble check out")


if __name__ == "__main__":
    typer.run(main)
