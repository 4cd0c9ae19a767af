"""The worker's scores back in Arize Phoenix: after each scoring job, the champion's new online
scores become span annotations (``autometrics.<target>``, annotator CODE) on each trace's root
span, with the evaluator's rationales and warnings (low significance, small n, validity decay)
as the explanation and ``validated`` / ``unvalidated`` as the label.  Phoenix keeps one annotation
per (name, span, identifier), so sending a score again replaces it: nothing is double counted
when a worker restarts and sends its last round again."""

from __future__ import annotations

import json
import logging

from ..collectors.phoenix import annotate_phoenix, parse_phoenix_url, phoenix_client
from . import figures as fig
from .langfuse_push import version_warnings

__all__ = ["PhoenixPublisher"]

log = logging.getLogger("autometrics")


class PhoenixPublisher:
    """``url``: ``phoenix+http://host:6006`` (the project is the spans' own; a path is ignored)."""

    def __init__(self, url: str, *, max_rationales: int = 3):
        self.base, _ = parse_phoenix_url(url)
        self.max_rationales = max_rationales
        self._client = None
        self._since: dict[str, int] = {}  # evaluator id -> newest scored_at_ns sent

    def publish(self, monitor, result: dict) -> None:
        if result.get("job") != "score":
            return
        try:
            result["phoenix"] = self._push(monitor)
        except Exception as exc:  # Phoenix down or refusing: counted in the job line, tried again next round
            log.warning("Phoenix annotations not sent: %s: %s", type(exc).__name__, exc)
            result["phoenix"] = {"annotations": 0, "failed": 1, "error": f"{type(exc).__name__}: {exc}"}

    def _push(self, monitor) -> dict:
        champ = monitor.champion()
        if not champ:
            return {"annotations": 0}
        since = self._since.get(champ["id"], 0)
        rows = monitor.store.scores_frame(champ["id"], columns=["trace_id", "score", "rationales", "scored_at_ns"])
        rows = rows[(rows["scored_at_ns"] > since) & rows["score"].notna()]
        if rows.empty:
            return {"annotations": 0}
        roots = monitor.store.root_spans(rows["trace_id"].tolist())
        warnings = [f"⚠ {msg}" for _, msg in version_warnings(champ, monitor.alerts())]
        items = []
        for r in rows.to_dict("records"):
            rats = json.loads(r["rationales"]) if isinstance(r.get("rationales"), str) else []
            text = "\n".join([x["text"] for x in rats[: self.max_rationales]] + warnings) or None
            items.append({"span_id": roots.get(r["trace_id"]), "score": r["score"], "explanation": text})
        if self._client is None:
            self._client = phoenix_client(self.base)
        validated = bool(fig.validity(champ).get("validated"))
        sent = annotate_phoenix(self._client, items, name=f"autometrics.{monitor.cfg.target}", validated=validated)
        self._since[champ["id"]] = int(rows["scored_at_ns"].max())
        return {"annotations": sent, "no_root_span": len(items) - sent}

    def close(self) -> None:
        pass
