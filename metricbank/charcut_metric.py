"""CharCut (Lardilleux & Lepage, 2017): character-level edit cost between output and reference.

Scores come from the ``charcut`` package's building blocks (word-level match search, shift
detection, cost).  Three things are ours, all for speed, and the tests check pair by pair
that the costs equal the package's own ``compare_segments`` / ``calculate_charcut``:

* intra-word candidate matches are listed by hashing substrings instead of the package's
  prefix-refinement search (same set of matches and positions);
* the greedy match-consumption loop is one pass instead of re-filtering the whole list after
  every retained match (the package's O(M^2) loop; same retained matches);
* with several references only the ``max_refs`` most similar to the output by character-
  trigram Dice are scored, and texts are cut to ``max_chars`` characters (CharCut was built
  for sentence-length MT segments; its cost grows roughly quadratically with length).
"""

from __future__ import annotations

import re

import numpy as np

from .base import Metric, MetricUnavailable
from .errors import UserError
from .install import install_hint
from .registry import register

__all__ = ["CharCut", "charcut_cost"]

_INSTALL = install_hint("charcut")


def _module():
    try:
        from charcut import charcut as cc
    except ImportError as e:
        raise MetricUnavailable(f"CharCut needs the charcut package: {_INSTALL}") from e
    return cc


_WORD_CHARS_RE = re.compile(r"(\w+)", re.UNICODE)


def _windows(seq: str):
    """The package's intra-word search windows of ``seq``: ``(first start, end of starts, end)``
    for each "leading non-word run + word + trailing non-word run"; a match starts in the
    leading run or the word and ends inside the same window."""
    split = _WORD_CHARS_RE.split(seq)
    tokens = ["", split[0], ""] if len(split) == 1 else split
    starts = [0]
    for t in tokens:
        starts.append(starts[-1] + len(t))
    for i in range(0, len(tokens) - 2, 2):
        yield starts[i], starts[i + 2], starts[i + 3]


def _char_occurrences(seq: str, min_match_size: int) -> dict[str, list[int]]:
    """Every substring (length >= min_match_size) that the package's intra-word search can
    match, with its start positions in ``seq`` (~100 KB for a 300-character text)."""
    occ: dict[str, list[int]] = {}
    for first, last_start, end in _windows(seq):
        for p in range(first, last_start):
            for stop in range(p + min_match_size, end + 1):
                sub = seq[p:stop]
                if sub in occ:
                    occ[sub].append(p)
                else:
                    occ[sub] = [p]
    return occ


def _common_char_occurrences(seq: str, other: dict[str, list[int]], min_match_size: int) -> dict[str, list[int]]:
    """Like :func:`_char_occurrences`, restricted to substrings that are keys of ``other``.

    The keys of an occurrence table are prefix-closed (above the minimum length), so a
    substring can stop growing as soon as it is missing from ``other``."""
    occ: dict[str, list[int]] = {}
    for first, last_start, end in _windows(seq):
        for p in range(first, last_start):
            for stop in range(p + min_match_size, end + 1):
                sub = seq[p:stop]
                if sub not in other:
                    break
                if sub in occ:
                    occ[sub].append(p)
                else:
                    occ[sub] = [p]
    return occ


def _all_matches(cc, seq1: str, seq2: str, min_match_size: int, occ2: dict | None = None) -> list:
    """The package's candidate matches (word-based, then intra-word; the latter wins on equal
    strings), sorted by its ``order_key``.

    Word-based matches come from the package.  Intra-word matches are the common substrings
    of :func:`_char_occurrences`, which is what the package's prefix-refinement search
    enumerates, listed here by hashing instead (several times faster, same result).
    """
    dedup = {m[0]: m for m in cc.word_based_matches(seq1, seq2, min_match_size)}
    if seq1 and seq2:
        if occ2 is None:
            occ2 = _char_occurrences(seq2, min_match_size)
        for sub, pos1 in _common_char_occurrences(seq1, occ2, min_match_size).items():
            dedup[sub] = (sub, pos1, occ2[sub])
    return sorted(dedup.values(), key=cc.order_key)


def _greedy_matching(cc, seq1: str, seq2: str, min_match_size: int, occ2: dict | None = None):
    """Same output as ``charcut.greedy_matching``, in one pass over the sorted match list.

    The package keeps the list order fixed and only drops positions (or whole entries) that
    overlap characters already covered; since coverage only grows, filtering an entry when it
    reaches the head of the list gives the same result as filtering every entry after every
    retained match.
    """
    covered1 = bytearray(len(seq1))  # 1 = character already part of a retained match
    covered2 = bytearray(len(seq2))
    retained = []
    for substr, pos1, pos2 in _all_matches(cc, seq1, seq2, min_match_size, occ2):
        k = len(substr)
        while True:
            pos1 = [i for i in pos1 if covered1.find(1, i, i + k) < 0]
            if not pos1:
                break
            pos2 = [j for j in pos2 if covered2.find(1, j, j + k) < 0]
            if not pos2:
                break
            i, j = pos1[0], pos2[0]
            retained.append((i, j, substr))
            covered1[i : i + k] = b"\x01" * k
            covered2[j : j + k] = b"\x01" * k
    mask1 = [1 - c for c in covered1]
    mask2 = [1 - c for c in covered2]
    ops = list(retained)
    ops.extend((pos, -1, seq1[pos : pos + size]) for pos, size in cc.residual_diff(mask1))
    ops.extend((-1, pos, seq2[pos : pos + size]) for pos, size in cc.residual_diff(mask2))
    return ops


def charcut_cost(
    cand: str, ref: str, *, match_size: int = 3, alt_norm: bool = False, _ref_occurrences: dict | None = None
) -> tuple[int, int]:
    """``(bounded cost, normaliser)`` of one candidate/reference pair, as ``charcut.score_pair``.

    Texts are stripped like the package's file reader does; the score is ``cost / div`` (0 when
    both texts are empty).  ``_ref_occurrences`` lets a caller reuse the reference's
    ``_char_occurrences`` across candidates.
    """
    cc = _module()
    cand, ref = cand.strip(), ref.strip()
    base_ops = _greedy_matching(cc, cand, ref, match_size, _ref_occurrences)
    reg_matches = cc.find_regular_matches(base_ops)
    clean_ops = list(cc.merge_adjacent_diffs(list(cc.add_shift_distance(base_ops, reg_matches))))
    cand_ops = sorted(op for op in clean_ops if op[0] != -1)
    ref_ops = sorted((op for op in clean_ops if op[1] != -1), key=lambda op: op[1])
    styled_cand = list(cc.add_css_classes(cand_ops))
    styled_ref = list(cc.add_css_classes(ref_ops))
    return cc.score_pair(cand, ref, styled_cand, styled_ref, alt_norm)


def _trigrams(text: str) -> frozenset[str]:
    t = text.lower()
    return frozenset(t[i : i + 3] for i in range(len(t) - 2))


def _dice(a: frozenset, b: frozenset) -> float:
    """Dice overlap of two sets of character trigrams (a cheap proxy of CharCut's matching)."""
    total = len(a) + len(b)
    return 2.0 * len(a & b) / total if total else 0.0


@register
class CharCut(Metric):
    """Character-based edit cost (insertions + deletions + shifts over total length); 0 = identical."""

    name = "CharCut"
    version = "1"
    higher_is_better = False
    needs_reference = True
    needs_input = False
    description = "Character-level edit cost (insert/delete/shift of loose differences) vs the closest reference, 0-1, lower is better"

    MATCH_SIZE = 3
    ALT_NORM = False
    #: references scored exactly per example (the most similar by char-trigram Dice); None = all
    MAX_REFS = 1
    #: texts are cut to this many characters (cost grows ~quadratically: ~0.4 s per 1,000-char pair)
    MAX_CHARS = 1000
    signature_keys = {"match_size": "m", "alt_norm": "altnorm", "max_refs": "refs", "max_chars": "chars"}

    def __init__(
        self,
        *,
        match_size: int = MATCH_SIZE,
        alt_norm: bool = ALT_NORM,
        max_refs: int | str | None = MAX_REFS,
        max_chars: int = MAX_CHARS,
    ):
        if max_refs == "all":
            max_refs = None
        if match_size < 1:
            raise UserError("match_size must be >= 1")
        if max_refs is not None and max_refs < 1:
            raise UserError("max_refs must be >= 1 or 'all'")
        if max_chars < 1:
            raise UserError("max_chars must be >= 1")
        super().__init__(
            match_size=match_size,
            alt_norm=alt_norm,
            max_refs="all" if max_refs is None else max_refs,
            max_chars=max_chars,
        )
        self.match_size = match_size
        self.alt_norm = alt_norm
        self.max_refs = max_refs
        self.max_chars = max_chars

    def check_available(self) -> None:
        _module()

    def _select(self, out: str, refs: list[str], cache: dict) -> list[str]:
        if self.max_refs is None or len(refs) <= self.max_refs:
            return refs
        grams = _trigrams(out)
        sims = []
        for r in refs:
            if r not in cache:
                cache[r] = _trigrams(r)
            sims.append(_dice(grams, cache[r]))
        order = sorted(range(len(refs)), key=lambda i: (-sims[i], i))
        return [refs[i] for i in order[: self.max_refs]]

    def _compute(self, outputs, inputs, references):
        self.check_available()
        cap = self.max_chars
        gram_cache: dict[str, frozenset] = {}
        # (reference, row) pairs to score, grouped by reference so that a reference's
        # substring table is built once and only one table is alive at a time
        jobs: dict[str, list[int]] = {}
        cands = []
        for i, (out, refs) in enumerate(zip(outputs, references, strict=True)):
            out = out.strip()[:cap]
            cands.append(out)
            for ref in self._select(out, [r.strip()[:cap] for r in refs], gram_cache):
                jobs.setdefault(ref, []).append(i)
        scores = np.ones(len(outputs))
        for ref, rows in jobs.items():
            occ = _char_occurrences(ref, self.match_size)
            for i in rows:
                cost, div = charcut_cost(
                    cands[i], ref, match_size=self.match_size, alt_norm=self.alt_norm, _ref_occurrences=occ
                )
                scores[i] = min(scores[i], cost / div if div else 0.0)
        return scores
