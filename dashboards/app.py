"""``autometrics dashboard --serve``: the dashboard as a web app (Starlette, served by uvicorn).

Pages, all rendered on the server from the store at each request (no script, no build step):

- ``/``: every project and target that has evaluator versions;
- ``/p/<project>/<target>``: the overview (validity, one headline agreement figure with its data
  named and the others one click away, warnings and drift, versions, scores, contributions,
  rationales), trace ids linked to their trace view;
- ``/p/<project>/<target>/traces``: the scored traces, newest first, 50 a page, filtered by time
  range, version, model, user, session, score and label range (a GET form: a filtered view is a
  link);
- ``/p/<project>/<target>/traces/<trace id>``: one trace: input, output, feedback, each version's
  score with every metric's value and contribution, the rationales, the validity of the version
  that scored it, the spans;
- ``/health``.

It binds 127.0.0.1 by default; there is no login, so put it behind your own proxy (with its
authentication) before binding another address.  Rendering runs in a worker thread (the store's
queries are blocking), so one slow page does not stall the others.
"""

from __future__ import annotations

import logging
import time

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from ..collectors.store import TraceStore
from ..evaluators.continuous.monitor import Monitor, MonitorConfig
from . import pages
from .render import render_dashboard

__all__ = ["create_app", "serve"]

log = logging.getLogger("autometrics.dashboard")
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "default-src 'none'; "
            "style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"}


def _params(request: Request, *names: str) -> tuple[str, ...]:
    """Path parameters as the names they stand for (see :func:`pages.segment`)."""
    return tuple(pages.from_segment(request.path_params[n]) for n in names)


def create_app(store: TraceStore | str, *, title: str | None = None, task: str | None = None) -> Starlette:
    """The dashboard app over one trace store (a :class:`TraceStore` or its URL)."""
    store = store if isinstance(store, TraceStore) else TraceStore(store)
    monitors: dict[tuple[str, str], Monitor] = {}

    def monitor(project: str, target: str) -> Monitor:
        key = (project, target)
        if key not in monitors:
            monitors[key] = Monitor(store, MonitorConfig(target=target, project=project, task=task))
        return monitors[key]

    def known(project: str, target: str) -> bool:
        return any(k["project"] == project and k["target"] == target for k in store.dashboard_keys())

    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status, headers=_HEADERS)

    def not_found(what: str) -> HTMLResponse:
        return html(pages.page("Not found", f"<h1>Not found</h1><p>{pages.e(what)}</p><nav><a href='/'>all projects</a></nav>"), 404)

    async def index(request: Request):
        keys = await run_in_threadpool(store.dashboard_keys)
        return html(pages.index_page(keys, store.shown_url))

    async def overview(request: Request):
        p, t = _params(request, "project", "target")
        if not await run_in_threadpool(known, p, t):
            return not_found(f"no evaluator for target {t!r} in project {p!r}")

        def render():
            return render_dashboard(monitor(p, t), title=title, nav=pages.nav(p, t),
                                    trace_href=lambda tid: pages.trace_href(p, t, tid))
        return html(await run_in_threadpool(render))

    async def traces(request: Request):
        p, t = _params(request, "project", "target")
        if not await run_in_threadpool(known, p, t):
            return not_found(f"no evaluator for target {t!r} in project {p!r}")
        q = dict(request.query_params)

        def render():
            started = time.perf_counter()
            versions = monitor(p, t).versions()
            models = store.distinct_models(p)
            try:
                offset = min(max(0, int(q.get("offset") or 0)), 10**9)
            except ValueError:
                offset = 0
            try:
                f, form = pages.parse_filter(q, versions, time.time_ns())
            except pages.FilterError as exc:
                _, form = pages.parse_filter({}, versions, time.time_ns())
                form.update({k: v for k, v in q.items() if k in form})
                import pandas as pd

                empty = pd.DataFrame(columns=["trace_id", "evaluator_id", "score", "error", "trace_start_ns", "label", "model",
                                              "user_id", "session_id", "input", "output"])
                return pages.traces_page(p, t, empty, 0, form, versions, models, offset=0, capped=False,
                                         seconds=time.perf_counter() - started, error=str(exc)), 400
            cap = 100_000
            rows, total = store.scored_traces(p, t, f, limit=pages.PAGE_SIZE, offset=offset, count_up_to=cap)
            return pages.traces_page(p, t, rows, min(total, cap), form, versions, models, offset=offset, capped=total > cap,
                                     seconds=time.perf_counter() - started), 200
        body, status = await run_in_threadpool(render)
        return html(body, status)

    async def trace(request: Request):
        p, t, tid = _params(request, "project", "target", "trace_id")
        if not await run_in_threadpool(known, p, t):
            return not_found(f"no evaluator for target {t!r} in project {p!r}")

        def render():
            spans = store.spans_frame(trace_id=tid)
            if not len(spans):
                return None
            return pages.trace_page(p, t, tid, spans, store.feedback_frame(trace_id=tid), store.trace_scores_of(tid, p, t),
                                    monitor(p, t).versions())
        body = await run_in_threadpool(render)
        return html(body) if body is not None else not_found(f"no trace {tid!r} in this store")

    async def health(request: Request):
        return JSONResponse({"status": "ok"})

    routes = [Route("/", index), Route("/health", health), Route("/p/{project}/{target}", overview),
              Route("/p/{project}/{target}/traces", traces), Route("/p/{project}/{target}/traces/{trace_id}", trace)]
    return Starlette(routes=routes)


def serve(store: TraceStore | str, *, host: str = "127.0.0.1", port: int = 8765, title: str | None = None,
          task: str | None = None) -> None:
    """Serve the app with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(store, title=title, task=task), host=host, port=port, log_level="warning",
                timeout_keep_alive=5, limit_concurrency=64)
