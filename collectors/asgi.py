"""The collector's endpoints as an ASGI app, for a maintained server in front (``autometrics
collector serve --front granian``; uvicorn or any ASGI server can serve :func:`collector_app`).

The request logic is the built-in server's own (:class:`~autometrics.collectors.server._Handler`:
authentication, OTLP, feedback, health, CORS, and the group-commit acknowledgement: a 200 means
stored), run in a worker thread once the request is whole; this module adds what the built-in
front did at the socket: an unauthenticated POST is refused before its body is read, a body over
``max_body`` (by its Content-Length) is refused unread, a body must arrive within
``body_timeout`` (total, not per read) or the request is answered 408, and at most ``workers``
requests run at once.  What stays with the server: header deadlines, idle connections, the
request line and header size (granian: ``header_timeout`` becomes its HTTP/1 header-read
timeout; idle sockets cost it no thread).
"""

from __future__ import annotations

import email.message
import io
import json
import os
import time
import types

from .limits import BodyError
from .server import CollectorServer, _Handler, body_length

__all__ = ["collector_app", "app_from_env", "serve_granian", "CONFIG_ENV"]

CONFIG_ENV = "AUTOMETRICS_COLLECTOR_ASGI_CONFIG"  # the child server process's configuration (JSON; holds the keys)


class _Exchange(_Handler):
    """One request through the built-in handler's logic, its response captured (no socket)."""

    def __init__(self, core: CollectorServer, method: str, path: str, headers: email.message.Message, body: bytes, client: str):
        self.server = types.SimpleNamespace(app=core)
        self.command, self.path, self.headers, self.client = method, path, headers, client
        self.request_version = "HTTP/1.1"
        self.rfile, self.wfile = io.BytesIO(body), io.BytesIO()
        self.close_connection = False
        self.status, self.out_headers = 500, []

    def address_string(self) -> str:
        return self.client

    def send_response(self, code, message=None) -> None:
        self.status = int(code)

    def send_header(self, keyword, value) -> None:
        self.out_headers.append((str(keyword).lower().encode("latin-1"), str(value).encode("latin-1")))

    def end_headers(self) -> None:
        pass

    def run(self) -> tuple[int, list, bytes]:
        handler = {"GET": self.do_GET, "POST": self.do_POST, "OPTIONS": self.do_OPTIONS}.get(self.command)
        if handler is None:
            self._error(405, f"method {self.command} not allowed")
        else:
            handler()
        return self.status, self.out_headers, self.wfile.getvalue()


def _json_reply(status: int, obj, extra: dict | None = None) -> tuple[int, list, bytes]:
    body = json.dumps(obj).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in (extra or {}).items()]
    return status, headers, body


def collector_app(core: CollectorServer):
    """The ASGI app serving ``core`` (a :class:`CollectorServer` made with ``front="asgi"``)."""
    import anyio

    limiter = anyio.CapacityLimiter(core.limits.workers)

    async def respond(send, status: int, headers: list, body: bytes, close: bool = False) -> None:
        if close:
            headers = [*headers, (b"connection", b"close")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def read_body(receive, expected: int) -> bytes | None:
        """The whole body within the body deadline (None: it did not arrive in time)."""
        chunks, n = [], 0
        deadline = time.monotonic() + core.limits.body_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with anyio.move_on_after(left) as scope:
                msg = await receive()
            if scope.cancelled_caught:
                return None
            if msg["type"] == "http.disconnect":
                return b""
            chunk = msg.get("body", b"")
            n += len(chunk)
            if n > expected:  # more than its Content-Length said: refused like a wrong length
                return b"".join(chunks) + chunk
            chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await anyio.to_thread.run_sync(core.stop)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = email.message.Message()
        for k, v in scope["headers"]:
            headers[k.decode("latin-1")] = v.decode("latin-1")
        method = scope["method"]
        path = scope["path"] + (f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else "")
        client = (scope.get("client") or ("?", 0))[0]
        early = core._early(method, path, headers)
        if early is not None:
            status, body, extra = early
            return await respond(send, status, [(b"content-type", b"application/json"),
                                                (b"content-length", str(len(body)).encode())]
                                 + [(k.lower().encode(), str(v).encode()) for k, v in extra.items()], body, close=True)
        body = b""
        if method == "POST":
            try:
                expected = body_length(headers, core.max_body)  # the built-in front's rule and messages
            except BodyError as exc:
                core.counters.add(f"http_{exc.status}")
                return await respond(send, *_json_reply(exc.status, {"error": str(exc)}), close=True)
            got = await read_body(receive, expected)
            if got is None:
                core.counters.add("http_408")
                return await respond(send, *_json_reply(408, {"error": f"the body did not arrive within "
                                                                       f"{core.limits.body_timeout:g} s"}), close=True)
            body = got
        ex = _Exchange(core, method, path, headers, body, client)
        status, out_headers, out = await anyio.to_thread.run_sync(ex.run, limiter=limiter)
        await respond(send, status, out_headers, out, close=ex.close_connection)

    return app


def app_from_env():
    """The app a server process builds from ``$AUTOMETRICS_COLLECTOR_ASGI_CONFIG`` (granian's
    factory target: ``autometrics.collectors.asgi:app_from_env``)."""
    from .limits import CollectorLimits

    cfg = json.loads(os.environ[CONFIG_ENV])
    lim = CollectorLimits(**cfg["limits"]).checked()
    core = CollectorServer(cfg["store"], host=cfg["host"], port=cfg["port"], api_keys=cfg["keys"], allow_no_auth=cfg["no_auth"],
                           langfuse=cfg["langfuse"], limits=lim, cors_origins=cfg["cors"], front="asgi")
    return collector_app(core)


def serve_granian(store_url: str | None = None, *, host: str = "127.0.0.1", port: int = 4318, api_keys=None,
                  allow_no_auth: bool = False, max_body: int | None = None, langfuse: str = "auto", cors_origins=None,
                  **limit_values) -> int:
    """Serve the collector on granian (one worker process, its HTTP/1 header-read timeout set to
    the header deadline) until SIGINT/SIGTERM; the arguments are :func:`~.server.serve`'s."""
    import dataclasses

    from ..metricbank.errors import UserError
    from .server import serve_settings

    api_keys, limits, cors_origins = serve_settings(api_keys, max_body, cors_origins, **limit_values)
    if not api_keys and not allow_no_auth:
        raise UserError("no API key configured: pass --api-key / set AUTOMETRICS_COLLECTOR_API_KEYS, or --no-auth for local testing")

    from granian import Granian
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings

    from .store import TraceStore

    url = store_url or TraceStore(None).url  # the default store, resolved here once
    os.environ[CONFIG_ENV] = json.dumps({"store": url, "host": host, "port": port, "keys": api_keys, "no_auth": allow_no_auth,
                                         "langfuse": langfuse, "cors": cors_origins, "limits": dataclasses.asdict(limits)})
    auth = f"{len(api_keys)} API key(s)" if api_keys else "NO AUTHENTICATION (--no-auth)"
    print(f"autometrics collector (granian) listening on http://{host}:{port} (store: {url.split('://')[0]}; {auth}; "
          f"limits: {limits.describe(per_client=False)})", flush=True)
    Granian("autometrics.collectors.asgi:app_from_env", address=host, port=port, interface=Interfaces.ASGI, factory=True,
            workers=1, backpressure=max(limits.workers, limits.max_connections),
            http1_settings=HTTP1Settings(header_read_timeout=int(min(60, limits.header_timeout) * 1000),
                                         max_buffer_size=max(limits.max_header_bytes, 8192)),
            log_level="warning").serve()
    return 0
