"""A follow-up set built from SciFact claims by rule (reproducible, no LLM): each claim becomes a two-turn
conversation whose second turn names its subject only through a pronoun.

The rule (`follow_up_pair`): the claim's subject is the words before its first main verb (a fixed list, `VERBS`);
the first turn asks about the subject ("What is known about APOE4 expression in iPSC-derived neurons?"), the second
turn is the claim with the subject replaced by a pronoun ("It increases AlphaBeta production and tau
phosphorylation..."): `it` after a singular verb (`is`, `has`, `increases`), `they` after a plural one (`are`,
`have`, `increase`), `this` after a verb that does not tell (`can`, `had`, `was`). A claim is skipped when no listed
verb follows at least one subject word, when the subject is longer than `MAX_SUBJECT_WORDS` words, or when it
already starts with a pronoun. The second turn's qrels are the claim's, so the original claim is the reference: a
perfect rewrite would search with it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from evals.scifact import Query

MAX_SUBJECT_WORDS = 8
"""Longest subject taken, words: a longer one is a clause the verb list cut in the wrong place."""

ACTIONS = (
    "increase", "decrease", "reduce", "cause", "improve", "inhibit", "induce", "promote", "prevent", "lead", "result",
    "affect", "regulate", "require", "contribute", "correlate", "show", "play", "mediate", "enhance", "suppress",
    "activate", "protect", "impair", "predict", "lower", "raise", "bind", "form", "block", "drive", "confer",
    "modulate", "trigger",
)  # fmt: skip
"""Verbs of SciFact claims in their plural form (the singular adds -s or -es)."""

PLURAL = frozenset(("are", "have", "do", *ACTIONS))
"""Verbs that take a plural subject: the pronoun is `they`."""

SINGULAR = frozenset(("is", "has", "does", *(v + ("es" if v.endswith(("ss", "sh", "ch")) else "s") for v in ACTIONS)))
"""Verbs that take a singular subject: the pronoun is `it`."""

UNMARKED = frozenset(("was", "were", "had", "did", "can", "could", "may", "might", "will", "would", "cannot"))
"""Verbs that do not tell the subject's number (or, `was`/`were`, whose subject is often a clause): `this`."""

VERBS = SINGULAR | PLURAL | UNMARKED
PRONOUNS = frozenset(("it", "its", "this", "these", "they", "their", "them", "he", "she", "we"))

FIRST_TURN = "What is known about {subject}?"
"""The first turn of every conversation."""


@dataclass(frozen=True)
class FollowUpPair:
    """One two-turn conversation made from a claim.

    Attributes:
        pair_id: the claim's query id (its qrels are the pair's).
        first: the first turn, asking about the subject.
        second: the follow-up: the claim with its subject replaced by `pronoun`.
        claim: the original claim (the reference query).
        subject: the subject the pronoun stands for.
        pronoun: `it`, `they` or `this`.
    """

    pair_id: str
    first: str
    second: str
    claim: str
    subject: str
    pronoun: str


_TOKEN = re.compile(r"\S+")


def _bare(word: str) -> str:
    return word.lower().strip(",.;:()[]\"'")


def follow_up_pair(query: Query) -> FollowUpPair | None:
    """The pair of one claim (module docstring), or None when the rule does not apply to it."""
    words = _TOKEN.findall(query.text.strip())
    for i, word in enumerate(words):
        verb = _bare(word)
        if verb not in VERBS or word != word.lower():
            continue
        if i == 0 or i > MAX_SUBJECT_WORDS or i == len(words) - 1:
            return None
        subject_words = words[:i]
        if _bare(subject_words[0]) in PRONOUNS or subject_words[-1].endswith(","):
            return None
        pronoun = "it" if verb in SINGULAR else "they" if verb in PLURAL else "this"
        subject = " ".join(subject_words)
        second = " ".join([pronoun.capitalize(), *words[i:]])
        first = FIRST_TURN.format(subject=subject[0].lower() + subject[1:] if _lower_first(subject) else subject)
        return FollowUpPair(query.query_id, first, second, query.text, subject, pronoun)
    return None


def _lower_first(subject: str) -> bool:
    """Whether the subject's first word is an ordinary capitalised word ("Activation"), not an acronym or a name
    with more capitals ("ALDH1", "AIRE", "H. pylori" keeps its case either way)."""
    first = subject.split()[0]
    return first[:1].isupper() and (first[1:].islower() or len(first) == 1)


def follow_up_pairs(queries: Iterable[Query], limit: int | None = None) -> list[FollowUpPair]:
    """The pairs of `queries` in their order, skipping claims the rule does not apply to; the first `limit` of them
    (None: all).

    Raises:
        ValueError: limit < 1.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit={limit}; expected >= 1")
    pairs = [pair for pair in map(follow_up_pair, queries) if pair is not None]
    return pairs[:limit]


def corpus_sample(doc_ids: Sequence[str], gold: Iterable[str], size: int | None) -> list[str]:
    """The documents a run searches: every gold document, then the other documents in a fixed order (sorted by a
    hash of the id, so the sample does not depend on the file order) until `size` (None: all documents).

    Raises:
        ValueError: size < 1.
    """
    if size is not None and size < 1:
        raise ValueError(f"size={size}; expected >= 1")
    wanted = dict.fromkeys(d for d in gold if d in set(doc_ids))
    rest = sorted((d for d in doc_ids if d not in wanted), key=_stable_hash)
    chosen = [*wanted, *rest]
    return chosen if size is None else chosen[: max(size, len(wanted))]


def _stable_hash(doc_id: str) -> str:
    return hashlib.sha256(doc_id.encode()).hexdigest()
