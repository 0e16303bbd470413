"""ONNX Runtime in this process, for the exported embedding graphs: the one place a session is set up.

Used wherever the served graph runs outside Triton: the benchmark's in-process ceiling, the int8 quality check and
the tests' references. (Triton's own CPU backend, `infra/backends/onnxruntime/model.py`, runs in the Python stub's
separate environment and keeps its own copy of the same settings.) Needs onnxruntime, in the `local` extra; the
service itself never imports this module.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from tools.model_specs import EMBEDDING_OUTPUT


def open_session(model_file: Path, threads: int | None = None) -> ort.InferenceSession:
    """An ONNX Runtime CPU session on `model_file` with all graph optimisations, as Triton's CPU backend runs it.

    Args:
        threads: intra-op threads (ORT `intra_op_num_threads`; None: ORT's default, one per core); inter-op
            parallelism is 1 thread, as in Triton's config (`inter_op_thread_count`).

    Raises:
        FileNotFoundError: `model_file` does not exist (the message names the export command).
    """
    if not model_file.is_file():
        raise FileNotFoundError(f"{model_file} not found; export it with `python -m infra.export_onnx`")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.inter_op_num_threads = 1
    if threads is not None:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(model_file), sess_options=options, providers=["CPUExecutionProvider"])


def run_pooled(
    session: ort.InferenceSession, input_ids: npt.NDArray[np.int64], attention_mask: npt.NDArray[np.int64]
) -> npt.NDArray[np.float32]:
    """Sentence embeddings from an exported graph: `(batch, dim)` float32, unit rows (`sentence_embedding`).

    Args:
        input_ids, attention_mask: `(batch, seq)` int64, e.g. from `tools.embedder.pad_to_bucket`.
    """
    (vectors,) = session.run([EMBEDDING_OUTPUT], {"input_ids": input_ids, "attention_mask": attention_mask})
    result: npt.NDArray[np.float32] = np.asarray(vectors, dtype=np.float32)
    return result
