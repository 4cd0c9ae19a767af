"""METEOR (Banerjee & Lavie, 2005) through ``nltk.translate.meteor_score``, fully offline.

NLTK's METEOR matches words in three stages: exact, Porter stem, WordNet synonym.  The
synonym stage normally loads ``nltk.corpus.wordnet``, which needs ``nltk.download`` (not
possible here).  Instead we read a plain WordNet 3.0 database directory, e.g. the one the
Debian package ``wordnet-base`` installs at ``/usr/share/wordnet``, with NLTK's own
``WordNetCorpusReader``.  Three small adaptations make that reader work on such a folder:

* Debian does not ship the ``lexnames`` file (the 45 lexicographer-file names; the WordNet
  C library has them compiled in).  The reader requires it at start-up, so when the folder
  lacks it we serve the fixed WordNet 3.0 table below (from WordNet's ``lexnames(5WN)``).
* The reader's constructor maps synsets onto NLTK's downloaded "wordnet" corpus for the
  multilingual OMW data; we use no OMW, so that mapping is skipped (``map_wn`` -> None).
* NLTK >= 3.9 only opens corpora under ``nltk.data.path``; the folder is appended to it,
  which is the authorisation NLTK itself asks for.

``index.sense`` (also absent in Debian) is only needed by ``lemma_from_key``, never by METEOR.

Without any WordNet, METEOR runs with exact + stem matching only, and its signature says
``syn:none``: a different metric, never silently mixed with ``syn:wordnet`` scores.

Speed: NLTK rebuilds every hypothesis word's synonym set for every (hypothesis, reference)
pair, ~65 s on summeval (1,600 outputs x 11 references).  Stems are memoised, and the
reader NLTK receives is a per-reference stand-in that returns only the synonyms that occur
in that reference (others can never be matched): ~10 s, with identical scores.
"""

from __future__ import annotations

import io
import logging
import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import numpy as np

from . import _text
from .base import Metric, MetricUnavailable
from .errors import UserError
from .install import install_hint
from .notices import warn_once
from .registry import register

__all__ = ["METEOR", "find_wordnet_dir", "load_wordnet"]

log = logging.getLogger(__name__)

WORDNET_ENV = "AUTOMETRICS_WORDNET_DIR"
DEFAULT_WORDNET_DIR = "/usr/share/wordnet"
_REQUIRED_FILES = tuple(
    f"{kind}.{pos}" for kind in ("index", "data") for pos in ("noun", "verb", "adj", "adv")
) + tuple(f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv"))
INSTALL_HINT = (
    "install WordNet 3.0 with `sudo apt-get install wordnet-base` (Debian/Ubuntu) or point "
    f"{WORDNET_ENV} at a folder holding its index.*/data.*/*.exc files"
)

# WordNet 3.0 lexicographer files: number, name, syntactic category (1 noun, 2 verb,
# 3 adjective, 4 adverb), as listed in WordNet's lexnames(5WN) manual page.
_LEXNAMES_30 = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute "
    "noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group "
    "noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant "
    "noun.possession noun.process noun.quantity noun.relation noun.shape noun.state "
    "noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
    "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
    "verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
_POS_CODE = {"adj": 3, "adv": 4, "noun": 1, "verb": 2}


def _lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{_POS_CODE[name.split('.')[0]]}\n" for i, name in enumerate(_LEXNAMES_30))


def find_wordnet_dir() -> Path | None:
    """``$AUTOMETRICS_WORDNET_DIR`` if set, else ``/usr/share/wordnet``, if it holds a WordNet
    database (index.*, data.*, *.exc for the four parts of speech); otherwise None."""
    candidate = os.environ.get(WORDNET_ENV) or DEFAULT_WORDNET_DIR
    path = Path(candidate).expanduser()
    if all((path / f).is_file() for f in _REQUIRED_FILES):
        return path.resolve()
    if os.environ.get(WORDNET_ENV):
        warn_once(log, "%s=%s does not hold a WordNet database (missing index/data/exc files)", WORDNET_ENV, candidate)
    return None


@lru_cache(maxsize=4)
def load_wordnet(directory: str):
    """NLTK ``WordNetCorpusReader`` over a plain WordNet 3.0 folder (built once per process;
    takes ~2-4 s to index the lemmas)."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    root = Path(directory).resolve()
    if not any(str(p) == str(root) for p in nltk.data.path):
        nltk.data.path.append(str(root))  # NLTK's sandbox only opens files under nltk.data.path
    has_lexnames = (root / "lexnames").is_file()

    class _FolderWordNet(WordNetCorpusReader):
        """English WordNet read from a folder; no multilingual (OMW) data."""

        def open(self, file):
            if file == "lexnames" and not has_lexnames:
                return io.StringIO(_lexnames_text())
            return super().open(file)

        def map_wn(self, version="wordnet"):
            return None  # the OMW offset mapping needs NLTK's downloaded copy; unused here

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The multilingual functions are not available")
        reader = _FolderWordNet(str(root), None)
    version = reader.get_version()
    if version != "3.0":
        log.warning("WordNet at %s is version %s; METEOR's published settings assume 3.0", root, version)
    return reader


class _Lemma:
    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name


class _MergedSynset:
    """Several lemma names behind the two calls NLTK's METEOR makes on a synset
    (``lemmas()``, then ``name()`` on each lemma)."""

    __slots__ = ("_lemmas",)

    def __init__(self, names):
        self._lemmas = tuple(_Lemma(n) for n in names)

    def lemmas(self) -> tuple[_Lemma, ...]:
        return self._lemmas

    def lemma_names(self) -> list[str]:
        return [lemma.name() for lemma in self._lemmas]


_NO_SYNSETS: tuple = ()


class _SynonymIndex:
    """Single-word WordNet lemma names of every synset of a word, memoised per word.

    Multi-word lemmas ("motor_vehicle") are dropped: they can never equal a token, and
    NLTK's METEOR drops them as well."""

    def __init__(self, reader):
        self._reader = reader
        self.names = lru_cache(maxsize=200_000)(self._names)

    def _names(self, word: str) -> frozenset[str]:
        return frozenset(name for syn in self._reader.synsets(word) for name in syn.lemma_names() if "_" not in name)


@lru_cache(maxsize=4)
def _synonym_index(directory: str) -> _SynonymIndex:
    """One synonym index per WordNet folder and process."""
    return _SynonymIndex(load_wordnet(directory))


class _ReferenceSynonyms:
    """Stands in for the WordNet reader inside NLTK's METEOR, for one reference.

    The synonym stage only asks whether some synonym of a hypothesis word equals a still
    unmatched (stemmed) *reference* word, so synonyms outside the reference's vocabulary can never
    change the alignment.  ``synsets(word)`` therefore returns one pseudo-synset holding
    the word's synonyms that occur in this reference (memoised per word).  NLTK otherwise
    rebuilds each word's full synonym set from every synset and lemma for every pair,
    ~75% of METEOR's time on summeval.  Scores are identical to passing the real reader
    (tested)."""

    def __init__(self, index: _SynonymIndex, reference_tokens: list[str], stemmer):
        self._index = index
        # NLTK runs the synonym stage on the *stemmed* leftovers of the stem stage, so the
        # reference words it compares synonyms against are stems
        self._vocab = frozenset(stemmer.stem(t) for t in reference_tokens)
        self._cache: dict[str, tuple] = {}

    def synsets(self, word: str) -> tuple:
        hit = self._cache.get(word)
        if hit is None:
            names = self._index.names(word) & self._vocab
            hit = self._cache[word] = (_MergedSynset(sorted(names)),) if names else _NO_SYNSETS
        return hit


class _NoSynonyms:
    """WordNet stand-in with no entries: METEOR then matches exact words and stems only."""

    @staticmethod
    def synsets(word):
        return _NO_SYNSETS


@lru_cache(maxsize=1)
def _memo_porter():
    from nltk.stem.api import StemmerI
    from nltk.stem.porter import PorterStemmer

    porter = PorterStemmer()  # NLTK METEOR's default stemmer

    class _MemoPorter(StemmerI):
        stem = staticmethod(lru_cache(maxsize=200_000)(porter.stem))

    return _MemoPorter()


def _warn_no_wordnet_once() -> None:
    """Once per process, and once in each fit (whose report then says so too)."""
    warn_once(log, "METEOR: no WordNet found (%s); using exact + stem matching only (signature syn:none)", INSTALL_HINT)


@register
class METEOR(Metric):
    """Unigram alignment F-mean (recall-weighted) with a fragmentation penalty; best reference."""

    name = "METEOR"
    higher_is_better = True
    needs_reference = True
    description = (
        "METEOR: unigram matches by exact form, Porter stem and WordNet synonym; recall-weighted F with order penalty."
    )
    signature_keys = {"synonyms": "syn"}
    DEFAULT_ALPHA: ClassVar[float] = 0.9
    DEFAULT_BETA: ClassVar[float] = 3.0
    DEFAULT_GAMMA: ClassVar[float] = 0.5
    SYNONYM_CHOICES: ClassVar[tuple[str, ...]] = ("wordnet", "none")

    def __init__(
        self,
        *,
        synonyms: str | None = None,
        alpha: float = DEFAULT_ALPHA,
        beta: float = DEFAULT_BETA,
        gamma: float = DEFAULT_GAMMA,
    ):
        """``synonyms=None`` auto-detects: "wordnet" when a WordNet folder is found, else
        "none" (with one logged warning).  The resolved value is stored in the signature."""
        if synonyms is None:
            synonyms = "wordnet" if find_wordnet_dir() is not None else "none"
            if synonyms == "none":
                _warn_no_wordnet_once()
        if synonyms not in self.SYNONYM_CHOICES:
            raise UserError(f"synonyms must be one of {self.SYNONYM_CHOICES}, got {synonyms!r}")
        super().__init__(synonyms=synonyms, alpha=float(alpha), beta=float(beta), gamma=float(gamma))

    def check_available(self) -> None:
        try:
            import nltk.translate.meteor_score  # noqa: F401
        except ImportError as exc:  # pragma: no cover - nltk is a core dependency
            raise MetricUnavailable(f"nltk is not installed; {install_hint('nltk>=3.8')}") from exc
        if self.params["synonyms"] == "wordnet" and find_wordnet_dir() is None:
            raise MetricUnavailable(f"METEOR(synonyms='wordnet') needs WordNet 3.0: {INSTALL_HINT}")

    def _compute(self, outputs: list[str], inputs: list[str], references: list[list[str]]) -> np.ndarray:
        self.check_available()
        from nltk.translate.meteor_score import single_meteor_score

        index = None if self.params["synonyms"] == "none" else _synonym_index(str(find_wordnet_dir()))
        stemmer = _memo_porter()
        p = self.params
        # per distinct text: its tokens (offline regex tokenizer, lowercased) and, for a
        # reference, its synonym source; summarisation references recur across systems
        tokens: dict[str, list[str]] = {}
        synonyms: dict[str, object] = {}

        def toks(text: str) -> list[str]:
            if text not in tokens:
                tokens[text] = _text.tokenize(text)
            return tokens[text]

        def syn_source(ref: str):
            if ref not in synonyms:
                synonyms[ref] = _NoSynonyms() if index is None else _ReferenceSynonyms(index, toks(ref), stemmer)
            return synonyms[ref]

        scores = np.empty(len(outputs), dtype=float)
        for i, (out, refs) in enumerate(zip(outputs, references, strict=True)):
            hyp = toks(out)
            # nltk's meteor_score = max of single_meteor_score over references; called per
            # reference here so each gets its own vocabulary-restricted synonym source
            scores[i] = max(
                single_meteor_score(
                    toks(ref),
                    hyp,
                    stemmer=stemmer,
                    wordnet=syn_source(ref),
                    alpha=p["alpha"],
                    beta=p["beta"],
                    gamma=p["gamma"],
                )
                for ref in refs
            )
        return scores
