"""`rag eval fidelity`: run the format-fidelity eval, print its table, write its results file."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from rich.console import Console

from agent.config.settings import Settings
from evals.fidelity import FORMATS, merge_results, run_fidelity


def run_fidelity_command(
    claims: int, distractors: int, book_docs: int, output: Path, formats: tuple[str, ...] = FORMATS
) -> None:
    """Run `evals.fidelity.run_fidelity` on the configured stack in a temporary folder; print one line per format
    and the page checks, and write the results JSON to `output`. A run of some `formats` only updates their rows of
    an existing `output` (`evals.fidelity.merge_results`)."""
    console = Console(stderr=True)
    settings = Settings()
    with tempfile.TemporaryDirectory(prefix="rag-fidelity-") as work:
        results = asyncio.run(
            run_fidelity(
                settings, Path(work), claims, distractors, book_docs, lambda m: console.print(m, markup=False), formats
            )
        )
    if set(formats) != set(FORMATS) and output.is_file():
        results = merge_results(json.loads(output.read_text(encoding="utf-8")), results)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for name, row in results["formats"].items():
        delta = f", {row['delta_vs_jsonl']:+.4f} vs JSONL" if "delta_vs_jsonl" in row else ""
        ocr = f", OCR {row['ocr_pages_per_s']} pages/s" if row.get("ocr_pages") else ""
        print(
            f"{name}: nDCG@10 {row['ndcg@10']:.4f}{delta} ({row['documents']} documents, {row['chunks']} chunks{ocr})"
        )
    for key, label in (("page_check", "PDF pages"), ("page_check_scanned", "scanned PDF pages (OCR)")):
        if key in results:
            page = results[key]
            print(f"{label}: {page['page_correct']}/{page['located']} chunks cite the page their text is on")
    print(f"results written to {output}")
