"""Offline text helpers shared by the metrics: tokenisation, n-grams, sentence splitting.

Nothing here needs NLTK data or any download.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

_WORD_RE = re.compile(r"\w+(?:[-']\w+)*|[^\w\s]", re.UNICODE)
_SENT_RE = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def tokenize(text: str, *, lowercase: bool = True) -> list[str]:
    """Words and punctuation marks, e.g. ``"Don't stop!" -> ["don't", "stop", "!"]``."""
    if lowercase:
        text = text.lower()
    return _WORD_RE.findall(text)


def words(text: str, *, lowercase: bool = True) -> list[str]:
    """Like :func:`tokenize` without punctuation tokens."""
    return [t for t in tokenize(text, lowercase=lowercase) if t[0].isalnum() or t[0] == "_"]


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def ngram_counts(tokens: Sequence[str], n: int) -> Counter:
    return Counter(ngrams(tokens, n))


def split_sentences(text: str) -> list[str]:
    """Regex sentence splitter (no Punkt model needed): splits after . ! ? followed by a
    capital letter or digit, and on newlines."""
    out: list[str] = []
    for block in re.split(r"\n+", text):
        block = block.strip()
        if block:
            out.extend(s.strip() for s in _SENT_RE.split(block) if s.strip())
    return out
