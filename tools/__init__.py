"""The retrieval core: what the agent's tools call, with no dependency on the agent, the evals or the local stack.

The name is the design card's (`agent/`, `tools/`, `model_repository/`, `infra/`, `evals/`): the agent's *tools*
(`search_documents`, `get_document` in `agent.core.rag_agent`) run on what lives here. By the flow of a question:

- embedding: `embedder` (the Triton gRPC client), `tokenizer`, `model_specs`, `pooling` (the numpy reference),
  `onnx_session` (in-process ONNX Runtime for benchmarks);
- storage: `records` and `errors` (what every store takes, returns and raises: the vocabulary below the ports),
  `store` (Postgres + pgvector: schema, writes, dense and full-text search, documents), `bm25`;
- retrieval: `retrieval` (`PassageSearch`, the `Retriever` over embedder and store), `retrieval_config` (how it
  ranks), `fusion` (reciprocal rank fusion, convex combination), `rm3` (feedback), `in_memory` (the same search
  over documents held in memory, for tests);
- ingestion: `ingest` (read, chunk, embed, store), `chunking`, `jsonl`;
- shared: `timing` (stage timings and spans), `stats`, `packages`.

Import contract (`lint-imports`): nothing here imports `agent`, `evals` or `infra`.
"""
