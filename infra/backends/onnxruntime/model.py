"""A CPU `onnxruntime` backend for Triton, written as a Python-based backend.

Triton picks up `<backend-directory>/onnxruntime/model.py` for models that say `platform: "onnxruntime_onnx"` or
`backend: "onnxruntime"` when no compiled onnxruntime backend is installed (Triton python_backend README,
"Python-based Backends"). This lets the production `config.pbtxt` and `1/model.onnx` load unchanged on a
CPU-only Triton (the `tritonserver` bundled in nvidia-pytriton), while a GPU image uses the real backend.

Batching: with `dynamic_batching`, Triton hands `execute` a list of requests. Requests whose inputs share a
shape after the batch axis are concatenated into one ONNX Runtime run and the output is split back, so dynamic
batching is real here too. Outputs: exactly those the config names (e.g. the pooled `sentence_embedding`,
`(batch, dim)`, or token states `(batch, seq, dim)` of another model), each split back along the batch axis; a
config output missing from the graph fails the model load. Supported config `parameters` (same keys as the real
backend): `intra_op_thread_count`, `inter_op_thread_count`; and one of this backend's own, `nice`: the CPU
niceness (0-19) of the thread that runs the model and of the ONNX Runtime threads it starts, so that on a shared CPU
the kernel gives a bulk model's batches the cores only when nothing else wants them (the stub's health thread,
started before, keeps its priority). Only the local CPU configs set it.

This file runs inside Triton's Python stub with its own environment (`.venv-triton`: numpy<2 + onnxruntime), not
the project's, so it cannot import `tools/` and keeps its own ONNX Runtime session set-up.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils  # provided by the Triton Python stub

_TRITON_TO_NUMPY = {
    "TYPE_FP32": np.float32,
    "TYPE_FP16": np.float16,
    "TYPE_INT64": np.int64,
    "TYPE_INT32": np.int32,
    "TYPE_BOOL": np.bool_,
}


class TritonPythonModel:
    """Runs `<model_dir>/<version>/model.onnx` (or `default_model_filename`) with ONNX Runtime on CPU."""

    def initialize(self, args: dict[str, str]) -> None:
        config: dict[str, Any] = json.loads(args["model_config"])
        self.model_name = config["name"]
        filename = config.get("default_model_filename") or "model.onnx"
        path = os.path.join(args["model_repository"], args["model_version"], filename)
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}

        if params.get("nice"):
            # Linux: nice() applies to the calling thread; threads created after it (ONNX Runtime's pool) inherit.
            os.nice(int(params["nice"]))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if params.get("intra_op_thread_count"):
            options.intra_op_num_threads = int(params["intra_op_thread_count"])
        if params.get("inter_op_thread_count"):
            options.inter_op_num_threads = int(params["inter_op_thread_count"])
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])

        self.input_names = [i["name"] for i in config["input"]]
        self.input_dtypes = {i["name"]: _TRITON_TO_NUMPY[i["data_type"]] for i in config["input"]}
        self.output_names = [o["name"] for o in config["output"]]
        self.output_dtypes = {o["name"]: _TRITON_TO_NUMPY[o["data_type"]] for o in config["output"]}
        for kind, declared, graph in (
            ("inputs", self.input_names, {i.name for i in self.session.get_inputs()}),
            ("outputs", self.output_names, {o.name for o in self.session.get_outputs()}),
        ):
            missing = [n for n in declared if n not in graph]
            if missing:
                raise pb_utils.TritonModelException(
                    f"{self.model_name}: config {kind} {missing} are not in the ONNX graph {kind} {sorted(graph)} "
                    f"of {path} (a stale export? `python -m infra.export_onnx {self.model_name}`)"
                )

    def execute(self, requests: list[Any]) -> list[Any]:
        """Run all requests, merging those of equal per-item shape into one ONNX Runtime call."""
        inputs_per_request: list[dict[str, np.ndarray]] = []
        for request in requests:
            inputs_per_request.append(
                {
                    name: pb_utils.get_input_tensor_by_name(request, name)
                    .as_numpy()
                    .astype(self.input_dtypes[name], copy=False)
                    for name in self.input_names
                }
            )

        groups: dict[tuple[tuple[int, ...], ...], list[int]] = defaultdict(list)
        for idx, tensors in enumerate(inputs_per_request):
            groups[tuple(tensors[n].shape[1:] for n in self.input_names)].append(idx)

        responses: list[Any] = [None] * len(requests)
        for members in groups.values():
            feeds = {
                name: np.concatenate([inputs_per_request[i][name] for i in members], axis=0)
                for name in self.input_names
            }
            try:
                outputs = self.session.run(self.output_names, feeds)
            except Exception as exc:  # noqa: BLE001 - reported to the client per request
                error = pb_utils.TritonError(f"{self.model_name}: ONNX Runtime failed: {exc}")
                for i in members:
                    responses[i] = pb_utils.InferenceResponse(output_tensors=[], error=error)
                continue
            start = 0
            for i in members:
                n = inputs_per_request[i][self.input_names[0]].shape[0]
                tensors = [
                    pb_utils.Tensor(name, np.ascontiguousarray(out[start : start + n], dtype=self.output_dtypes[name]))
                    for name, out in zip(self.output_names, outputs, strict=True)
                ]
                responses[i] = pb_utils.InferenceResponse(output_tensors=tensors)
                start += n
        return responses

    def finalize(self) -> None:
        self.session = None
