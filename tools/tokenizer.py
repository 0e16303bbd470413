"""The embedder's tokenizer (Hugging Face `tokenizers`, from the model's `tokenizer.json`), shared by the Triton
client and the chunker so that chunk sizes are counted in the tokens the model sees."""

from __future__ import annotations

from functools import lru_cache

from tokenizers import Tokenizer

from tools.model_specs import get_spec


@lru_cache(maxsize=4)
def load_tokenizer(model_name: str) -> Tokenizer:
    """Tokenizer of embedding model `model_name`, without padding or truncation configured.

    Raises:
        ValueError: unknown model. LookupError / ModuleNotFoundError: its tokenizer file is not installed.
    """
    spec = get_spec(model_name)
    tokenizer = Tokenizer.from_file(str(spec.tokenizer_file()))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer
