"""Text embeddings from an ONNX encoder served by Triton, over `tritonclient.grpc.aio`.

Modules, in the order a text goes through them:
- `inputs`: tokenisation (truncation at the model limit, blank text refused) and padding to length buckets;
- `client`: `TritonEmbedder`, the one client per process: in-flight slots, requests, retries, reassembly;
- `channel`: the gRPC channel options (tritonclient's defaults, large message limits, the caller's arguments);
- `server`: statistics, configuration and model loading on the server;
- `errors`: `EmbedderStubFailedError`, and the translation of tritonclient's errors into it and into the errors the
  ports declare (`tools.errors`: `EmbedderError`, `EmbedderOverloadedError`);
- `stats`: the client's counters and call latencies.
- `reranker`: `TritonReranker`, a cross-encoder on the same client machinery (`client.TritonModelClient`): one
  relevance logit per (question, passage) pair, for the rerank step (`tools.rerank`).
- `verifier`: `TritonVerifier`, the support verifier on the same machinery: SUPPORT / CONTRADICT / NOT_ENOUGH_INFO
  probabilities per (claim, evidence) pair, and its thresholded decision rule (`label_of`).

Every input: blank text is refused before anything is sent; text longer than the model limit is truncated (logged
at WARNING and counted in `stats.truncated_texts`); any script, emoji or CJK without spaces goes through the
model's own tokenizer; a non-finite embedding raises `EmbedderError` naming the text and is never returned.
"""

from tools.embedder.channel import GRPC_MAX_MESSAGE_BYTES, channel_options
from tools.embedder.client import PRIORITY_BULK, PRIORITY_INTERACTIVE, TritonEmbedder
from tools.embedder.errors import EmbedderStubFailedError
from tools.embedder.inputs import length_buckets, pad_to_bucket
from tools.embedder.stats import EmbedderStats

__all__ = [
    "GRPC_MAX_MESSAGE_BYTES",
    "PRIORITY_BULK",
    "PRIORITY_INTERACTIVE",
    "EmbedderStats",
    "EmbedderStubFailedError",
    "TritonEmbedder",
    "channel_options",
    "length_buckets",
    "pad_to_bucket",
]
