"""`rag bench embedder`: load test of the embedding service, four setups on the same machine and model.

Setups (all `all-minilm-l6-v2`, fp32, CPU, the same thread count `T` for the model everywhere):

1. `triton_dynamic`: a Triton started here from `model_repository/`, `dynamic_batching` on; the real client
   (`tools.embedder.TritonEmbedder` over `tritonclient.grpc.aio`) pads each text to its length bucket; the served
   graph pools and L2-normalises, so each request returns one 384-float embedding.
2. `triton_no_batching`: the same server and model reloaded with `dynamic_batching` removed (Triton's model
   repository extension, config override), so every request is one model execution.
3. `naive`: FastAPI + Hugging Face Transformers (PyTorch), one forward pass per request (`evals.naive_server`,
   uvicorn subprocess, `torch.set_num_threads(T)`), called over HTTP with httpx.
4. `ceiling`: the same pooled graph under ONNX Runtime in this process (`intra_op_num_threads=T`), no serving
   layer, tokenization and padding included, at the batch size (of 1, 8, 16, 32, 64) with the highest throughput.

Load: `N` requests of one text each, at most `C` in flight (C asyncio workers), for `C` in the concurrency sweep
and two text lengths: `short` = SciFact test claims (~20 tokens) as queries, `abstract` = SciFact abstracts
(`title\n\ntext`, the ingestion form; mostly cut at 256 tokens) as documents. Latency is per request, end to end
as the caller sees it (client tokenization included). Server mean batch = delta of Triton's `inference_count` over
`execution_count` (statistics extension) for the point.

Opt-in setup `triton_replicas` (`evals.bench_embedder.replicas`): two Tritons behind one client
(`TRITON_GRPC_URL=a,b`), short queries at concurrency 32, and the share of requests each server served.

Optional extras: the int8 variant (`all-minilm-l6-v2-int8`, when exported) on Triton with dynamic batching and in
process, at concurrency 32; a `max_queue_delay_microseconds` sweep for the dynamic batcher (`--queue-delays-us`).

The client, the servers and the ceiling share the machine's cores: on a 2-core machine the load generator's own
CPU time (tokenization, gRPC/HTTP) competes with the server; the ceiling pays none of that.

Modules: `params` (what a run does, what a point holds), `load` (texts, closed-loop load, summaries),
`triton_setup`, `naive`, `ceiling` (the setups), `report` (the JSON report), `render` (plot and tables), `run` (one
run, servers started and stopped).
"""

from evals.bench_embedder.load import run_load
from evals.bench_embedder.params import SETUPS, BenchParams, Point
from evals.bench_embedder.run import run_bench_command, run_benchmark

__all__ = ["SETUPS", "BenchParams", "Point", "run_bench_command", "run_benchmark", "run_load"]
