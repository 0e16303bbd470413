"""The support check's labels in the terminal (`rag ask`, `rag chat`): the answer with unsupported sentences marked,
and one line per sentence with its label and the passage sentence it rests on. Model and document text is plain text
(never parsed as Rich markup)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from agent.core.results import AskResult, SentenceSupport

STYLES = {"SUPPORT": "", "CONTRADICT": "red", "NOT_ENOUGH_INFO": "yellow"}
"""Rich style of a sentence per label."""

TAGS = {"SUPPORT": "", "CONTRADICT": " ⟨contradicted⟩", "NOT_ENOUGH_INFO": " ⟨unsupported⟩"}
"""What follows an unsupported sentence in the marked answer."""


def marked_answer(result: AskResult) -> Text:
    """`result.answer` with each sentence the check did not find supported styled and tagged (`⟨unsupported⟩`,
    `⟨contradicted⟩`); the answer as it is when there is no support report."""
    report = result.support
    if report is None or not report.sentences:
        return Text(result.answer)
    text = Text()
    at = 0
    for sentence in report.sentences:
        start, end = sentence.span
        text.append(result.answer[at:start])
        style = "italic" if sentence.quote else STYLES[sentence.label]
        text.append(result.answer[start:end], style=style)
        if not sentence.quote:
            text.append(TAGS[sentence.label], style=style or None)
        at = end
    text.append(result.answer[at:])
    return text


def support_line(sentence: SentenceSupport) -> Text:
    """One sentence's line: number, label, probability, and the evidence sentence with its passage number."""
    label = "QUOTE" if sentence.quote else sentence.label
    head = Text(f"  s{sentence.index + 1} {label} {sentence.score:.2f}", style=STYLES[sentence.label] or "green")
    evidence = sentence.evidence
    if evidence is None:
        return head + Text(" (no passage sentence)", style="dim")
    quoted = evidence.text if len(evidence.text) <= 120 else evidence.text[:117] + "..."
    repointed = " (re-pointed)" if sentence.repointed else ""
    closest = " closest:" if sentence.label == "NOT_ENOUGH_INFO" and not sentence.quote else ""
    return head + Text(f" ←{closest} passage [{evidence.passage}]{repointed} “{quoted}”", style="dim")


def print_support(console: Console, result: AskResult) -> None:
    """The `Support` section: a summary line, then one line per sentence (`support_line`); nothing without a
    report."""
    report = result.support
    if report is None:
        return
    total = report.supported + report.unsupported
    parts = [f"{report.supported} of {total} sentences supported"]
    if report.repeated:
        parts.append(f"{report.repeated} repeated collapsed")
    if report.repointed:
        parts.append(f"{report.repointed} citations re-pointed")
    if report.removed:
        parts.append(f"{report.removed} removed (strict)")
    if report.extractive:
        parts.append("no sentence supported: the answer quotes the documents")
    console.print(Text("\nSupport", style="bold"), Text(f"({report.mode}): " + "; ".join(parts)), soft_wrap=True)
    for sentence in report.sentences:
        console.print(support_line(sentence), highlight=False, soft_wrap=True)
