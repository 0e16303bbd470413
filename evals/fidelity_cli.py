"""`rag eval fidelity`: run the format-fidelity eval, print its table, write its results file."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from rich.console import Console

from agent.config.settings import Settings
from evals.fidelity import run_fidelity


def run_fidelity_command(claims: int, distractors: int, book_docs: int, output: Path) -> None:
    """Run `evals.fidelity.run_fidelity` on the configured stack in a temporary folder; print one line per format
    and the page check, and write the results JSON to `output`."""
    console = Console(stderr=True)
    settings = Settings()
    with tempfile.TemporaryDirectory(prefix="rag-fidelity-") as work:
        results = asyncio.run(
            run_fidelity(settings, Path(work), claims, distractors, book_docs, lambda m: console.print(m, markup=False))
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for name, row in results["formats"].items():
        delta = f", {row['delta_vs_jsonl']:+.4f} vs JSONL" if "delta_vs_jsonl" in row else ""
        print(f"{name}: nDCG@10 {row['ndcg@10']:.4f}{delta} ({row['documents']} documents, {row['chunks']} chunks)")
    page = results["page_check"]
    print(f"PDF pages: {page['page_correct']}/{page['located']} chunks cite the page their text is on")
    print(f"results written to {output}")
