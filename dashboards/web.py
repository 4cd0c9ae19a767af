"""``autometrics dashboard --serve``: serve the dashboard page on loopback (stdlib only).

Why a server at all when the page is a static file: a browser on another port-forwarded machine
(or one that blocks ``file://``) can open it, and the page is re-rendered from the store on
each request, so a reload shows the latest state without a worker running.  It binds
127.0.0.1 by default and serves only ``/`` (and ``/dashboard.html``); nothing else is exposed.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .render import render_dashboard

__all__ = ["DashboardServer"]

log = logging.getLogger("autometrics.dashboard")


class DashboardServer:
    def __init__(self, monitor, *, host: str = "127.0.0.1", port: int = 8765, title: str | None = None):
        lock = threading.Lock()

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.split("?")[0] not in ("/", "/dashboard.html"):
                    self.send_error(404)
                    return
                try:
                    with lock:
                        body = render_dashboard(monitor, title=title).encode("utf-8")
                    code = 200
                except Exception as exc:  # show the failure, never a stack trace with internals
                    log.warning("dashboard render failed: %s", exc)
                    body = f"<!doctype html><p>dashboard failed: {type(exc).__name__}</p>".encode()
                    code = 500
                self.send_response(code)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host, port), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> DashboardServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            self.httpd.server_close()
