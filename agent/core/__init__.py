"""The service's core: the Python API (`app.RagApp`), one answer (`answer`), the pydantic-ai agent and its tools
(`rag_agent`), the LLM client and its quirks (`llm`, `llm_finish`), prompts, citations, typed results, events and
errors, the document library, conversations, the context window, follow-up queries, admission control, the
classification of failures, API keys, telemetry, and the wiring of the parts (`wiring`).

It imports `agent.config` and `tools/` only, never the interfaces (`agent.cli`, `agent.http`): checked by the layers
contract in pyproject.toml (`lint-imports`)."""
