"""The fake OpenAI-compatible server (tests/fake_llm_server.py) with judges scripted per criterion:
``script(criterion, output, input) -> int 1..5 | None`` answers each judge prompt (None: an
unreadable reply, i.e. a parse failure).  Used where a test needs one judge that carries signal
and others that are noise (screening), and by tests/benchmarks/judge_screening.py.

``ScriptedJudgeServer.judge_requests`` lists the (criterion, output) of every judge request in
arrival order, so a test can check that all criteria of one example are asked in a row.
"""

from __future__ import annotations

import hashlib
import math
import re

from fake_llm_server import FakeLLMServer

_CRITERION = re.compile(r"\n\nCriterion: (.*?)(?: — |\n|$)", flags=re.S)
_OUTPUT = re.compile(r"Output:\n(.*?)\n\n(?:Criterion:|Instructions:|For calibration|Rate the output)", flags=re.S)
_INPUT = re.compile(r"Input:\n(.*?)\n\nOutput:", flags=re.S)


def noise_score(*parts: str) -> int:
    """A deterministic score 1..5 that carries no signal: a hash of the parts."""
    return 1 + int(hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:8], 16) % 5


class ScriptedJudgeServer(FakeLLMServer):
    def __init__(self, script, **kw):
        super().__init__(**kw)
        self.script = script
        self.judge_requests: list[tuple[str, str]] = []

    def reply(self, req: dict, mode: str) -> dict:
        user = req["messages"][-1]["content"]
        if mode != "ok" or not (req.get("max_tokens") == 1 and req.get("logprobs")):
            return super().reply(req, mode)
        crit = _CRITERION.search(user)
        out = _OUTPUT.search(user)
        inp = _INPUT.search(user)
        criterion, output = (crit.group(1).strip() if crit else ""), (out.group(1) if out else "")
        with self._lock:
            self.judge_requests.append((criterion, output))
        s = self.script(criterion, output, inp.group(1) if inp else "")
        if s is None:
            text, logprobs = "I cannot rate that.", None
        else:
            s = int(min(5, max(1, s)))
            text = str(s)
            alts = [{"token": text, "logprob": math.log(0.8)}] + [
                {"token": str(d), "logprob": math.log(0.09)} for d in (s - 1, s + 1) if 1 <= d <= 5]
            logprobs = {"content": [{"token": text, "logprob": math.log(0.8), "top_logprobs": alts}]}
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        if logprobs:
            choice["logprobs"] = logprobs
        prompt_tokens = sum(len(m.get("content") or "") for m in req["messages"]) // 4
        return {"id": "x", "object": "chat.completion", "model": req.get("model"), "choices": [choice],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}}
