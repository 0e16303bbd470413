"""The retrieval core: what the agent's tools call, with no dependency on the agent, the evals or the local stack.

The name is the design card's (`agent/`, `tools/`, `model_repository/`, `infra/`, `evals/`): the agent's *tools*
(`search_documents`, `get_document` in `agent.core.rag_agent`) run on what lives here. Every module and package, by
the flow of a question (`tests/tools/test_front_door.py` checks that this list names each one):

Embedding:
- `embedder`: the Triton gRPC client of the embedder, the reranker and the verifier (channels, endpoints, batching).
- `tokenizer`: the embedder's tokenizer (`tokenizer.json`), shared by the client and the chunker.
- `model_specs`: one description per embedding model (pooling, dimension, length limit, prefixes).
- `pooling`: pooling and L2 normalisation in numpy, the reference for the served ONNX graph.
- `onnx_session`: ONNX Runtime in this process, for the exported graphs (benchmarks, tests).
- `packages`: data shipped inside installed packages (tokenizers), found without importing them.

Storage:
- `records`: what every store takes and returns, the vocabulary below the ports (chunks, documents, hits, sync
  state, jobs, keys).
- `errors`: the errors every store and embedder raises (`StoreError`, `EmbedderError`, ...).
- `store`: chunks, vectors and full text in Postgres + pgvector (schema, pools, writes, search, listings, jobs,
  keys, sync state, staging).
- `bm25`: Okapi BM25 over the chunks' `tsvector`s with corpus statistics in Postgres.
- `originals`: the kept original files of stored documents, so that a cited page can be rendered.
- `conversations`: the conversation records and the `ConversationLog` protocol its stores implement.
- `feedback`: the records of answers and their ratings, and the `FeedbackLog` protocol.
- `access`: who may read which documents: groups, roles, a caller's `Access` (the store enforces it with
  row-level security, `store.access`).

Retrieval:
- `retrieval`: `PassageSearch`, the `Retriever` over embedder and store (dense, full text, hybrid).
- `retrieval_config`: how retrieval ranks, in one object with the app's defaults.
- `fusion`: the two fusions of the hybrid legs, reciprocal rank and convex (normalised scores).
- `rm3`: RM3 pseudo-relevance feedback for the full-text leg.
- `rerank`: the rerank step, a cross-encoder re-ordering the head of a fused ranking.
- `scope`: which documents a search may see (`SearchScope`: collections and metadata filters).

Answers:
- `support`: per-sentence support of an answer by the retrieved sentences.
- `sentences`: sentence boundaries of answers and passages.
- `language`: the language of a short text (langid) and its content tokens in any script.
- `highlight`: where a passage stands on its pages (one box per text line).
- `render_page`: a page of a kept PDF or image as a PNG with a passage highlighted.

Ingestion:
- `ingest`: read files and folders, chunk, embed and store them; folder sync.
- `extract`: text and structure out of document files, and the registry of formats.
- `chunking`: token-aware chunking with overlap, cut at sentence ends.
- `jsonl`: JSON Lines records with their line numbers (BEIR corpora, datasets).
- `jobs`: the ingestion job worker over the job queue's port.

In memory, for tests and apps built without Postgres:
- `in_memory`: a document collection searched in memory.
- `in_memory_sink`: a chunk sink held in memory.
- `in_memory_conversations`: the conversation log held in memory.
- `in_memory_feedback`: the feedback log held in memory.
- `in_memory_support`: doubles of the support check's embedder and verifier.
- `in_memory_sync`: the folder sync's ledger held in memory.
- `in_memory_jobs`: the job queue held in memory.
- `in_memory_originals`: the kept originals held in memory.
- `in_memory_grants`: the grants of groups to collections held in memory.

Shared:
- `timing`: stage timings and their OpenTelemetry spans.
- `stats`: latency summaries (percentiles) for benchmarks, evals and clients.

Import contract (`lint-imports`): nothing here imports `agent`, `evals` or `infra`.
"""
