"""The collector's HTTP front: a standard-library HTTP server that a slow or hostile client cannot
hold open, and the limits it enforces (:class:`CollectorLimits`).

Why not one thread per connection (``ThreadingHTTPServer`` as is): a thread blocks in ``recv``
for as long as its client likes, so 1,000 idle sockets were 1,000 threads and 300 slow-header
connections held the collector for as long as they stayed open.  Here one selector thread owns
every socket while it is idle or still sending: it reads non-blockingly, enforces the header,
body and keep-alive deadlines (totals, not per-``recv`` timeouts, so one byte every few seconds
does not extend them), and hands a request to a bounded pool of worker threads only once its
headers and whole body have arrived.  So an idle or slow connection costs a file descriptor and a
small buffer, never a thread, and the workers only ever run complete requests (parsing,
``BaseHTTPRequestHandler``'s request handling and the response are unchanged).

Connections beyond ``max_connections`` first push out the longest-idle keep-alive connection
(one with no request bytes pending); when none is idle they get an immediate 503 and are
closed, without a thread.  One client address may hold at most ``max_client_connections``:
beyond, its own longest-idle connection is closed, else the newcomer gets 503 at once, so one
client cannot take the bound from the others (behind a proxy every client shares the proxy's
address: raise the limit there).  Request bytes held in memory (buffered bodies, and each request's
estimated parsing cost) come from one :class:`ByteBudget` shared by all requests.
"""

from __future__ import annotations

import email.message
import http.client
import io
import json
import logging
import queue
import resource
import selectors
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from .limits import ByteBudget, CollectorLimits

log = logging.getLogger("autometrics.collectors.server")

__all__ = ["BufferedRequestHandler", "BoundedHTTPServer", "canned"]


class _Request:
    """What a worker gets: the connection's socket and one complete request's bytes."""

    __slots__ = ("sock", "data")

    def __init__(self, sock: socket.socket, data: bytes):
        self.sock = sock
        self.data = data


class _ResponseWriter(io.RawIOBase):
    """Collects a response and sends it with one ``sendall`` on flush (no Nagle/delayed-ACK stall
    between the headers and the body)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.parts.append(bytes(b))
        return len(b)

    def flush(self) -> None:
        if self.parts:
            data, self.parts = b"".join(self.parts), []
            self.sock.sendall(data)


class BufferedRequestHandler(BaseHTTPRequestHandler):
    """A ``BaseHTTPRequestHandler`` that runs exactly one request already read in full by
    :class:`BoundedHTTPServer` (``rfile`` is that request's bytes) and leaves the socket open;
    ``close_connection`` tells the server whether to keep the connection."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.connection = self.request.sock
        self.rfile = io.BytesIO(self.request.data)
        self.wfile = _ResponseWriter(self.connection)

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()

    def finish(self) -> None:
        self.wfile.flush()

    def handle_expect_100(self) -> bool:
        return True  # the server already answered 100 Continue before it read the body


class _Conn:
    __slots__ = ("sock", "addr", "client", "buf", "state", "deadline", "held", "need", "close_after", "scanned", "last_data")

    def __init__(self, sock, addr, deadline: float):
        self.sock = sock
        self.addr = addr
        self.client = addr[0] if isinstance(addr, tuple) else str(addr)  # the address a per-client limit counts
        self.buf = bytearray()
        # head: reading headers | body: reading the body | idle: between requests | busy: at a worker
        # | linger: answered and closing (input read and dropped so the answer is not lost to a reset)
        self.state = "head"
        self.deadline = deadline
        self.held = 0  # budget bytes taken for buf
        self.need = 0  # bytes of the current request (headers + body), once the headers are complete
        self.close_after = False
        self.scanned = 0
        self.last_data = time.monotonic()


_REASONS = {400: "Bad Request", 401: "Unauthorized", 408: "Request Timeout", 413: "Content Too Large", 414: "URI Too Long",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def canned(code: int, body: bytes, extra: dict | None = None) -> bytes:
    head = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}", "Content-Type: application/json", f"Content-Length: {len(body)}",
            "Connection: close"] + [f"{k}: {v}" for k, v in (extra or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class BoundedHTTPServer(HTTPServer):
    """``HTTPServer`` whose sockets are served by one selector thread and a bounded worker pool
    (see the module docstring).  ``early`` (optional) sees each request's method, path and
    headers as soon as they are complete and may return ``(code, body, extra_headers)`` to answer
    at once and close, before the body is read (the collector refuses a missing API key there).
    ``body_limit`` returns the largest body to buffer; a larger one goes to the handler unread
    (it answers 413).  ``event`` counts what the server refused or timed out."""

    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, address, handler, limits: CollectorLimits, budget: ByteBudget, *, early=None, body_limit=None,
                 event=None):
        self.limits = limits
        self.budget = budget  # for buffered request bytes (the handlers take their decoding cost from another)
        self.early = early
        self.body_limit = body_limit or (lambda: limits.max_body)
        self.event = event or (lambda name: None)
        super().__init__(address, handler)
        self.socket.setblocking(False)
        self.max_connections = _fd_headroom(limits.max_connections)
        self.conns: dict[int, _Conn] = {}  # by fd, oldest activity first
        self.per_client: dict[str, int] = {}  # open connections by client address
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)  # a full wake-up pipe already wakes the selector: never block a worker
        self._back: queue.SimpleQueue = queue.SimpleQueue()  # (conn, keep) from workers
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._idle_workers = 0
        self._wlock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()

    # ---- the selector thread
    def serve_forever(self, poll_interval: float = 0.25) -> None:
        self._stopped.clear()
        self._sel.register(self.socket, selectors.EVENT_READ, "accept")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        next_sweep = 0.0
        try:
            while not self._stop.is_set():
                for key, _ in self._sel.select(min(poll_interval, 0.25)):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._returned()
                    else:
                        self._read(key.data)
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + 0.1
        finally:
            for c in list(self.conns.values()):
                if c.state != "busy":
                    self._close(c)
            for s in (self.socket, self._wake_r):
                try:
                    self._sel.unregister(s)
                except (KeyError, ValueError):
                    pass
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake()
        self._stopped.wait(10)

    def server_close(self) -> None:
        super().server_close()
        for _ in self._workers:
            self._jobs.put(None)
        for s in (self._wake_r, self._wake_w):
            s.close()
        self._sel.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _accept(self) -> None:
        for _ in range(256):
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: try again on the next event
                log.warning("collector: accept failed: %s", exc)
                return
            sock.setblocking(False)
            client = addr[0] if isinstance(addr, tuple) else str(addr)
            if self.per_client.get(client, 0) >= self.limits.max_client_connections and not self._evict_idle(client):
                self.event("client_connections_refused")
                _send_now(sock, canned(503, json.dumps({"error": f"too many connections from {client} (the limit is "
                                                                  f"{self.limits.max_client_connections} per client address, "
                                                                  "AUTOMETRICS_COLLECTOR_MAX_CLIENT_CONNECTIONS); reuse "
                                                                  "connections or retry later"}).encode(), {"Retry-After": "1"}))
                _close_refused(sock)
                continue
            if len(self.conns) >= self.max_connections and not self._evict_idle():
                self.event("connections_refused")
                _send_now(sock, canned(503, b'{"error": "too many connections; retry later"}', {"Retry-After": "1"}))
                _close_refused(sock)
                continue
            c = _Conn(sock, addr, time.monotonic() + self.limits.header_timeout)
            self.conns[sock.fileno()] = c
            self.per_client[client] = self.per_client.get(client, 0) + 1
            self._sel.register(sock, selectors.EVENT_READ, c)

    def _evict_idle(self, client: str | None = None) -> bool:
        """Make room for a new connection at the bound: close the connection idle longest, else
        the one whose request head has been incomplete longest (answered 408: nothing of it was
        read, so nothing is lost, and one client holding the bound with half-sent heads cannot
        lock out the others, /health included).  A request whose headers are in (an authenticated
        body on its way, a request being run) is never taken.  With ``client`` (at that address's
        own limit): only that client's idle connections are taken, never a head of its own."""
        for c in self.conns.values():  # oldest activity first
            if client is not None and c.client != client:
                continue
            if c.state in ("idle", "head", "linger") and not c.buf:
                if c.state != "linger":
                    self.event("connections_evicted")
                self._close(c)
                return True
        if client is not None:
            return False
        heads = [c for c in self.conns.values() if c.state == "head"]
        if heads:
            victim = min(heads, key=lambda c: c.deadline)  # the head that started first
            self.event("connections_evicted")
            self.event("heads_evicted")
            self._refuse(victim, 408, "request headers incomplete while the collector was at its connection limit; retry")
            return True
        return False

    def _read(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self._close(c)
        if not data:
            return self._close(c)
        if c.state == "linger":
            return
        c.last_data = time.monotonic()
        if not self.budget.try_acquire(len(data)) and not (self._evict_stalled(c) and self.budget.try_acquire(len(data))):
            self.event("budget_refused")
            return self._refuse(c, 503, "the collector's buffer memory is in use by other requests; retry later", {"Retry-After": "1"})
        c.held += len(data)
        if c.state == "idle":
            c.state, c.deadline = "head", time.monotonic() + self.limits.header_timeout
        c.buf += data
        self._advance(c)

    def _evict_stalled(self, needy: _Conn) -> bool:
        """Buffer memory is exhausted: drop the connection holding most of it whose upload has
        stalled (no bytes for 2 s), so a few half-sent bodies cannot lock out everyone else."""
        now = time.monotonic()
        stalled = [c for c in self.conns.values() if c is not needy and c.state in ("head", "body") and c.held
                   and now - c.last_data > 2.0]
        if not stalled:
            return False
        victim = max(stalled, key=lambda c: c.held)
        self.event("stalled_evicted")
        self._refuse(victim, 408, "request stalled while its buffered bytes were needed by other requests; retry")
        return True

    def _advance(self, c: _Conn) -> None:
        """Move a connection's request on with what is buffered: headers complete -> early
        answer or wait for the body; body complete -> to a worker."""
        if c.state == "head":
            while c.buf[:2] == b"\r\n":  # empty lines before a request are allowed (RFC 9112 2.2)
                del c.buf[:2]
                c.held, c.scanned = c.held - 2, 0
                self.budget.release(2)
            end = c.buf.find(b"\r\n\r\n", max(0, c.scanned - 3))
            if end < 0:
                c.scanned = len(c.buf)
                if len(c.buf) > self.limits.max_header_bytes or (
                        len(c.buf) > MAX_REQUEST_LINE and c.buf.find(b"\r\n", 0, MAX_REQUEST_LINE + 2) < 0):
                    self._too_large(c)
                return
            head = end + 4
            if head > self.limits.max_header_bytes + 4 or c.buf.find(b"\r\n", 0, MAX_REQUEST_LINE + 2) < 0:
                return self._too_large(c)
            try:
                method, path, headers = _parse_head(bytes(c.buf[:head]))
            except _TooManyHeaders as exc:
                self.event("http_431")
                return self._refuse(c, 431, str(exc))
            except ValueError as exc:
                self.event("http_400")
                return self._refuse(c, 400, f"malformed request head: {exc}")
            if self.early is not None:
                answer = self.early(method, path, headers)
                if answer is not None:
                    return self._refuse(c, *answer)
            n = _body_length(headers)
            if n is not None and self.budget.total < n <= self.body_limit():
                self.event("http_413")
                return self._refuse(c, 413, f"a body of {n} bytes is more than the collector may buffer ({self.budget.total} bytes, "
                                            "1/4 of AUTOMETRICS_COLLECTOR_MEMORY_BUDGET); send smaller batches")
            if n is None or n > self.body_limit():  # ambiguous framing or too large: the handler answers, then close
                c.need, c.close_after = head, True
            else:
                c.need = head + n
                if len(c.buf) < c.need:
                    c.state, c.deadline = "body", time.monotonic() + self.limits.body_timeout
                    if headers.get("Expect", "").lower() == "100-continue":
                        _send_now(c.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        if c.state in ("head", "body") and len(c.buf) >= c.need:
            self._dispatch(c)

    def _too_large(self, c: _Conn) -> None:
        """A head over the limit: 414 when its request line alone is (the URI), else 431."""
        if c.buf.find(b"\r\n", 0, MAX_REQUEST_LINE + 2) < 0 and len(c.buf) > MAX_REQUEST_LINE:
            self.event("http_414")
            return self._refuse(c, 414, f"request line longer than {MAX_REQUEST_LINE} bytes")
        self.event("http_431")
        return self._refuse(c, 431, f"request headers exceed {self.limits.max_header_bytes} bytes")

    def _dispatch(self, c: _Conn) -> None:
        data = bytes(c.buf[:c.need])
        del c.buf[:c.need]
        c.held -= len(data)  # now held by the request, released by the worker
        c.state, c.scanned = "busy", 0
        self._sel.unregister(c.sock)
        with self._wlock:
            if self._idle_workers <= 0 and len(self._workers) < self.limits.workers:
                t = threading.Thread(target=self._worker, name=f"collector-worker-{len(self._workers)}", daemon=True)
                self._workers.append(t)
                self._idle_workers += 1
                t.start()
            self._idle_workers -= 1
        self._jobs.put((c, data))

    def _returned(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            try:
                c, keep = self._back.get_nowait()
            except queue.Empty:
                return
            if self._stop.is_set():
                self._close(c)
                continue
            c.sock.setblocking(False)
            self.conns[c.sock.fileno()] = self.conns.pop(c.sock.fileno(), c)  # most recently active last
            self._sel.register(c.sock, selectors.EVENT_READ, c)
            if not keep:
                self._linger(c)
                continue
            now = time.monotonic()
            c.state, c.deadline = ("head", now + self.limits.header_timeout) if c.buf else ("idle", now + self.limits.idle_timeout)
            if c.buf:  # a pipelined next request
                self._advance(c)

    def _sweep(self, now: float) -> None:
        for c in list(self.conns.values()):
            if c.state == "busy" or now < c.deadline:
                continue
            if c.state in ("idle", "linger") or (c.state == "head" and not c.buf):
                if c.state != "linger":
                    self.event("timeouts_idle")
                self._close(c)
            else:
                what = "headers" if c.state == "head" else "body"
                limit = self.limits.header_timeout if c.state == "head" else self.limits.body_timeout
                self.event(f"timeouts_{what}")
                self._refuse(c, 408, f"request {what} not received within {limit:g} s")

    def _refuse(self, c: _Conn, code: int, message: str | bytes, extra: dict | None = None) -> None:
        body = message if isinstance(message, bytes) else json.dumps({"error": message}).encode()
        _send_now(c.sock, canned(code, body, extra))
        self._linger(c)

    def _linger(self, c: _Conn) -> None:
        """Answered, closing: stop sending, but read and drop what the client still sends for a
        moment, so the kernel does not reset the connection before the client read the answer."""
        self.budget.release(c.held)
        c.held, c.state, c.deadline = 0, "linger", time.monotonic() + 2.0
        c.buf.clear()
        try:
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(c)

    def _close(self, c: _Conn) -> None:
        if self.conns.pop(c.sock.fileno(), None) is not None:
            left = self.per_client.get(c.client, 1) - 1
            if left > 0:
                self.per_client[c.client] = left
            else:
                self.per_client.pop(c.client, None)
        try:
            self._sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        self.budget.release(c.held)
        c.held = 0
        try:
            c.sock.close()
        except OSError:
            pass

    # ---- workers
    def _worker(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            c, data = job
            keep = False
            try:
                c.sock.setblocking(True)
                c.sock.settimeout(self.limits.write_timeout)
                h = self.RequestHandlerClass(_Request(c.sock, data), c.addr, self)
                keep = not h.close_connection and not c.close_after
            except Exception as exc:  # a client gone mid-response, a write timeout
                log.debug("collector: request from %s ended: %s: %s", c.addr, type(exc).__name__, exc)
            finally:
                self.budget.release(len(data))
                with self._wlock:
                    self._idle_workers += 1
            c.close_after = False
            if self._stop.is_set():  # the selector thread is gone
                c.sock.close()
                continue
            self._back.put((c, keep))
            self._wake()


def _send_now(sock: socket.socket, data: bytes) -> None:
    """Best effort, never blocks: a refusal to a client that does not read is simply dropped."""
    try:
        sock.send(data)
    except OSError:
        pass


MAX_REQUEST_LINE = 8192  # bytes of "METHOD URI HTTP/1.1"; a longer one is 414


def _close_refused(sock: socket.socket) -> None:
    """Close a connection refused at accept, having first read what its client already sent, so
    the kernel sends the answer and a FIN rather than a reset that could discard the answer."""
    try:
        sock.shutdown(socket.SHUT_WR)
        for _ in range(4):
            if not sock.recv(1 << 16):
                break
    except OSError:  # nothing (more) to read, or the client is gone
        pass
    sock.close()


class _TooManyHeaders(ValueError):
    pass


def _parse_head(head: bytes) -> tuple[str, str, email.message.Message]:
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError(f"bad request line {line[:80]!r}")
    try:
        headers = http.client.parse_headers(io.BytesIO(rest))
    except http.client.HTTPException as exc:
        if "more than" in str(exc) and "headers" in str(exc):  # "got more than 100 headers"
            raise _TooManyHeaders(f"more than {http.client._MAXHEADERS} request headers") from None
        raise ValueError(str(exc)[:200]) from None
    return parts[0], parts[1], headers


def _body_length(headers: email.message.Message) -> int | None:
    """The body's length, 0 without one, None when the framing is not one Content-Length."""
    if headers.get("Transfer-Encoding") is not None:
        return None
    values = headers.get_all("Content-Length") or []
    if not values:
        return 0
    if len(values) > 1:
        return None
    try:
        n = int(values[0])
    except ValueError:
        return None
    return n if n >= 0 else None


def _fd_headroom(wanted: int) -> int:
    """``wanted`` connections if the process may open that many sockets (raising its soft limit
    when the hard one allows), else as many as fit, with a warning."""
    need = wanted + 128  # the store, logs, the listening socket, ...
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < need:
        fit = max(16, soft - 128)
        log.warning("collector: open-file limit %d allows %d connections, not %d (raise `ulimit -n`)", soft, fit, wanted)
        return fit
    return wanted
