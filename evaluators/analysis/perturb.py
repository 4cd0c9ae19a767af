"""Perturbations of outputs for the robustness analysis (:mod:`.robustness`), and their cache.

- meaning-preserving: ``reorder_sentences`` and ``synonyms`` (rule-based; WordNet from an
  offline folder, e.g. Debian's ``wordnet-base``), ``paraphrase`` and ``style`` (LLM);
- degrading: ``truncate``, ``drop_sentences``, ``shuffle_words`` (rule-based), ``llm_errors``
  and ``llm_omit`` (LLM).

A perturbation that does not apply, an LLM reply that fails or cannot be read, or one that
returns the text unchanged is missing (None), never a made-up text.  Results are cached on disk
(:class:`PerturbationCache`, keyed by sha256 of output text, kind and generator), so a second
run makes no LLM call; only successful LLM perturbations are cached.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...collectors.files import data_path
from ...metricbank.errors import UserError
from ..llm.cache import KeyValueCache, digest
from ..llm.client import LLMCache, LLMClient, LLMConfig, estimate_tokens

__all__ = ["PERTURBATIONS", "Perturbation", "PerturbationCache", "Perturber", "Perturbed", "default_cache_path", "perturbation_sentences"]

log = logging.getLogger("autometrics")

#: bump when a rule or a prompt changes: cached perturbations of older versions are not reused
RULES_VERSION = 1
PROMPT_VERSION = 1


@dataclass(frozen=True)
class Perturbation:
    kind: str
    group: str  # "stability" (meaning-preserving) | "sensitivity" (degrading)
    method: str  # "rule" | "llm"
    description: str


PERTURBATIONS: dict[str, Perturbation] = {
    p.kind: p
    for p in (
        Perturbation("reorder_sentences", "stability", "rule", "the sentences in another (seeded random) order; needs 2+ sentences"),
        Perturbation("synonyms", "stability", "rule", "up to 20% of the words replaced by a WordNet synonym of their dominant sense"),
        Perturbation("paraphrase", "stability", "llm", "the LLM says the same in other words"),
        Perturbation("style", "stability", "llm", "the LLM changes the register/style, keeping every fact"),
        Perturbation("truncate", "sensitivity", "rule", "only the first half of the words kept"),
        Perturbation("drop_sentences", "sensitivity", "rule", "a third of the sentences (at least one) removed; needs 2+ sentences"),
        Perturbation("shuffle_words", "sensitivity", "rule", "the words in a random order"),
        Perturbation("llm_errors", "sensitivity", "llm", "the LLM introduces factual, logical or grammatical errors"),
        Perturbation("llm_omit", "sensitivity", "llm", "the LLM removes the key content, keeping minor details"),
    )
}

RULE_KINDS = [k for k, p in PERTURBATIONS.items() if p.method == "rule"]
LLM_KINDS = [k for k, p in PERTURBATIONS.items() if p.method == "llm"]

# Our own prompts.  They show the LLM only the output, so a cached perturbation depends on
# exactly (output, kind, generator).
_SYSTEM = "You edit texts exactly as instructed. Reply with the edited text only: no preamble, no quotes, no notes."
_PROMPTS = {
    "paraphrase": ("Paraphrase the text below: say exactly the same thing in different words. Keep every fact, name and "
                   "number, the same amount of detail and about the same length."),
    "style": ("Rewrite the text below in a noticeably different style (more formal if it is casual, plainer if it is "
              "formal) without changing what it says: keep every fact, name and number and all of its content."),
    "llm_errors": ("Rewrite the text below so that it becomes clearly worse: introduce two or three errors, such as a wrong "
                   "fact, name or number, a contradiction, or broken grammar. Keep the topic and about the same length."),
    "llm_omit": ("Rewrite the text below so that it becomes clearly worse by leaving out its most important content: "
                 "drop the main point and the key facts, keep only minor details."),
}

# small function-word list for the synonym rule (never replaced)
_STOP = set("""a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or other
our ours ourselves out over own same she should so some such than that the their theirs them themselves then there these
they this those through to too under until up very was we were what when where which while who whom why will with would
you your yours yourself yourselves also said says say one two three many much""".split())


def default_cache_path() -> Path:
    """``$AUTOMETRICS_PERTURBATION_CACHE``, else ``perturbations.sqlite`` in the data folder."""
    return data_path("perturbations.sqlite")


# ----------------------------------------------------------------------------------- cache


class PerturbationCache(KeyValueCache):
    """sha256(output, kind, generator) -> (status, perturbed text), in the project's SQLite
    key-value cache (:class:`~autometrics.evaluators.llm.cache.KeyValueCache`)."""

    table = "perturbation_entries"

    def __init__(self, path: str | Path | None = None):
        super().__init__(path or default_cache_path())

    @staticmethod
    def key(text: str, kind: str, generator: str) -> str:
        return digest([text, kind, generator])

    def get(self, key: str) -> tuple[str, str | None] | None:
        v = super().get(key)
        return (v[0], v[1]) if v else None

    def put(self, key: str, kind: str, generator: str, status: str, text: str | None) -> None:
        super().put(key, f"{kind}|{generator}", [status, text])


# ----------------------------------------------------------------------------- rule-based


def perturbation_sentences(text: str) -> list[str]:
    """The units a shuffle or drop perturbation moves: pieces that end at . ! or ? followed by
    whitespace (a plain rule: "Dr." splits too).  Not MetricBank's sentence splitter, which also
    breaks at newlines and wants a capital next: a perturbation must keep every character of the
    text, line breaks included, so it can only cut where the text has a space."""
    return [s for s in re.split(r"(?<=[.!?])\s+(?=\S)", text.strip()) if s]


def _rng(seed: int, kind: str, text: str) -> random.Random:
    """One generator per (seed, kind, text): a text gets the same perturbation in any order or batch."""
    return random.Random(hashlib.sha256(f"{seed}|{kind}|{text}".encode()).hexdigest())


def _derangement(items: list, rng: random.Random) -> list | None:
    """A random order different from the given one (None when every order is the same)."""
    if len(items) < 2 or len(set(items)) < 2:
        return None
    for _ in range(50):
        out = items[:]
        rng.shuffle(out)
        if out != items:
            return out
    return None


def _reorder_sentences(text: str, rng: random.Random, wordnet=None) -> str | None:
    sents = perturbation_sentences(text)
    order = _derangement(sents, rng)
    return " ".join(order) if order else None


def _drop_sentences(text: str, rng: random.Random, wordnet=None) -> str | None:
    sents = perturbation_sentences(text)
    if len(sents) < 2:
        return None
    k = max(1, len(sents) // 3)
    drop = set(rng.sample(range(len(sents)), k))
    return " ".join(s for i, s in enumerate(sents) if i not in drop)


def _truncate(text: str, rng: random.Random, wordnet=None) -> str | None:
    words = text.split()
    if len(words) < 2:
        return None
    return " ".join(words[: math.ceil(len(words) / 2)])


def _shuffle_words(text: str, rng: random.Random, wordnet=None) -> str | None:
    words = text.split()
    order = _derangement(words, rng) if len(words) >= 3 else None
    return " ".join(order) if order else None


_DOMINANT_SHARE = 0.8
_WORD = re.compile(r"^(\W*)([A-Za-z][A-Za-z'-]*[A-Za-z])(\W*)$")


def _synonym(word: str, wordnet) -> str | None:
    """The most frequent other single-word lemma of the word's dominant sense, by WordNet's
    sense-tagged frequency counts (``cntlist``; a count of 0 is never used).  Without POS
    tagging or sense disambiguation the sense is only trusted when it covers at least
    ``_DOMINANT_SHARE`` of the word's tagged occurrences (so "team" -> "squad" is made, "draw"
    -> "pull" is not).  Words that are an inflection of another lemma ("found" of "find") are
    skipped, so no wrong inflection is produced.  A replacement can still shift the meaning
    now and then."""
    lower = word.lower()
    for pos in ("n", "v", "a", "r"):
        if any(form != lower for form in wordnet._morphy(lower, pos)):
            return None
    senses = [(lemma.count(), syn) for syn in wordnet.synsets(lower) for lemma in syn.lemmas() if lemma.name() == lower]
    if not senses:
        return None
    count, syn = max(senses, key=lambda x: x[0])
    if count < 1 or count < _DOMINANT_SHARE * sum(c for c, _ in senses):
        return None
    alts = [(lemma.count(), lemma.name()) for lemma in syn.lemmas()
            if lemma.name() != lower and lemma.name().isalpha() and lemma.count() >= 1]
    return max(alts)[1] if alts else None


def _synonyms(text: str, rng: random.Random, wordnet=None) -> str | None:
    tokens = text.split()
    candidates = []
    for i, tok in enumerate(tokens):
        m = _WORD.match(tok)
        if not m or len(m.group(2)) < 4 or m.group(2).lower() in _STOP:
            continue
        alt = _synonym(m.group(2), wordnet)
        if alt:
            candidates.append((i, m, alt))
    if not candidates:
        return None
    k = max(1, min(len(candidates), round(0.2 * len(tokens))))
    for i, m, alt in rng.sample(candidates, k):
        word = m.group(2)
        if word.isupper() and len(word) > 1:
            alt = alt.upper()
        elif word[0].isupper():
            alt = alt[0].upper() + alt[1:]
        tokens[i] = m.group(1) + alt + m.group(3)
    return " ".join(tokens)


_RULES: dict[str, Callable] = {
    "reorder_sentences": _reorder_sentences,
    "synonyms": _synonyms,
    "truncate": _truncate,
    "drop_sentences": _drop_sentences,
    "shuffle_words": _shuffle_words,
}


# ----------------------------------------------------------------------------------- LLM


_PREAMBLE = re.compile(r"^\s*(?:here(?: is|'s)[^:\n]{0,60}:|(?:the )?(?:paraphrased|rewritten|edited|degraded|new|"
                       r"shortened)(?: version| text| output)?\s*:|paraphrase\s*:)\s*", re.I)


def _clean_reply(text: str | None) -> str | None:
    if text is None:
        return None
    t = _PREAMBLE.sub("", text.strip()).strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'“”":
        t = t[1:-1].strip()
    if len(t) >= 2 and t[0] == "“" and t[-1] == "”":
        t = t[1:-1].strip()
    return t or None


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


@dataclass
class Perturbed:
    text: str | None
    status: str  # ok | not_applicable | failed | unchanged


class Perturber:
    """Produces (and caches) perturbations of output texts.

    ``llm``: an :class:`~.llm.LLMClient`, an :class:`~.llm.LLMConfig` or a model string for the
    LLM kinds (None: LLM kinds are unavailable).  ``cache``: a :class:`PerturbationCache`, a
    path, ``"off"``/False, or None for the default path.  ``seed`` seeds the rule-based kinds.
    ``llm_cache``: the LLM reply cache for a model given by name or config (a path, ``"off"``,
    or None for the default)."""

    def __init__(self, llm=None, *, cache=None, seed: int = 0, llm_cache=None):
        if isinstance(llm, str):
            llm = LLMConfig.parse(llm)
        if isinstance(llm, LLMConfig):
            llm = LLMClient(llm, cache=False if llm_cache in ("off", False) else LLMCache(llm_cache))
        self.client = llm
        if cache is False or cache == "off":
            self.cache = None
        elif isinstance(cache, PerturbationCache):
            self.cache = cache
        else:
            self.cache = PerturbationCache(cache)
        self.seed = int(seed)
        self.counts: dict[str, Counter] = {}
        self.cache_hits = 0
        self.llm_requests = 0
        self._wordnet = None
        self._wordnet_checked = False

    # -------------------------------------------------------------------- availability
    def wordnet(self):
        if not self._wordnet_checked:
            self._wordnet_checked = True
            from ...metricbank.meteor import find_wordnet_dir, load_wordnet

            d = find_wordnet_dir()
            self._wordnet = load_wordnet(str(d)) if d else None
        return self._wordnet

    def unavailable_reason(self, kind: str) -> str | None:
        """Why ``kind`` cannot run here, or None."""
        if kind not in PERTURBATIONS:
            raise UserError(f"unknown perturbation {kind!r}; known: {', '.join(PERTURBATIONS)}")
        if PERTURBATIONS[kind].method == "llm" and self.client is None:
            return "needs an LLM (pass llm=... / --llm)"
        if kind == "synonyms" and self.wordnet() is None:
            from ...metricbank.meteor import INSTALL_HINT

            return f"no WordNet found: {INSTALL_HINT}"
        return None

    def generator(self, kind: str) -> str:
        if PERTURBATIONS[kind].method == "rule":
            extra = f":wordnet-{self.wordnet().get_version()}" if kind == "synonyms" else ""
            return f"rule:v{RULES_VERSION}:seed={self.seed}{extra}"
        cfg = self.client.config
        return f"llm:{cfg.cache_identity()}:prompt-v{PROMPT_VERSION}:t={cfg.temperature}"

    # ----------------------------------------------------------------------- perturb
    def perturb(self, texts: Sequence[str], kind: str) -> list[Perturbed]:
        """One :class:`Perturbed` per text (same order)."""
        reason = self.unavailable_reason(kind)
        if reason:
            raise RuntimeError(f"perturbation {kind!r} unavailable: {reason}")
        gen = self.generator(kind)
        texts = ["" if t is None else str(t) for t in texts]
        results: dict[str, Perturbed] = {}
        todo: list[str] = []
        for t in dict.fromkeys(texts):
            hit = self.cache.get(PerturbationCache.key(t, kind, gen)) if self.cache is not None else None
            if hit is not None:
                self.cache_hits += 1
                results[t] = Perturbed(hit[1], hit[0])
            else:
                todo.append(t)
        if PERTURBATIONS[kind].method == "rule":
            for t in todo:
                out = _RULES[kind](t, _rng(self.seed, kind, t), self._wordnet)
                p = Perturbed(None, "not_applicable") if out is None else (
                    Perturbed(None, "unchanged") if _same(out, t) else Perturbed(out, "ok"))
                results[t] = p
                if self.cache is not None:  # deterministic: every outcome is worth keeping
                    self.cache.put(PerturbationCache.key(t, kind, gen), kind, gen, p.status, p.text)
        elif todo:
            for t, p in zip(todo, self._llm(todo, kind), strict=True):
                results[t] = p
                if self.cache is not None and p.status in ("ok", "unchanged", "not_applicable"):
                    self.cache.put(PerturbationCache.key(t, kind, gen), kind, gen, p.status, p.text)
        out = [results[t] for t in texts]
        self.counts.setdefault(kind, Counter()).update(p.status for p in out)
        return out

    def _llm(self, texts: list[str], kind: str) -> list[Perturbed]:
        out: list[Perturbed | None] = [None] * len(texts)
        reqs, where = [], []
        for i, t in enumerate(texts):
            if not t.strip():
                out[i] = Perturbed(None, "not_applicable")
                continue
            reqs.append({"messages": [{"role": "system", "content": _SYSTEM},
                                      {"role": "user", "content": f"{_PROMPTS[kind]}\n\nText:\n{t}"}],
                         "max_tokens": min(4096, 2 * estimate_tokens(t) + 64)})
            where.append(i)
        self.llm_requests += len(reqs)
        for i, r in zip(where, self.client.chat_many(reqs, stage=f"robustness:{kind}"), strict=True):
            text = _clean_reply(r.text) if r.ok and not r.truncated else None
            if text is None:
                self.client.usage.add(f"robustness:{kind}", parse_failures=0 if not r.ok else 1)
                out[i] = Perturbed(None, "failed")
            elif _same(text, texts[i]):
                out[i] = Perturbed(None, "unchanged")
            else:
                out[i] = Perturbed(text, "ok")
        return out  # type: ignore[return-value]
