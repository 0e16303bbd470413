"""The embedder's tokenizer (Hugging Face `tokenizers`, from the model's `tokenizer.json`), shared by the Triton
client and the chunker so that chunk sizes are counted in the tokens the model sees."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from tools.model_specs import get_spec


@lru_cache(maxsize=4)
def load_tokenizer(model_name: str, path: Path | None = None) -> Tokenizer:
    """Tokenizer of embedding model `model_name`, without padding or truncation configured.

    Args:
        path: a `tokenizer.json` or the folder holding it; default: the file shipped in the model's package.

    Raises:
        ValueError: unknown model. FileNotFoundError: `path` has no tokenizer.json. LookupError /
            ModuleNotFoundError: no path given and the model ships in no installed package.
    """
    spec = get_spec(model_name)
    file = spec.tokenizer_file() if path is None else (path / "tokenizer.json" if path.is_dir() else path)
    if not file.is_file():
        raise FileNotFoundError(f"embedder tokenizer {file} not found; expected a Hugging Face tokenizer.json")
    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer
