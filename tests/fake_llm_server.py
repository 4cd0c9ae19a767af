"""An OpenAI-compatible chat-completions test server (stdlib, 127.0.0.1) with fault injection.

``FakeLLMServer(plan=[...])`` answers request n with ``plan[n]`` while the plan lasts, then with
``default``.  Modes: ``ok``, ``429``, ``500``, ``timeout`` (sleeps past the client timeout),
``malformed`` (a body that is not JSON), ``truncated`` (finish_reason=length, half a word, no
logprobs), ``garbage`` (a reply that is not a score), ``badjson`` (``{"score": "high"``).

``fault_rate=0.3`` instead answers a seeded random 30 % of requests with one of
``fault_kinds`` (by default the transport faults a client must retry: 429, 500, timeout,
malformed), independent of the plan.

``ok`` replies are deterministic: judge prompts (max_tokens=1) get logprobs whose expected
value is 1 + (number of words in the judged output) % 5 ... or a callable ``judge(text)``;
generator prompts get criteria / rubric lines, in DSPy's field format when DSPy asked.
A request with ``stream=True`` gets the same reply as server-sent chunks (``stream_delay``
seconds apart; usage in a last chunk when ``stream_options.include_usage`` asks for it).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _default_judge(output: str) -> int:
    return 1 + len(output.split()) % 5


class FakeLLMServer:
    def __init__(self, plan=None, default="ok", judge=_default_judge, delay=0.0, timeout_sleep=3.0, fault_rate=0.0,
                 fault_kinds=("429", "500", "timeout", "malformed"), seed=0, stream_delay=0.0):
        import random

        self.plan = list(plan or [])
        self.fault_rate = fault_rate
        self.fault_kinds = tuple(fault_kinds)
        self._rng = random.Random(seed)
        self.default = default
        self.judge = judge
        self.delay = delay
        self.timeout_sleep = timeout_sleep
        self.stream_delay = stream_delay
        self.requests: list[dict] = []
        self.modes: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                body = json.dumps({"data": [{"id": "fake"}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("content-length", 0))
                req = json.loads(self.rfile.read(n))
                with server._lock:
                    k = len(server.requests)
                    server.requests.append(req)
                    mode = server.plan[k] if k < len(server.plan) else server.default
                    if server.fault_rate and server._rng.random() < server.fault_rate:
                        mode = server._rng.choice(server.fault_kinds)
                    server.modes.append(mode)
                if server.delay:
                    time.sleep(server.delay)
                if mode in ("429", "500"):
                    body = b'{"error": "injected"}'
                    self.send_response(int(mode))
                    if mode == "429":
                        self.send_header("retry-after", "0")
                elif mode == "timeout":
                    time.sleep(server.timeout_sleep)
                    body = b"{}"
                    self.send_response(200)
                elif mode == "malformed":
                    body = b'{"choices": [{"message": {"content": "4"'
                    self.send_response(200)
                elif req.get("stream"):
                    self._stream(server.reply(req, mode), req)
                    return
                else:
                    body = json.dumps(server.reply(req, mode)).encode()
                    self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def _stream(self, reply: dict, req: dict) -> None:
                # ``stream=True``: the same reply as server-sent chat-completion chunks (a role
                # chunk, one chunk per word, the finish reason, then usage when asked), each
                # ``stream_delay`` apart; a client that closes early just ends the response.
                choice = reply["choices"][0]
                base = {"id": reply["id"], "object": "chat.completion.chunk", "created": 0, "model": reply["model"]}
                words = re.findall(r"\S+\s*|\s+", choice["message"]["content"])
                chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
                chunks += [{**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in words]
                chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
                if (req.get("stream_options") or {}).get("include_usage"):
                    u = reply["usage"]
                    chunks.append({**base, "choices": [], "usage": {**u, "total_tokens": u["prompt_tokens"] + u["completion_tokens"]}})
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")  # the body ends when the connection closes
                self.end_headers()
                try:
                    for c in chunks:
                        self.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
                        self.wfile.flush()
                        if server.stream_delay:
                            time.sleep(server.stream_delay)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    # ------------------------------------------------------------------ replies
    def reply(self, req: dict, mode: str) -> dict:
        msgs = req["messages"]
        user = msgs[-1]["content"]
        logprobs = None
        finish = "stop"
        if mode == "truncated":
            text, finish = "Th", "length"
        elif mode == "garbage":
            text = "I cannot rate that."
        elif mode == "badjson":
            text = '{"score": "high"'
        elif req.get("max_tokens") == 1 and req.get("logprobs"):
            m = re.search(r"Output:\n(.*?)\n\n(?:Criterion:|Instructions:|For calibration|Rate the output)", user, flags=re.S)
            s = self.judge(m.group(1) if m else user)
            text = str(s)
            alts = [{"token": str(s), "logprob": math.log(0.7)}]
            for d in (s - 1, s + 1):
                if 1 <= d <= 5:
                    alts.append({"token": str(d), "logprob": math.log(0.12)})
            alts.append({"token": " ", "logprob": math.log(0.01)})
            logprobs = {"content": [{"token": text, "logprob": math.log(0.7), "top_logprobs": alts}]}
            finish = "length"
        elif "response_format" in req and "c1" in json.dumps(req["response_format"]):
            keys = re.findall(r'"(c\d+)"', json.dumps(req["response_format"]["schema"] if "schema" in req["response_format"] else req["response_format"]))
            text = json.dumps({k: 3 for k in dict.fromkeys(keys)})
        elif '"score"' in user and "JSON" in user:
            text = '{"score": 4}'
        elif "[[ ## criteria ## ]]" in user or "[[ ## criteria ## ]]" in msgs[0]["content"]:
            text = ("[[ ## criteria ## ]]\nConciseness: the output is short and to the point\n"
                    "Meaning preservation: the output keeps the meaning of the input\n"
                    "Fluency: the output is grammatical and natural\n\n[[ ## completed ## ]]")
        elif "level_1" in user or "level_1" in msgs[0]["content"]:
            text = "".join(f"[[ ## level_{i} ## ]]\nLevel {i} description.\n\n" for i in range(1, 6)) + "[[ ## completed ## ]]"
        elif "[[ ## score ## ]]" in user or "[[ ## score ## ]]" in msgs[0]["content"]:
            m = re.search(r"\[\[ ## output ## \]\]\n(.*?)(?:\n\n\[\[ ##|$)", user, flags=re.S)
            text = f"[[ ## score ## ]]\n{self.judge(m.group(1)) if m else 3}\n\n[[ ## completed ## ]]"
        elif "Your output fields are:" in msgs[0]["content"]:  # any other DSPy program (e.g. MIPROv2's proposer)
            section = msgs[0]["content"].split("Your output fields are:", 1)[1].split("All interactions", 1)[0]
            names = re.findall(r"^\s*\d+\.\s*`(\w+)`", section, flags=re.M)
            text = "".join(f"[[ ## {n} ## ]]\nJudge strictly how well the output serves the task; short outputs that "
                           "keep the meaning score high.\n\n" for n in names) + "[[ ## completed ## ]]"
        elif "explain" in user.lower():
            text = "The output is concise and keeps the meaning."
        else:
            text = "Conciseness: short\nFluency: natural"
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        if logprobs:
            choice["logprobs"] = logprobs
        return {"id": "x", "object": "chat.completion", "model": req.get("model"), "choices": [choice],
                "usage": {"prompt_tokens": len(json.dumps(msgs)) // 4, "completion_tokens": max(1, len(text) // 4)}}
