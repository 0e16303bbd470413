"""Language and content tokens of short texts (tools/language.py): py3langid's model on questions in several
languages and scripts, and tokens that two texts in a script without spaces can share. No server."""

from __future__ import annotations

import pytest

from tools.language import cjk_chars, content_tokens, detect


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Welche Nebenwirkungen hat Vitamin D bei älteren Menschen?", "de"),
        ("What are the side effects of vitamin D in older adults?", "en"),
        ("维生素D对老年人有什么副作用？", "zh"),
        ("ビタミンDの副作用は何ですか", "ja"),
        ("ما هي الآثار الجانبية لفيتامين د", "ar"),
    ],
)
def test_the_language_of_a_question_is_told(text: str, language: str) -> None:
    assert detect(text) == language


def test_a_text_too_short_or_unclear_has_no_language() -> None:
    assert detect("B12?") is None
    assert detect("vitamin D bone density") is None  # names and terms: no language clearly


def test_content_tokens_are_words_in_any_alphabet_and_cjk_bigrams() -> None:
    assert content_tokens("Die Knochendichte, ältere Menschen") == {"die", "knochendichte", "ältere", "menschen"}
    assert content_tokens("老年人") == {"老年", "年人"} and content_tokens("骨") == {"骨"}
    assert content_tokens("ビタミンD の副作用") >= {"ビタ", "副作", "作用"}
    assert cjk_chars("B12 老年人 ok") == 3
