"""The character encoding of a document file, in the order the WHATWG Encoding and HTML Standards give a browser.

- A byte order mark (UTF-8, UTF-16LE, UTF-16BE) decides first.
- HTML: then the page's own declaration, `<meta charset="...">` or `<meta http-equiv="Content-Type"
  content="...; charset=...">` near its start, with the WHATWG labels (`iso-8859-1`, `latin1` and `ascii` mean
  windows-1252); read by `w3lib.encoding.html_to_unicode`, Scrapy's implementation of these rules.
  A page that its declared encoding does not read is read with the detected one instead, with a WARNING.
- Then detection: valid UTF-8 is UTF-8; anything else is guessed by `chardet` (7.x: a maintained detector that also
  tells binary data, e.g. an image or random bytes, from text) from the first `DETECT_BYTES` bytes.

Text files (plain text, Markdown) follow the same order without the declaration. Bytes that no encoding reads as
text are refused (`ExtractError`) naming the file. JSON Lines stays UTF-8 only, as RFC 8259 requires.
"""

from __future__ import annotations

import codecs
import logging
import unicodedata
from pathlib import Path

import chardet
from w3lib.encoding import html_to_unicode, resolve_encoding

from tools.extract.base import ExtractError

log = logging.getLogger(__name__)

DETECT_BYTES = 64 * 1024
"""Bytes of a file that detection reads (a browser too decides on the first part of a page)."""
MAX_CONTROL_SHARE = 0.01
"""Most control characters (other than tab, line and page breaks) in text decoded by a detected encoding: more and
the bytes are binary data that happen to decode."""
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def bom_encoding(data: bytes) -> tuple[str, int] | None:
    """The encoding a leading byte order mark names and the mark's length in bytes; None without one."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding, len(bom)
    return None


def _is_utf8(data: bytes, final: bool) -> bool:
    """Whether `data` is UTF-8 (a character cut at the end allowed unless `final`)."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=final)
    except UnicodeDecodeError:
        return False
    return True


def _looks_like_text(text: str) -> bool:
    """Few control characters: what a detected encoding made of the bytes reads as text."""
    controls = sum(1 for ch in text if ch not in "\t\n\r\x0c" and unicodedata.category(ch) == "Cc")
    return controls <= MAX_CONTROL_SHARE * max(1, len(text))


def detect_encoding(data: bytes, final: bool = True) -> str | None:
    """The Python codec of `data` without a byte order mark or declaration: `utf-8` when it is valid UTF-8, else
    what `chardet` finds in its first `DETECT_BYTES` bytes when that decodes to text; None for binary data.

    Args:
        final: `data` is the whole file (False: a head, whose last character may be cut).
    """
    head = data[:DETECT_BYTES]
    if _is_utf8(head, final=final and len(data) <= DETECT_BYTES):
        return "utf-8"
    found = chardet.detect(head)
    label = found.get("encoding")
    if not label:  # binary data (chardet names its type, e.g. image/jpeg, and no encoding)
        return None
    encoding = resolve_encoding(label) or label
    try:
        sample = head.decode(encoding, errors="replace")
    except LookupError:  # a label Python has no codec for
        return None
    return encoding if _looks_like_text(sample) else None


def text_encoding(data: bytes, final: bool = True) -> str | None:
    """The Python codec a text file's bytes are read with: its byte order mark's, else `detect_encoding`'s; None
    for binary data."""
    bom = bom_encoding(data)
    return bom[0] if bom is not None else detect_encoding(data, final)


def decode_text(path: Path, data: bytes) -> str:
    """A text file's bytes as text (module docstring), a byte order mark dropped.

    Raises:
        ExtractError: bytes that no encoding reads as text (names the file).
    """
    bom = bom_encoding(data)
    if bom is not None:
        encoding, skipped = bom
        data = data[skipped:]
    else:
        found = detect_encoding(data)
        if found is None:
            raise ExtractError(
                f"{path}: not text: not UTF-8, and no other text encoding reads it (binary data?); expected a text file"
            )
        encoding = found
    # a detected encoding was checked on the first DETECT_BYTES; a stray byte further on becomes U+FFFD
    return data.decode(encoding, errors="replace")


def decode_html(data: bytes, where: str = "HTML page") -> str:
    """An HTML page's bytes as text: byte order mark, then `<meta charset>`, then detection (module docstring);
    windows-1252 (the WHATWG default for a page that says nothing) when detection finds nothing.

    A page its own encoding does not read (a Latin-1 page that declares UTF-8, as a server or an editor may leave it)
    is read with the detected encoding when that reads all of it, with a WARNING naming `where` and both encodings;
    otherwise the bytes no encoding reads become U+FFFD, with a WARNING saying so.
    """

    def detected(body: bytes) -> str | None:
        return detect_encoding(body)

    encoding, text = html_to_unicode(None, data, default_encoding="cp1252", auto_detect_fun=detected)
    if bom_encoding(data) is not None:  # a byte order mark decides (WHATWG), whatever follows it
        return text
    try:
        data.decode(encoding)
    except LookupError:  # a codec w3lib names that Python lacks: its own replacement decoding stands
        return text
    except UnicodeDecodeError as exc:
        bad = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
    else:
        return text
    found = detect_encoding(data)
    if found is not None and codecs.lookup(found).name != codecs.lookup(encoding).name:
        try:
            decoded = data.decode(found)
        except UnicodeDecodeError:
            pass
        else:
            log.warning(
                "%s: not %s as it declares (%s); read as %s, the encoding detected", where, encoding, bad, found
            )
            return decoded
    log.warning("%s: not %s (%s); the bytes it cannot read are stored as U+FFFD", where, encoding, bad)
    return text
