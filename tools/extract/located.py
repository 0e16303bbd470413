"""Text edits that keep track of where each character came from, so that a cleaned page text stays aligned with the
boxes of the characters it was made of.

A located text is a string and, per character, the index of its source (a row of a box table; -1: no source, a
character the edits generated). Each edit is a regular-expression substitution applied exactly as `re.sub` applies
it, so the text that comes out is the one the plain string edits give (`tools.extract.pdf._clean`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

import numpy as np
import numpy.typing as npt

from tools.extract.base import BLANK_RUNS, TRAILING_SPACES

Sources = npt.NDArray[np.intp]
"""`(len(text),)` intp: per character, the row of its source in a box table; -1 where it has none."""

NO_SOURCE = -1


def substitute(
    text: str,
    sources: Sources,
    pattern: re.Pattern[str],
    replace: Callable[[str], str],
    how: Literal["tail", "spread"],
) -> tuple[str, Sources]:
    """`pattern.sub` over `text`, each match replaced by `replace(match)`, with the sources carried along.

    Args:
        how: where the replacement's characters come from. `"tail"`: the replacement is the match's last characters
            (a deletion, `"\\r\\n"` to `"\\n"`, trailing spaces dropped before a line break) and keeps their sources;
            `"spread"`: every character of the replacement takes the match's first character's source (a ligature
            turned into its letters).

    Raises:
        ValueError: `how` is `"tail"` and a replacement is not the end of its match.
    """
    texts: list[str] = []
    parts: list[Sources] = []
    last = 0
    for match in pattern.finditer(text):
        start, end = match.span()
        found = match.group()
        new = replace(found)
        texts.append(text[last:start])
        parts.append(sources[last:start])
        texts.append(new)
        if how == "tail":
            if not found.endswith(new):
                raise ValueError(f"{new!r} is not the end of {found!r}")
            parts.append(sources[end - len(new) : end])
        else:
            parts.append(np.full(len(new), sources[start], dtype=np.intp))
        last = end
    if last == 0 and not texts:
        return text, sources
    texts.append(text[last:])
    parts.append(sources[last:])
    return "".join(texts), np.concatenate(parts)


def strip(text: str, sources: Sources) -> tuple[str, Sources]:
    """`text.strip()` (Unicode whitespace at both ends) with its sources."""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if start >= end:
        return "", sources[:0]
    return text[start:end], sources[start:end]


def tidy(text: str, sources: Sources) -> tuple[str, Sources]:
    """`tools.extract.base.tidy` with sources: `\\r\\n`/`\\r` as `\\n`, trailing spaces of lines removed, runs of blank
    lines cut to one, stripped."""
    text, sources = substitute(text, sources, _CRLF, lambda _: "\n", "tail")
    text, sources = substitute(text, sources, _CR, lambda _: "\n", "spread")
    text, sources = substitute(text, sources, TRAILING_SPACES, lambda _: "\n", "tail")
    text, sources = substitute(text, sources, BLANK_RUNS, lambda _: "\n\n", "tail")
    return strip(text, sources)


_CRLF = re.compile("\r\n")
_CR = re.compile("\r")
