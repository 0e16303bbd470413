"""Which language a short text is in, and its content tokens in any script.

- `detect`: the ISO 639-1 code of a text's language by `py3langid` (a maintained fork of langid.py, Lui and Baldwin,
  "langid.py: An Off-the-shelf Language Identification Tool", ACL 2012; its model ships in the wheel, 97 languages,
  nothing downloaded; told apart among `LANGUAGES`), or None for a text too short or too mixed to tell (normalised
  probability below `MIN_PROBABILITY`).
- `content_tokens`: the words of three letters or digits or more of scripts that separate words with spaces
  (Unicode letters and digits, lowercased: `b12` is a word), and the character bigrams of runs of Han, kana and
  Hangul, which do not (a run of one character is its own token): the units a follow-up and its rewrite can share
  whatever the language.
"""

from __future__ import annotations

import functools
import re
from typing import Any

MIN_PROBABILITY = 0.6
"""A language is named only when langid's normalised probability (among `LANGUAGES`) reaches this."""
LANGUAGES = (
    "ar", "cs", "da", "de", "el", "en", "es", "fa", "fi", "fr", "he", "hi", "hu", "id", "it", "ja", "ko", "nl", "no",
    "pl", "pt", "ro", "ru", "sv", "th", "tr", "uk", "vi", "zh",
)  # fmt: skip
"""The languages told apart: the most written ones of langid's 97 (regional varieties and close relatives such as
Luxembourgish or Wu Chinese split the probability of a short text between them and its main language)."""
MIN_LETTERS = 8
"""A text with fewer letters is too short to tell its language."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(rf"[^\W_{_CJK}]{{3,}}")


@functools.cache
def _identifier() -> Any:
    """langid's identifier over `LANGUAGES` with normalised probabilities (loaded once, ~0.5 s)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(LANGUAGES))
    return identifier


def detect(text: str) -> str | None:
    """The ISO 639-1 code of `text`'s language (`en`, `de`, `zh`, `ja`, `ar`, ...), or None when it has fewer than
    `MIN_LETTERS` letters or no language reaches `MIN_PROBABILITY`."""
    if sum(ch.isalpha() for ch in text) < MIN_LETTERS:
        return None
    language, probability = _identifier().classify(text)
    return str(language) if float(probability) >= MIN_PROBABILITY else None


def content_tokens(text: str) -> set[str]:
    """Lowercased words of three letters or digits or more and CJK character bigrams of `text` (module docstring)."""
    lowered = text.lower()
    tokens = set(_WORD.findall(lowered))
    for run in _CJK_RUN.findall(lowered):
        tokens.update([run] if len(run) == 1 else (run[i : i + 2] for i in range(len(run) - 1)))
    return tokens


TEXT_SEARCH_CONFIGS = {
    "ar": "arabic", "ca": "catalan", "da": "danish", "de": "german", "el": "greek", "en": "english",
    "es": "spanish", "eu": "basque", "fi": "finnish", "fr": "french", "ga": "irish", "hi": "hindi",
    "hu": "hungarian", "hy": "armenian", "id": "indonesian", "it": "italian", "lt": "lithuanian", "ne": "nepali",
    "nl": "dutch", "no": "norwegian", "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian",
    "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}  # fmt: skip
"""ISO 639-1 code -> the Postgres text search configuration (snowball stemmer and stop words) shipped for it
(Postgres 16-18, `\\dF`). Other languages, Chinese, Japanese and Korean among them, are indexed with `simple` (no
stemming), their CJK runs as character bigrams (`cjk_bigrams` in the store's schema)."""

DEFAULT_CONFIG = "english"
"""The configuration of a document whose language is not known (as every document had before languages)."""


def text_search_config(language: str | None) -> str:
    """The Postgres text search configuration of a document or query in `language` (ISO 639-1): its own where
    Postgres ships one (`TEXT_SEARCH_CONFIGS`), `simple` for another language, `DEFAULT_CONFIG` for None."""
    if language is None:
        return DEFAULT_CONFIG
    return TEXT_SEARCH_CONFIGS.get(language, "simple")


def document_language(text: str, sample_chars: int = 4000) -> str | None:
    """The language of a document (`detect` of its first `sample_chars` characters), or None."""
    return detect(text[:sample_chars])


def query_configs(query: str) -> list[str]:
    """The text search configurations a query is analysed with: `DEFAULT_CONFIG` (documents of no known
    language), its own language's (`detect`), and `simple` when it holds CJK characters (documents in Chinese or
    Japanese are indexed with it); distinct, in that order."""
    configs = [DEFAULT_CONFIG, text_search_config(detect(query))]
    if cjk_chars(query):
        configs.append("simple")
    return list(dict.fromkeys(configs))


def cjk_chars(text: str) -> int:
    """How many characters of `text` are Han, kana or Hangul (about one embedder token each, where a Latin-script
    word of four or five characters is one)."""
    return sum(len(run) for run in _CJK_RUN.findall(text))
