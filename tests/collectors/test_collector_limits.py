"""The collector's limits against a real CollectorServer on 127.0.0.1 with a real trace store:
header / body / keep-alive timeouts, the connection bound, no thread per idle socket, the shared
memory budget (gzip bombs), per-field truncation, and values the store can never hold (400 or
OTLP partial success, the good spans of the same request stored)."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import threading
import time

import pytest
from otlp_client import otlp_request
from otlp_client import post as _post

KEY = {"Authorization": "Bearer k"}
PB = {**KEY, "Content-Type": "application/x-protobuf"}
JS = {**KEY, "Content-Type": "application/json"}


@pytest.fixture
def make(tmp_path):
    """Start collectors with given limits (and store URL); all stopped after the test."""
    from autometrics.collectors.limits import CollectorLimits
    from autometrics.collectors.server import CollectorServer

    started = []

    def _make(store_url: str | None = None, **limits):
        srv = CollectorServer(store_url or f"sqlite:///{tmp_path / 'limits.db'}", port=0, api_keys=["k"], langfuse="off",
                              limits=CollectorLimits(**limits)).start()
        started.append(srv)
        return srv

    yield _make
    for s in started:
        s.stop()


def _sock(srv) -> socket.socket:
    return socket.create_connection(srv.httpd.server_address[:2], timeout=10)


def _until_closed(s: socket.socket, limit: float = 10.0) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    t0, got = time.monotonic(), b""
    s.settimeout(limit)
    while time.monotonic() - t0 < limit:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        got += chunk
    return got, time.monotonic() - t0


def _otlp_json(spans: list[dict]) -> bytes:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                                          "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}).encode()


def _span(i: int, **over) -> dict:
    sp = {"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": f"s{i}", "kind": 1,
          "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000", "attributes": []}
    sp.update(over)
    return sp


def _attr(key: str, **value) -> dict:
    return {"key": key, "value": value}


# ---------------------------------------------------------------- timeouts


def test_slow_headers_are_cut_at_the_header_deadline_however_they_trickle(make):
    srv = make(header_timeout=1.0)
    s = _sock(srv)
    s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    for _ in range(8):  # one header byte every 0.25 s: each recv is quick, the total is not
        time.sleep(0.25)
        try:
            s.sendall(b"X")
        except OSError:
            break
    got, _ = _until_closed(s, 5)
    assert got.startswith(b"HTTP/1.1 408") and b"headers not received within 1 s" in got
    assert time.monotonic() - t0 < 3.0
    assert srv.counters.snapshot()["timeouts_headers"] == 1


def test_slow_body_is_cut_at_the_body_deadline_total_not_per_recv(make):
    srv = make(body_timeout=1.0)
    s = _sock(srv)
    s.sendall(b"POST /v1/feedback HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 1000\r\n\r\n")
    t0 = time.monotonic()
    for _ in range(8):
        time.sleep(0.25)
        try:
            s.sendall(b"{")
        except OSError:
            break
    got, _ = _until_closed(s, 5)
    assert got.startswith(b"HTTP/1.1 408") and b"body not received within 1 s" in got
    assert time.monotonic() - t0 < 3.0


def test_keep_alive_connection_closed_after_idle_timeout_and_silent_new_one_after_header_timeout(make):
    srv = make(idle_timeout=0.8, header_timeout=1.5)
    c = http.client.HTTPConnection(*srv.httpd.server_address[:2], timeout=5)
    c.request("GET", "/health")
    assert c.getresponse().read() and c.sock is not None
    got, took = _until_closed(c.sock, 5)
    assert got == b"" and 0.6 < took < 2.0  # closed by the server, no response bytes
    silent = _sock(srv)  # connects, never sends
    got, took = _until_closed(silent, 5)
    assert got == b"" and 1.2 < took < 3.0
    assert srv.counters.snapshot()["timeouts_idle"] == 2


# ---------------------------------------------------------------- connections and threads


def test_idle_sockets_cost_no_threads_and_normal_clients_are_served(make):
    srv = make(max_client_connections=1024)  # 350 sockets from one address: the per-client limit is tested apart
    before = threading.active_count()
    idle = [_sock(srv) for _ in range(300)]
    slow = [_sock(srv) for _ in range(50)]
    for s in slow:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\n")  # headers never finished
    body = otlp_request(5).SerializeToString()
    lat = []
    for _ in range(20):
        t0 = time.monotonic()
        code, _, _ = _post(srv.url, "/v1/traces", body, PB)
        lat.append(time.monotonic() - t0)
        assert code == 200
    assert threading.active_count() - before <= srv.limits.workers  # workers only: none per socket
    assert len(srv.httpd.conns) >= 350 and max(lat) < 2.0
    for s in idle + slow:
        s.close()


def test_connection_bound_evicts_idle_then_refuses_busy_with_503(make):
    srv = make(max_connections=20)
    idle = [_sock(srv) for _ in range(20)]
    time.sleep(0.2)
    code, _, _ = _post(srv.url, "/v1/feedback", json.dumps({"trace_id": "ab" * 16, "name": "x", "value": 1}).encode(), KEY)
    assert code == 200  # the longest-idle connection made room
    assert srv.counters.snapshot()["connections_evicted"] >= 1
    for s in idle:
        s.close()
    time.sleep(0.3)
    # half-sent heads (one client holding the bound): the oldest is answered 408 and the newcomer served
    partial = [_sock(srv) for _ in range(20)]
    for s in partial:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\n")
        time.sleep(0.01)
    time.sleep(0.3)
    c = http.client.HTTPConnection(*srv.httpd.server_address[:2], timeout=5)
    c.request("GET", "/health")
    assert c.getresponse().status == 200 and srv.counters.snapshot()["heads_evicted"] >= 1
    c.close()
    first, _ = _until_closed(partial[0], 2)
    assert first.startswith(b"HTTP/1.1 408")
    for s in partial:
        s.close()
    time.sleep(0.3)
    # bodies on their way (headers in and authenticated): never taken; a newcomer gets 503
    bodies = [_sock(srv) for _ in range(20)]
    for s in bodies:
        s.sendall(b"POST /v1/feedback HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n[")
    time.sleep(0.3)
    t0 = time.monotonic()
    extra = _sock(srv)
    got, _ = _until_closed(extra, 5)
    assert got.startswith(b"HTTP/1.1 503") and b"too many connections" in got and time.monotonic() - t0 < 1.0
    assert srv.counters.snapshot()["connections_refused"] >= 1
    for s in bodies:
        s.close()


def test_unauthenticated_request_refused_before_its_body_is_read(make):
    srv = make()
    s = _sock(srv)
    s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 10000000\r\n\r\n")
    got, took = _until_closed(s, 5)  # answered without sending a byte of the 10 MB body
    assert got.startswith(b"HTTP/1.1 401") and took < 1.0 and srv.httpd.budget.peak < 1 << 16


def test_oversized_heads_get_their_own_status(make):
    """A request line over 8 KiB is 414 (URI Too Long), however long the whole head; more than 100
    header fields, or headers over the byte limit, are 431; a normal request still works."""
    srv = make()
    cases = [(b"GET /health?" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 414"),
             (b"GET /health?" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 414"),
             (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n", b"HTTP/1.1 431"),
             (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * 70_000 + b"\r\n\r\n", b"HTTP/1.1 431"),
             (b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"HTTP/1.1 200")]
    for request, status in cases:
        s = _sock(srv)
        s.sendall(request)
        got, _ = _until_closed(s, 5)
        assert got.startswith(status), (request[:40], got[:60])
    counters = srv.health()[1]["counters"]
    assert counters["http_414"] == 2 and counters["http_431"] == 2


def test_pipelined_requests_and_expect_100_continue(make):
    srv = make()
    s = _sock(srv)
    one = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    s.sendall(one + one)
    got = b""
    while got.count(b"HTTP/1.1 200") < 2:
        got += s.recv(65536)
    body = json.dumps({"trace_id": "cd" * 16, "name": "x", "value": 1}).encode()
    s.sendall(b"POST /v1/feedback HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nExpect: 100-continue\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body))
    assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
    s.sendall(body)
    assert s.recv(65536).startswith(b"HTTP/1.1 200")


# ---------------------------------------------------------------- memory


def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_sixteen_concurrent_gzip_bombs_are_413_without_holding_their_output(make):
    srv = make()
    bomb = gzip.compress(b"\0" * (200 << 20), 9)  # 200 MiB of zeros in ~200 KB, over the 64 MiB limit
    base, peak, done = _rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.005)

    codes = []
    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=lambda: codes.append(_post(srv.url, "/v1/traces", bomb, {**PB, "Content-Encoding": "gzip"})[0]))
               for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    done.set()
    sampler.join()
    assert codes == [413] * 16
    assert srv.decode_budget.peak == 0  # a bomb never gets to decoding
    assert peak[0] - base < 150 << 20, f"peak RSS {(peak[0] - base) >> 20} MiB above baseline"
    assert _post(srv.url, "/v1/traces", gzip.compress(otlp_request(3).SerializeToString()), {**PB, "Content-Encoding": "gzip"})[0] == 200


def test_decoding_budget_413_when_a_body_can_never_fit_and_503_while_others_hold_it(make):
    srv = make(memory_budget=16 << 20, budget_wait=0.5)  # buffers 4 MiB, decoding 12 MiB = a 2 MiB body at 6x
    big = json.dumps([{"trace_id": "ab" * 16, "name": "x", "value": 1, "comment": "y" * (2 << 20)}]).encode()
    code, data, _ = _post(srv.url, "/v1/feedback", big, KEY)
    assert code == 413 and b"MEMORY_BUDGET" in data
    small = json.dumps({"trace_id": "ab" * 16, "name": "x", "value": 1}).encode()
    assert srv.decode_budget.acquire(srv.decode_budget.total, 1)  # another request holds all of it
    try:
        code, data, hdr = _post(srv.url, "/v1/feedback", small, KEY)
        assert code == 503 and hdr.get("Retry-After") == "1"
    finally:
        srv.decode_budget.release(srv.decode_budget.total)
    assert _post(srv.url, "/v1/feedback", small, KEY)[0] == 200
    deadline = time.monotonic() + 2  # a worker gives its share back just after it answered
    while (srv.decode_budget.used or srv.httpd.budget.used) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.decode_budget.used == 0 and srv.httpd.budget.used == 0  # every request gave its share back


def test_truncated_and_corrupt_gzip_are_400(make):
    srv = make()
    z = gzip.compress(otlp_request(3).SerializeToString())
    for body, msg in ((z[:-12], b"truncated"), (b"\x1f\x8b garbage", b"bad gzip")):
        code, data, _ = _post(srv.url, "/v1/traces", body, {**PB, "Content-Encoding": "gzip"})
        assert code == 400 and msg in data, data


# ---------------------------------------------------------------- per-field limit


def test_ten_megabyte_attribute_is_truncated_with_a_marker_and_reported(make):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    srv = make()
    req = otlp_request(2)
    sp = req.resource_spans[0].scope_spans[0].spans[0]
    del sp.attributes[:]
    sp.attributes.append(KeyValue(key="gen_ai.input.messages", value=AnyValue(string_value="q" * (10 << 20))))
    sp.attributes.append(KeyValue(key="big.list", value=AnyValue(array_value={"values": [AnyValue(string_value="z" * (2 << 20))]})))
    code, data, _ = _post(srv.url, "/v1/traces", req.SerializeToString(), PB)
    assert code == 200
    ps = ExportTraceServiceResponse.FromString(data).partial_success
    assert ps.rejected_spans == 0 and "attributes['gen_ai.input.messages']" in ps.error_message and "'big.list'" in ps.error_message
    frame = srv.store.spans_frame()
    assert len(frame) == 2
    row = frame[frame["span_id"] == f"{1:016x}"].iloc[0]
    assert row["input"].startswith("q" * 1000) and row["input"].endswith(f"[truncated by autometrics: {10 << 20} characters, limit {1 << 20}]")
    assert len(row["input"]) < (1 << 20) + 200 and len(row["attributes"]) < 2 * (1 << 20) + 1000
    assert srv.counters.snapshot()["fields_truncated"] == 2


def test_field_limit_is_configurable(make):
    srv = make(max_field_chars=100)
    code, data, _ = _post(srv.url, "/v1/traces", _otlp_json([_span(0, name="n" * 500)]), JS)
    assert code == 200 and "name" in json.loads(data)["partialSuccess"]["errorMessage"]
    assert srv.store.spans_frame()["name"].iloc[0] == "n" * 100 + "…[truncated by autometrics: 500 characters, limit 100]"


# ---------------------------------------------------------------- values no column can hold


@pytest.fixture
def any_store(store_url, make):
    return make(store_url)


def test_unstorable_span_values_are_rejected_by_name_and_the_good_spans_stored(any_store):
    srv = any_store
    spans = [_span(0),
             _span(1, startTimeUnixNano=str(2**64 - 1)),
             _span(2, attributes=[_attr("gen_ai.usage.input_tokens", doubleValue=1e300)]),
             _span(3, attributes=[_attr("gen_ai.request.model", stringValue="m" * 300)]),
             _span(4, name="nul\u0000in name", attributes=[_attr("gen_ai.output.messages", stringValue="a\u0000b"),
                                                           _attr("gen_ai.usage.output_tokens", intValue="7")]),
             _span(5, attributes=[_attr("gen_ai.usage.output_tokens", stringValue="many")])]
    code, data, _ = _post(srv.url, "/v1/traces", _otlp_json(spans), JS)
    assert code == 200, data
    ps = json.loads(data)["partialSuccess"]
    assert int(ps["rejectedSpans"]) == 4
    for field in ("startTimeUnixNano", "gen_ai.usage.input_tokens", "model is 300 characters", "gen_ai.usage.output_tokens"):
        assert field in ps["errorMessage"], field
    frame = srv.store.spans_frame().set_index("name")
    assert sorted(frame.index) == ["nul\ufffdin name", "s0"]
    assert frame.loc["nul\ufffdin name", "output"] == "a\ufffdb" and frame.loc["nul\ufffdin name", "output_tokens"] == 7
    assert json.loads(frame.loc["nul\ufffdin name", "attributes"])["gen_ai.output.messages"] == "a\u0000b"  # exact in the JSON
    # the same request again: nothing changes, nothing is retried as 503
    assert _post(srv.url, "/v1/traces", _otlp_json(spans), JS)[0] == 200 and srv.store.count("spans") == 2


def test_request_whose_every_span_is_unstorable_is_400_not_503(any_store):
    srv = any_store
    code, data, _ = _post(srv.url, "/v1/traces", _otlp_json([_span(0, endTimeUnixNano=str(2**64 - 1))]), JS)
    assert code == 400 and b"endTimeUnixNano" in data and b"2262" in data
    assert srv.store.count("spans") == 0 and srv.counters.snapshot().get("http_503", 0) == 0


def test_deep_json_and_year_9999_are_400_not_503(any_store):
    srv = any_store
    deep = b"[" * 200_000 + b"]" * 200_000
    for path, hdr in (("/v1/traces", JS), ("/v1/feedback", KEY)):
        code, data, _ = _post(srv.url, path, deep, hdr)
        assert code == 400, (path, data)
    fb = {"trace_id": "ab" * 16, "name": "x", "value": 1, "timestamp": "9999-12-31T23:59:59Z"}
    code, data, _ = _post(srv.url, "/v1/feedback", json.dumps(fb).encode(), KEY)
    assert code == 400, data
    deep_attr = _span(0, attributes=[_attr("gen_ai.input.messages", stringValue="[" * 5000 + "]" * 5000)])
    code, _, _ = _post(srv.url, "/v1/traces", _otlp_json([deep_attr]), JS)
    assert code == 200 and srv.store.spans_frame()["input"].iloc[0] == "[" * 5000 + "]" * 5000  # kept as sent
    assert srv.counters.snapshot().get("http_503", 0) == 0


def test_a_value_the_store_itself_refuses_is_isolated_and_the_rest_stored(make):
    """Fault injection: the store refuses one row of a batch (as a database would for a value the
    collector did not foresee); the collector halves the batch until only that span is left out."""
    srv = make()
    real = srv.store.write

    def write(spans=(), feedback=(), **kw):
        if any(r.get("name") == "poison" for r in spans):
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return real(spans, feedback, **kw)

    srv.store.write = write
    spans = [_span(i) for i in range(9)] + [_span(9, name="poison")]
    code, data, _ = _post(srv.url, "/v1/traces", _otlp_json(spans), JS)
    ps = json.loads(data)["partialSuccess"]
    assert code == 200 and int(ps["rejectedSpans"]) == 1 and "OverflowError" in ps["errorMessage"]
    assert srv.store.count("spans") == 9
    srv.store.write = lambda spans=(), feedback=(), **kw: (_ for _ in ()).throw(ConnectionError("database down"))
    code, _, hdr = _post(srv.url, "/v1/traces", _otlp_json([_span(20)]), JS)
    assert code == 503 and "Retry-After" in hdr  # a store that is down stays retryable


# ---------------------------------------------------------------- configuration


def test_limits_from_environment_and_bad_values_named(monkeypatch, tmp_path, capsys):
    from autometrics._cli.main import main
    from autometrics.collectors.limits import CollectorLimits

    lim = CollectorLimits.from_env({"AUTOMETRICS_COLLECTOR_IDLE_TIMEOUT": "30", "AUTOMETRICS_COLLECTOR_MAX_CONNECTIONS": "2_000"},
                                   max_body=5)
    assert (lim.idle_timeout, lim.max_connections, lim.max_body, lim.header_timeout) == (30.0, 2000, 5, 10.0)
    with pytest.raises(ValueError, match="AUTOMETRICS_COLLECTOR_BODY_TIMEOUT='soon' is not a number"):
        CollectorLimits.from_env({"AUTOMETRICS_COLLECTOR_BODY_TIMEOUT": "soon"})
    with pytest.raises(ValueError, match="workers .*must be a positive number"):
        CollectorLimits.from_env({"AUTOMETRICS_COLLECTOR_WORKERS": "0"})
    monkeypatch.setenv("AUTOMETRICS_COLLECTOR_HEADER_TIMEOUT", "-1")
    assert main(["collector", "serve", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--port", "0", "--no-auth"]) == 2
    err = capsys.readouterr().err
    assert "AUTOMETRICS_COLLECTOR_HEADER_TIMEOUT" in err and "Traceback" not in err


def test_every_limit_is_a_collector_serve_flag():
    import dataclasses

    from autometrics._cli.main import _build_parser
    from autometrics.collectors.limits import CollectorLimits

    args = _build_parser().parse_args(["collector", "serve", "--idle-timeout", "3", "--max-connections", "7", "--max-body", "9"])
    assert args.limit_idle_timeout == 3.0 and args.limit_max_connections == 7 and args.max_body == 9
    for f in dataclasses.fields(CollectorLimits):
        assert f.name == "max_body" or hasattr(args, f"limit_{f.name}")


def _sock_from(srv, source: str) -> socket.socket:
    """A connection to the collector from another loopback address (Linux routes 127.0.0.0/8 to lo)."""
    s = socket.socket()
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(srv.httpd.server_address[:2])
    return s


def test_one_client_address_cannot_take_the_connection_bound(make):
    srv = make(max_connections=60, max_client_connections=20)
    hostile, refused = [], []
    for _ in range(20):  # one client without a key holding half-sent heads ...
        s = _sock_from(srv, "127.0.0.2")
        s.sendall(b"POST /v1/traces HTTP/1.1\r\n")
        hostile.append(s)
    time.sleep(0.3)
    hostile += [_sock_from(srv, "127.0.0.2") for _ in range(60)]  # ... and asking for more, far past the whole bound
    for s in hostile[20:]:
        got, _ = _until_closed(s, 3)
        refused.append(got)
    assert all(g.startswith(b"HTTP/1.1 503") and b"127.0.0.2" in g and b"MAX_CLIENT_CONNECTIONS" in g and b"Retry-After: 1" in g
               for g in refused), refused[0]
    snap = srv.counters.snapshot()
    assert snap["client_connections_refused"] == 60 and not snap.get("heads_evicted")
    assert srv.httpd.per_client["127.0.0.2"] == 20
    # another address is served at once, /health and spans alike; its own keep-alive connections count apart
    c = http.client.HTTPConnection(*srv.httpd.server_address[:2], timeout=5)
    c.request("GET", "/health")
    r = c.getresponse()
    health = json.loads(r.read())
    assert r.status == 200 and health["connections"]["most_from_one_address"] == 20 and health["connections"]["client_addresses"] == 2
    code, _, _ = _post(srv.url, "/v1/traces", _otlp_json([_span(30)]), JS)
    assert code == 200
    c.close()
    # the first 20 are still bound by the header deadline as before (not by the per-client limit)
    assert all(s.fileno() >= 0 for s in hostile[:20])
    for s in hostile:
        s.close()
    time.sleep(0.5)
    assert "127.0.0.2" not in srv.httpd.per_client  # closed connections are no longer counted
    # at its own limit, a client's longest-idle keep-alive connection makes room for its new one
    idle = [_sock_from(srv, "127.0.0.3") for _ in range(20)]
    time.sleep(0.3)
    s = _sock_from(srv, "127.0.0.3")
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    got = s.recv(65536)
    assert got.startswith(b"HTTP/1.1 200")
    first, _ = _until_closed(idle[0], 2)
    assert first == b"" and srv.httpd.per_client["127.0.0.3"] == 20
    for x in idle + [s]:
        x.close()
