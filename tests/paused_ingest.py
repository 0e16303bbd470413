"""`python -m tests.paused_ingest ARGS...` runs `rag ARGS...` (e.g. `ingest corpus.jsonl`) with a pause point the
test controls, so that a test interrupts or breaks an ingest at a known batch instead of racing it against the clock.

Before the store write of batch `RAG_TEST_PAUSE_BEFORE_BATCH` (1-based, counting only batches that have something to
write; earlier ones are stored as usual) the run creates the file `RAG_TEST_PAUSED_FILE` and waits, without blocking
its event loop, until it receives SIGUSR1; then it goes on. A test kills Triton or sends SIGINT while the run waits
there, and releases it (or not).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from agent.cli.main import app
from tools.records import DocumentRecord, Hashes, IngestCounts
from tools.scope import DEFAULT_COLLECTION
from tools.store import VectorStore

RELEASE_SIGNAL = signal.SIGUSR1


def install_gate(paused_file: Path, pause_before: int) -> None:
    """Wrap `VectorStore.add_documents` with the pause point described in the module docstring."""
    add_documents = VectorStore.add_documents
    writes = 0

    async def gated(
        self: VectorStore,
        docs: Sequence[DocumentRecord],
        unchanged: Hashes | None = None,
        *,
        collection: str = DEFAULT_COLLECTION,
    ) -> IngestCounts:
        nonlocal writes
        writes += 1 if docs else 0  # a batch of documents already stored writes nothing
        if docs and writes == pause_before:
            released = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(RELEASE_SIGNAL, released.set)
            await asyncio.to_thread(paused_file.write_text, f"paused before store write {writes}\n")
            await released.wait()
        return await add_documents(self, docs, unchanged, collection=collection)

    VectorStore.add_documents = gated  # type: ignore[method-assign]


if __name__ == "__main__":
    install_gate(Path(os.environ["RAG_TEST_PAUSED_FILE"]), int(os.environ["RAG_TEST_PAUSE_BEFORE_BATCH"]))
    app(prog_name="rag")
