"""The service's core: the Python API, one answer and everything it takes, and the wiring of the parts. Every module,
one line each (`tests/agent/core/test_front_door.py` checks that this list names each one):

The API and its parts:
- `app`: the Python API, `RagApp`, the composition root that answers questions over the stored documents.
- `wiring`: every factory that turns `Settings` into a connected part (`Services`, `build_services`).
- `library`: the stored documents as the interfaces see them: list, add, delete, count.
- `pages`: a page of a stored document as an image with a cited chunk highlighted.
- `ingestion`: the document side composed once: ingest, add, sync and watch, upload and sync jobs, workers.

One answer:
- `answer`: one answer, a typed request run through the agent, streamed, with citations, refusal and limits.
- `rag_agent`: the pydantic-ai agent, its dependencies, its tools and the two retrieval policies.
- `llm`: the client of the OpenAI-compatible generator and its server's quirks.
- `llm_finish`: how an LLM response ended beyond a complete answer (cut at the budget, cut short, rate limited).
- `prompts`: the prompts of the answering agent.
- `context_window`: the retrieved passages fitted into the LLM's context window.
- `citations`: citation extraction and validation (only chunks retrieved in this run).
- `support`: the support check of an answer's sentences (`SUPPORT_CHECK`).
- `conversations`: a question asked in a stored conversation: its history and search query.
- `followup`: the search query of a follow-up question (condensed or rewritten by the LLM).
- `answer_cache`: repeated first-turn questions answered from Postgres.
- `feedback`: every answer remembered with what it rests on, and its rating.
- `results`: the typed results of the API and their JSON form.
- `events`: the events one answer emits while it runs (chat, SSE).

Limits, keys and failures:
- `admission`: admission control of answers (in progress, a bounded queue, fair shares per key).
- `keys`: the service's view of the API keys (`KeyRing`) and their cache.
- `grants`: the grants of groups to collections with a role (`GrantStore`), over the store.
- `oidc`: sign-in through an identity provider: its bearer tokens checked, the user's subject and groups.
- `quotas`: quotas and usage of API keys (requests per minute, LLM tokens per day).
- `errors`: the typed errors callers catch instead of tracebacks.
- `failures`: one classification of the product's errors into a stable `kind` and a message.
- `telemetry`: OpenTelemetry traces per answer and Prometheus metrics.

It imports `agent.config` and `tools/` only, never the interfaces (`agent.cli`, `agent.http`): checked by the layers
contract in pyproject.toml (`lint-imports`)."""
