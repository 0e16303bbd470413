"""The HTTP API (FastAPI), served by `rag serve`: one `APIRouter` per area, assembled by `agent.http.app.create_app`.

- `ask` (`agent.http.ask`): `POST /v1/ask` `{"question": ..., "top_k": 5, "policy": "always"}` → the `AskResult`
  JSON of `rag ask --json`; `POST /v1/ask/stream` (same body) → Server-Sent Events: `queued` (while the answer
  waits for a slot), `text`, `restart`, `tool_call`, `tool_result` events (the `agent.core.events` models as JSON), then
  one `result` (the `AskResult`) or one `error` (an `ErrorBody`). Closing the stream cancels the answer. Admission
  control refuses an answer it cannot start within `ANSWER_QUEUE_DEADLINE_S` with 503 `overloaded` and a
  `Retry-After` from the measured service rate, before the response starts. With `"conversation_id"` the question
  follows a stored conversation (history and a condensed search query; the turn is stored); the response carries
  `conversation_id` (null without one).
- `conversations` (`agent.http.conversations`): `POST /v1/conversations` `{"title"?}` → 201 `{id, title, created_at,
  updated_at, turn_count}`; `GET /v1/conversations?limit=50&cursor=` → `{"conversations", "total", "next_cursor"}`
  (most recently updated first); `GET /v1/conversations/{id}` → the conversation and its `turns` (`n`, question,
  answer, citations, refused, created_at); `DELETE /v1/conversations/{id}` → `{"deleted": id}`; 404
  `conversation_not_found` for an unknown id or another API key's conversation (each belongs to the key that
  created it; the admin key sees all).
- `feedback` (`agent.http.feedback`): `POST /v1/feedback` `{"answer_id" | "response_id", "rating": "up" | "down",
  "comment"?, "right_source"?}` → the rating with what it rates; `POST /v1/chat/completions/{id}/feedback` (the same
  for an OpenAI completion); `GET /v1/feedback?rating=&since=&collection=&limit=` → `{"feedback": [...]}`;
  `GET /v1/feedback/counts?days=7`; `GET` / `DELETE /v1/feedback/{answer_id}`; 404 `answer_not_found` for an unknown
  id or another API key's answer.
- `documents` (`agent.http.documents`): `GET /v1/documents?limit=100&cursor=` → `{"documents": [{doc_id, title,
  source, chunks, content_hash, ingested_at}], "total", "next_cursor"}` (keyset pages by doc id);
  `DELETE /v1/documents/{doc_id}` → `{"deleted": [doc_id]}` (404 when not stored); `POST /v1/documents`
  `{"documents": [{doc_id, title, text, metadata, source}]}` → `{"added", "skipped", "chunks"}` (201).
- `service` (`agent.http.service`): `GET /health` → `{"ok": bool, "checks": {"triton" | "postgres" | "llm": {"ok",
  "detail", "ms"}}}`, 503 unless all pass; `/openapi.json`, `/docs`; `GET /` → the web chat page
  (`agent/http/web/index.html`). `GET /metrics` (Prometheus) is routed by `create_app`; the request guards
  (`agent.http.guards`) and the shutdown drain (`agent.http.shutdown`) are its middleware.
- `usage` (`agent.http.usage`): `GET /v1/usage?days=7` → `{"days", "since", "usage": [{key_id, key_name, day,
  requests, prompt_tokens, completion_tokens, total_tokens, embed_ms, llm_ms}], "totals"}`: a key holder's own key,
  the admin key's every key. A key over its quota (`agent.core.quotas`) gets 429 `quota_exceeded` with `Retry-After`
  from the quota gate (`agent.http.quota_gate`, middleware) before any work.
- `access` (`agent.http.access`): `GET` / `PUT /v1/access/grants`, `DELETE /v1/access/grants/{group}/{collection}`
  (the admin key only) and `PUT /v1/documents/{doc_id}/groups` (the admin key or the collection's admin role).
- `mcp` (`agent.http.mcp`): `/mcp`, the MCP server (`agent.http.mcp_server`: tools `search`, `get_document`, `ask`) over
  streamable HTTP, behind the API key like every other route; each tool call is scoped to the key of its HTTP
  request.
- `a2a` (`agent.http.a2a`): `POST /a2a`, the A2A (Agent2Agent 1.0, JSON-RPC) agent whose skill `answer` answers a
  question with citations (`agent.http.a2a_tasks`: each task through `RagApp.ask` as its caller, held to its key's
  quotas and admission control, refusals as rejected tasks); its agent card at `/.well-known/agent-card.json` and
  `/a2a/.well-known/agent-card.json`, readable without a key.

Routes get what they need through FastAPI dependencies (`agent.http.deps`: `Rag`, `AppSettings`, `Caller`: who holds
which key and so which collections a request may use);
tests swap the `RagApp` with `app.dependency_overrides[get_rag]`. A new area is a module with its own `APIRouter`,
included in `create_app`.

Errors (`agent.http.errors`): every error body is an `ErrorBody` `{"error": kind, "detail": message}` — request
validation included — with the status from `STATUS_OF_KIND` (the kinds of `agent.core.failures.describe`); a dependency
that is down or overloaded (Triton, Postgres, the LLM) answers 503 with `Retry-After`, a timeout 504. With `API_KEY`
set or API keys made (`rag keys`), every route except `/health`, `/metrics`, the page and the agent card needs
`Authorization: Bearer <key>` (401 with `WWW-Authenticate: Bearer` otherwise); a key of the table sees only its
collections (403 `forbidden_collection` for another one named).
"""

from agent.http.app import create_app

__all__ = ["create_app"]
