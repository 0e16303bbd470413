"""The interfaces against the real Triton and Postgres with the fake OpenAI server as the LLM: the document lifecycle
(CLI, Python API, HTTP), `--json` output that scripts can parse, plain-text output of bracketed text, one-line CLI
errors, the web page's API-key prompt. The HTTP error shape, status codes and the API key: test_http_contract.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import asyncpg
import httpx
import pytest
from pydantic import SecretStr

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.http import create_app
from tests.conftest import cli_env
from tests.fake_openai import VLLM_NO_TOOLS_ERROR, FakeOpenAIServer, Reply, ThreadedServer
from tools.store import VectorStore

pytestmark = pytest.mark.stack

TITLE = "Scratch space under [/tmp] and [/var]"
TEXT = (
    "Scratch space for temporary files on the cluster nodes lives under /tmp and /var/tmp. It is wiped whenever a "
    "node reboots, so jobs must copy their results to the shared file system before they finish."
)
QUESTION = "Where does the scratch space for temporary files live on the cluster nodes?"
CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
ANSWER = "Scratch space [/INST] lives under [bold]/tmp[/] and /var/tmp [1]."


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture(scope="module")
def fake_settings(settings: Settings, fake_llm: FakeOpenAIServer, ingested: str) -> Settings:
    """The test stack's Triton and Postgres (SciFact subset ingested) with the fake LLM."""
    update = {"llm_base_url": fake_llm.base_url, "vllm_port": fake_llm.port, "llm_model": "fake", "llm_max_retries": 0}
    return settings.model_copy(update=update)


def rag(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        env=cli_env(settings) | {"LLM_MODEL": settings.llm_model, "LLM_MAX_RETRIES": "0"} | env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr


async def cited_doc_ids(settings: Settings, question: str) -> set[str]:
    async with RagApp.from_settings(settings) as app:
        return {p.doc_id for p in (await app.search(question, top_k=5)).passages}


async def test_cli_document_lifecycle_with_json_output_and_bracketed_text(
    fake_settings: Settings, fake_llm: FakeOpenAIServer, tmp_path: Path, store: VectorStore
) -> None:
    corpus = tmp_path / "scratch.jsonl"
    corpus.write_text(json.dumps({"_id": "scratch-doc", "title": TITLE, "text": TEXT}) + "\n")
    try:
        added = rag(fake_settings, "ingest", "--json", str(corpus))
        assert added.returncode == 0, added.stderr
        counts = json.loads(added.stdout)
        assert counts["added"] == 1 and counts["chunks"] >= 1 and counts["stored_documents"] >= 1

        listed = rag(fake_settings, "docs", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        docs = {d["doc_id"]: d for d in json.loads(listed.stdout)}
        doc = docs["scratch-doc"]
        assert doc["title"] == TITLE and doc["source"] == str(corpus) and doc["chunks"] == counts["chunks"]
        assert len(doc["content_hash"]) == 64 and datetime.fromisoformat(doc["ingested_at"])

        fake_llm.reset()
        fake_llm.state.default = Reply(text=ANSWER)
        plain = rag(fake_settings, "ask", QUESTION)
        assert plain.returncode == 0, plain.stderr
        assert "MarkupError" not in plain.stderr
        assert TITLE in plain.stdout and "Scratch space [/INST] lives under [bold]/tmp[/]" in plain.stdout
        as_json = rag(fake_settings, "ask", "--json", QUESTION)
        assert as_json.returncode == 0, as_json.stderr
        payload = json.loads(as_json.stdout)
        assert [c["title"] for c in payload["citations"]] == [TITLE]

        status = rag(fake_settings, "status", "--json")  # vLLM is not running here: exit 1, JSON all the same
        assert set(json.loads(status.stdout)) == {"postgres", "triton", "vllm"}

        deleted = rag(fake_settings, "docs", "delete", "--json", "scratch-doc")
        assert deleted.returncode == 0, deleted.stderr
        assert json.loads(deleted.stdout) == {"deleted": ["scratch-doc"], "not_found": []}
        again = rag(fake_settings, "docs", "delete", "scratch-doc")
        assert again.returncode == 1 and "not stored: scratch-doc" in again.stderr
        listed_after = json.loads(rag(fake_settings, "docs", "list", "--json").stdout)
        assert "scratch-doc" not in {d["doc_id"] for d in listed_after}
        assert "scratch-doc" not in await cited_doc_ids(fake_settings, QUESTION)
        after = json.loads(rag(fake_settings, "ask", "--json", QUESTION).stdout)
        # the one relevant document is gone: the answer refuses, or cites only other documents
        assert after["refused"] or after["citations"]
        assert all(c["doc_id"] != "scratch-doc" for c in after["citations"])
    finally:
        async with RagApp.from_settings(fake_settings) as app:
            await app.delete_documents(["scratch-doc"])


async def test_vector_extension_in_another_schema_is_one_line(fake_settings: Settings, postgres_url: str) -> None:
    admin = await asyncpg.connect(postgres_url)
    try:
        await admin.execute("DROP DATABASE IF EXISTS ext_schema")
        await admin.execute("CREATE DATABASE ext_schema")
    finally:
        await admin.close()
    other_url = postgres_url.replace("/postgres?", "/ext_schema?")
    assert other_url != postgres_url
    conn = await asyncpg.connect(other_url)
    try:
        await conn.execute("CREATE SCHEMA ext; CREATE EXTENSION vector SCHEMA ext")
    finally:
        await conn.close()
    result = rag(fake_settings, "docs", "list", DATABASE_URL=other_url)
    assert_one_line_error(result, "extension is in schema 'ext'")
    assert "search_path" in result.stderr


def test_agentic_eval_against_a_server_without_tool_calling_is_one_line(
    fake_settings: Settings, fake_llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_llm.reset()
    fake_llm.state.default = Reply(status=400, body=VLLM_NO_TOOLS_ERROR)
    try:
        result = rag(
            fake_settings, "eval", "answers", "--limit", "1", "--out", str(tmp_path / "run"), AGENT_POLICY="agentic"
        )
    finally:
        fake_llm.state.default = Reply(text="The passages say so [1].")
    assert_one_line_error(result, "--enable-auto-tool-choice")


@pytest.fixture(scope="module")
def http_app(fake_settings: Settings) -> Iterator[ThreadedServer]:
    with ThreadedServer(create_app(fake_settings.model_copy(update={"answer_timeout_s": 2.0}))) as server:
        yield server


async def test_http_document_lifecycle(
    http_app: ThreadedServer, fake_llm: FakeOpenAIServer, fake_settings: Settings
) -> None:
    url = http_app.url
    doc = {"doc_id": "http-scratch", "title": TITLE, "text": TEXT, "metadata": {"team": "hpc"}}
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        try:
            bad = await client.post("/v1/documents", json={"documents": [doc | {"text": "nul \u0000 here"}]})
            assert bad.status_code == 422 and "NUL" in bad.json()["detail"]
            added = await client.post("/v1/documents", json={"documents": [doc]})
            assert added.status_code == 201, added.text
            assert added.json()["added"] == 1 and added.json()["chunks"] >= 1
            again = await client.post("/v1/documents", json={"documents": [doc]})
            assert again.json() == {"added": 0, "skipped": 1, "chunks": 0}
            listed = (await client.get("/v1/documents", params={"limit": 10_000})).json()["documents"]
            stored = next(d for d in listed if d["doc_id"] == "http-scratch")
            assert stored["title"] == TITLE and stored["source"] == "http" and stored["chunks"] >= 1
            fake_llm.reset()
            fake_llm.state.default = Reply(text=ANSWER)
            answer = (await client.post("/v1/ask", json={"question": QUESTION})).json()
            assert [c["doc_id"] for c in answer["citations"]] == ["http-scratch"]

            deleted = await client.delete("/v1/documents/http-scratch")
            assert deleted.status_code == 200 and deleted.json() == {"deleted": ["http-scratch"]}
            gone = await client.delete("/v1/documents/http-scratch")
            assert gone.status_code == 404 and gone.json()["error"] == "document_not_found"
            answer = (await client.post("/v1/ask", json={"question": QUESTION})).json()
            assert answer["refused"] or answer["citations"]  # the relevant document is gone
            assert all(c["doc_id"] != "http-scratch" for c in answer["citations"])
            assert "http-scratch" not in await cited_doc_ids(fake_settings, QUESTION)
        finally:
            fake_llm.state.default = Reply(text="The passages say so [1].")
            await client.delete("/v1/documents/http-scratch")


async def test_web_page_asks_for_the_api_key_once(fake_settings: Settings, fake_llm: FakeOpenAIServer) -> None:
    from playwright.async_api import async_playwright, expect

    from tests.chromium import CHROMIUM, CHROMIUM_ARGS

    keyed = fake_settings.model_copy(update={"api_key": SecretStr("page-key")})
    fake_llm.reset()
    fake_llm.state.default = Reply(text="Yes, the passage reports higher homocysteine [1].")
    try:
        with ThreadedServer(create_app(keyed)) as server:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                try:
                    page = await browser.new_page()
                    await page.goto(server.url + "/")
                    # its first reads were refused: the sign-in panel asks for the key, masked
                    panel = page.locator("dialog#sign-in")
                    await expect(panel).to_be_visible(timeout=120_000)
                    await expect(page.locator("#api-key")).to_have_attribute("type", "password")
                    await page.fill("#api-key", "page-key")
                    await page.click("#sign-in-submit")
                    await expect(panel).to_be_hidden(timeout=120_000)
                    for n in range(2):
                        await page.fill("#question", CLAIM)
                        await page.press("#question", "Enter")
                        turn = page.locator(".turn").nth(n)
                        await expect(turn.locator(".turn-actions")).to_be_visible(timeout=120_000)
                        await expect(turn.locator(".answer")).to_contain_text("higher homocysteine")
                        await expect(panel).to_be_hidden()  # asked once: the second question needs no sign-in
                    stored = await page.evaluate("sessionStorage.getItem('triton-rag-api-key')")
                finally:
                    await browser.close()
    finally:
        fake_llm.state.default = Reply(text="The passages say so [1].")
    assert stored == "page-key"
