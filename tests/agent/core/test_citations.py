"""Citation markers, reasoning and the streamed text, pure logic (no server): the table of model outputs below is
rendered both as a stream (every split of the output) and as the final answer, and the two must agree."""

from __future__ import annotations

import pytest

from agent.core.citations import extract_citations, render_answer, stream_text, strip_reasoning
from tools.records import ChunkHit
from tools.retrieval import Passage


def passage(n: int, doc: str) -> Passage:
    text = "Vitamin B12 deficiency raises plasma homocysteine in older adults."
    return Passage.of(n, ChunkHit(f"{doc}#0", doc, f"Title {n}", text, "test", 0.0), 1.0 / n, 0.9)


PASSAGES = [passage(1, "101"), passage(2, "202"), passage(3, "101")]

# (model output, final answer, cited passage numbers, dropped markers)
CASES: list[tuple[str, str, list[int], list[str]]] = [
    ("It does [1], per [2] and [42].", "It does [1], per [2] and.", [1, 2], ["[42]"]),
    ("The claim holds [doc 99999].", "The claim holds.", [], ["[doc 99999]"]),
    ("See (doc 4242), and [1].", "See, and [1].", [1], ["(doc 4242)"]),
    ("Results were fair [7] .", "Results were fair.", [], ["[7]"]),
    ("Yes [9], [8], [1].", "Yes, [1].", [1], ["[9]", "[8]"]),
    ("Supported [99],.", "Supported.", [], ["[99]"]),
    ("Both [doc 202] and [passage 1] agree.", "Both [2] and [1] agree.", [2, 1], []),
    ("As (doc 101) shows (see [99]).", "As [1] shows (see).", [1], ["[99]"]),
    ("Mixed [1, 9] refs [3; 2].", "Mixed [1] refs [3, 2].", [1, 3, 2], ["[1, 9]"]),
    ("<think>plan [3]</think>Answer [1] [5].", "Answer [1].", [1], ["[5]"]),
    ("I should check the passages.</think>Answer [2].", "Answer [2].", [2], []),
    ("Plain answer, no markers.", "Plain answer, no markers.", [], []),
    ("Ends with [doc 4242]", "Ends with", [], ["[doc 4242]"]),
    ("Odd ( [12] ) parens [Doc 101].", "Odd parens [1].", [1], ["[12]"]),
]


@pytest.mark.parametrize(("raw", "final", "cited", "dropped"), CASES)
def test_final_answer_keeps_only_retrieved_citations_and_clean_punctuation(
    raw: str, final: str, cited: list[int], dropped: list[str]
) -> None:
    text, citations, dropped_markers = extract_citations(raw, PASSAGES)
    assert text == final
    assert [c.passage for c in citations] == cited
    assert dropped_markers == dropped
    assert {c.chunk_id for c in citations} <= {p.chunk_id for p in PASSAGES}


def test_uncited_quote_is_attributed_to_the_passage_it_copies() -> None:
    other = Passage.of(2, ChunkHit("202#0", "202", "Title 2", "Unrelated text.", "test", 0.0), 0.5, 0.9)
    _, citations, dropped = extract_citations(
        "Studies show Vitamin B12 deficiency raises plasma homocysteine.", [passage(1, "101"), other]
    )
    assert [c.passage for c in citations] == [1] and dropped == []


def consume(pieces: list[str]) -> tuple[str, int]:
    """What a streaming consumer ends up showing (text since the last restart) and how many restarts it saw,
    given the model output in `pieces`, with the final flush `agent.core.rag_agent.answer` sends."""
    shown, restarts, output = "", 0, ""
    for piece in pieces:
        output += piece
        text = stream_text(output, PASSAGES)
        if not text.startswith(shown):
            restarts += 1
        shown = text
    final = render_answer(output, PASSAGES).text
    if not final.startswith(shown):
        restarts += 1
    return final, restarts


@pytest.mark.parametrize(("raw", "final", "cited", "dropped"), CASES)
@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 1000])
def test_concatenated_stream_equals_the_final_answer(
    raw: str, final: str, cited: list[int], dropped: list[str], size: int
) -> None:
    pieces = [raw[i : i + size] for i in range(0, len(raw), size)]
    shown, restarts = consume(pieces)
    assert shown == final
    # Only reasoning whose opening tag was in the prompt is withdrawn after being shown.
    opened_in_prompt = "</think>" in raw and "<think>" not in raw
    assert restarts == (1 if opened_in_prompt and size < raw.index("</think>") else 0)


def test_streamed_text_holds_back_unfinished_markers_and_tags() -> None:
    assert stream_text("Yes [1] and [4", PASSAGES) == "Yes [1] and"
    assert stream_text("Yes [1] and (do", PASSAGES) == "Yes [1] and"
    assert stream_text("Yes [1] and [doc 99", PASSAGES) == "Yes [1] and"
    assert stream_text("Yes [9] done <thi", PASSAGES) == "Yes done"
    assert stream_text("Reasoning so far </thi", PASSAGES) == "Reasoning so far"
    assert stream_text("(do you agree", PASSAGES) == "(do you agree"


def test_reasoning_never_reaches_the_answer() -> None:
    assert strip_reasoning("<think>secret plan [3]</think>The answer [1].") == "The answer [1]."
    assert strip_reasoning("Visible.<think>unterminated") == "Visible."
    assert strip_reasoning("template-opened reasoning\n</think>\n\nThe answer.") == "The answer."
    assert strip_reasoning("reasoning</think>A <think>more</think>B") == "A B"
