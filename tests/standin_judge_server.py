"""A stand-in LLM with a known signal, for fits that run their REAL generation step against it.

:class:`StandinJudgeServer` is the scripted test server (tests/scripted_judge_server.py, on
tests/fake_llm_server.py) answering a whole ``autometrics fit --llm`` as a generator and a judge:

- criteria proposals (DSPy ``ProposeCriteria`` and its plain-prompt fallback, see
  evaluators/judges/generate.py) get a fixed list of :data:`CRITERIA`, phrased the way an LLM
  would for any task: two SIGNAL criteria, one REVERSED criterion worded as the near-opposite of
  the second signal one (an embedding de-duplicator may merge the two), and ten NOISE criteria,
  in the order signal, noise, signal, reversed, noise... so the first five (the default rubric
  count) hold every signal and the reversed criterion;
- rubric prompts (``level_1`` .. ``level_5``, DSPy or plain) get level texts that run from the
  worst output (1) to the best (5) for every criterion, the reversed one included;
- code-metric prompts (evaluators/code_metric.py) get one of two small honest metrics (word
  overlap with the input, shorter words) as a ```python block;
- the prompt-optimized judge's DSPy programs (MIPROv2) get the fake server's generic replies,
  and its judge program noise;
- judge prompts (``max_tokens=1`` with logprobs) are answered from :attr:`truth`: per criterion
  one score 1..5 per row of ``frame``.  SIGNAL criteria read the label through noise calibrated
  to Kendall τ ≈ ``tau`` with the label on the whole frame (``calibrated()`` of
  tests/benchmarks/judge_signal.py), the REVERSED one reads the negated label the same way; each
  criterion draws from its own RNG seeded by (``seed``, the criterion's name), so runs repeat
  exactly.  Noise criteria, and every criterion the script does not know (example-based,
  prompt-optimized, renamed), get ``noise_score(criterion, output, seed)``.

Criterion names are matched after :func:`clean_name` and case/punctuation folding, so a single
judge and a rubric judge of one criterion both get its truth.  The judged row is found by its
output text (whitespace folded; an elided or clipped output by the part that is shown), and by
the input among rows with the same output; a probe that shows row i's output under row j's input
gets row i's value.  Every judge prompt is kept with the current :attr:`phase` (set it before a
fit or a scoring run) for token figures.

Example::

    with StandinJudgeServer(df, "score", seed=0) as srv:
        srv.phase = "fit"
        subprocess.run(["autometrics", "fit", "train.csv", "--target", "score", "--llm", f"openai/standin@{srv.url}", ...])
        srv.prompts("fit")                      # every judge prompt the fit sent
"""

from __future__ import annotations

import re
import sys
import threading
import zlib
from pathlib import Path

import numpy as np
from scripted_judge_server import ScriptedJudgeServer, noise_score

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
from judge_signal import calibrated  # noqa: E402  (tests/benchmarks is not a package)

__all__ = ["StandinJudgeServer", "CRITERIA", "SIGNAL", "REVERSED", "NOISE", "CODE_METRICS", "criterion_key"]

# (name, description: what a high score means, the worst output, the best output)
_SIGNAL = [
    ("Task fulfilment", "the output does what the task asks, fully and correctly",
     "the output ignores the task or gets it wrong", "the output does exactly what the task asks, completely and correctly"),
    ("Faithfulness to the input", "the output keeps to what the input says and adds nothing that contradicts it",
     "the output misrepresents the input or adds claims it does not support",
     "the output is entirely faithful to the input and adds nothing unsupported"),
]
# the near-opposite of faithfulness: a high score means the output is WORSE
_REVERSED = [
    ("Omissions", "the output leaves out or distorts parts of what the input asks for",
     "the output leaves out or distorts most of what the input asks for",
     "the output leaves nothing out and distorts nothing the input asks for"),
]
_NOISE = [
    ("Formal register", "the output uses formal, professional wording instead of casual language",
     "the output is casual and chatty throughout", "the output is formal and professional throughout"),
    ("Warm tone", "the output sounds friendly and warm towards the reader",
     "the output sounds cold and distant", "the output sounds warm and friendly throughout"),
    ("Brevity", "the output uses as few words as it can",
     "the output is padded with many needless words", "the output uses no word more than it needs"),
    ("Vivid wording", "the output uses concrete images and expressive words",
     "the output is flat and colourless", "the output is vivid and expressive throughout"),
    ("Courteous address", "the output addresses the reader respectfully and considerately",
     "the output is curt or dismissive towards the reader", "the output is respectful and considerate throughout"),
    ("Creative flair", "the output shows originality and an inventive turn of phrase",
     "the output is formulaic and predictable", "the output is original and inventive throughout"),
    ("Sentence rhythm", "the output's sentences vary in length and read with a pleasant rhythm",
     "the output's sentences are monotonous or choppy", "the output's sentences flow with a varied, pleasant rhythm"),
    ("Lexical variety", "the output avoids repeating words and draws on a varied vocabulary",
     "the output repeats the same few words", "the output uses a rich, varied vocabulary"),
    ("Confident voice", "the output states its points assertively, without hedging",
     "the output hedges every statement", "the output states every point with confidence"),
    ("Light humour", "the output includes a touch of wit where it fits",
     "the output is humourless and stiff", "the output has well-placed, light wit"),
]
SIGNAL = [c[0] for c in _SIGNAL]
REVERSED = [c[0] for c in _REVERSED]
NOISE = [c[0] for c in _NOISE]
# signal, noise, signal, reversed, noise, ...: the first five hold both signal criteria and the reversed one
_ORDERED = [_SIGNAL[0], _NOISE[0], _SIGNAL[1], _REVERSED[0], *_NOISE[1:]]
#: the fixed list the generator proposes: (name, description)
CRITERIA = [(c[0], c[1]) for c in _ORDERED]
_LEVELS = {c[0]: c[2:] for c in _ORDERED}


def criterion_key(name: str) -> str:
    """A criterion's name folded for matching: numbering and markdown removed (the fit's own
    ``clean_name``), lower case, letters and digits only."""
    from autometrics.evaluators.judges.criteria_checks import clean_name

    return re.sub(r"[^a-z0-9]+", "", clean_name(name).lower())


def rubric_levels(name: str, description: str) -> dict[str, str]:
    """Levels 1 (worst) .. 5 (best) of a criterion; an unknown one is described from its description."""
    low, high = _LEVELS.get(name) or (f"the output does not meet this at all: {description}", f"the output fully meets this: {description}")
    return {"1": f"{low[0].upper()}{low[1:]}.",
            "2": f"Weak: in most respects {low}, with only small exceptions.",
            "3": f"Mixed: in some respects {high}; in others {low}.",
            "4": f"Good: {high}, with minor lapses.",
            "5": f"Excellent: {high}."}


#: the code metrics the stand-in writes, in order (a prompt naming one as already written gets the next)
CODE_METRICS = {
    "input_word_overlap": '''# name: input_word_overlap
import re


def metric(input: str, output: str, reference: str | None) -> float:
    """Share of the output's words that also occur in the input."""
    words = re.findall(r"[a-z0-9']+", (output or "").lower())
    if not words:
        return 0.0
    source = set(re.findall(r"[a-z0-9']+", (input or "").lower()))
    return sum(w in source for w in words) / len(words)
''',
    "short_words": '''# name: short_words
import re


def metric(input: str, output: str, reference: str | None) -> float:
    """Negative mean word length in characters: shorter words read more easily."""
    words = re.findall(r"[A-Za-z]+", output or "")
    if not words:
        return 0.0
    return -sum(len(w) for w in words) / len(words)
''',
}

_ELIDED_START = re.compile(r"^\[… \d+ characters every example starts with …\]\n")
_ELIDED_END = re.compile(r"\n\[… \d+ characters every example ends with …\]$")
_OUTPUT_FIELDS = re.compile(r"^\s*\d+\.\s*`(\w+)`", flags=re.M)


def _fold(text: str) -> str:
    return " ".join((text or "").split())


def _shown_core(text: str) -> str:
    """What a judge prompt shows of a text, without elision markers and the clipping mark."""
    text = _ELIDED_END.sub("", _ELIDED_START.sub("", text or ""))
    return _fold(text.removesuffix(" […]"))


class StandinJudgeServer(ScriptedJudgeServer):
    """See the module docstring.  ``frame``: the rows that may be judged (``input``, ``output``
    and ``target`` columns); ``tau``: the signal criteria's agreement with the label; ``seed``: the
    draw of the truth and of the noise."""

    def __init__(self, frame, target: str, *, tau: float = 0.35, seed: int = 0, **kw):
        super().__init__(self._script, **kw)
        self.judge = lambda output: noise_score("dspy judge", output, str(seed))  # the MIPROv2 judge program: noise
        self.seed = seed
        self.tau = tau
        self.outputs = frame["output"].fillna("").astype(str).tolist()
        self.inputs = frame["input"].fillna("").astype(str).tolist() if "input" in frame else [""] * len(frame)
        y = frame[target].to_numpy(dtype=float)
        z = (y - y.mean()) / y.std()
        self.truth: dict[str, np.ndarray] = {}
        for name in SIGNAL + REVERSED:
            rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
            self.truth[name] = calibrated(-z if name in REVERSED else z, tau, rng).astype(int)
        self._known = {criterion_key(n): n for n in SIGNAL + REVERSED + NOISE}
        self._by_output: dict[str, list[int]] = {}
        for i, o in enumerate(self.outputs):
            self._by_output.setdefault(_fold(o), []).append(i)
        self._found: dict[tuple[str, str], int | None] = {}
        self.phase = ""
        self.judge_prompts: list[tuple[str, str]] = []  # (phase, prompt text) of every judge request
        self.generation: list[tuple[str, str]] = []  # (phase, kind) of every generation request answered here
        self.unmatched_rows = 0  # judge prompts of a known criterion whose row was not found (answered with noise)
        self._rec_lock = threading.Lock()

    # ------------------------------------------------------------------ the truth
    def criterion(self, name: str) -> str | None:
        """The known criterion ``name`` stands for, or None."""
        return self._known.get(criterion_key(name))

    def row(self, output: str, input_text: str = "") -> int | None:
        """The row of ``frame`` a judge prompt shows (see the module docstring), or None."""
        key = (output, input_text)
        if key not in self._found:
            rows = self._by_output.get(_fold(output))
            if rows is None:
                core = _shown_core(output)
                rows = [i for i, o in enumerate(self.outputs) if core and core in _fold(o)]
            if len(rows) > 1 and input_text:
                core_in = _shown_core(input_text)
                rows = [i for i in rows if core_in in _fold(self.inputs[i])] or rows
            self._found[key] = rows[0] if rows else None
        return self._found[key]

    def _script(self, criterion: str, output: str, input_text: str) -> int:
        known = self.criterion(criterion)
        if known in self.truth:
            r = self.row(output, input_text)
            if r is not None:
                return int(self.truth[known][r])
            with self._rec_lock:
                self.unmatched_rows += 1
        return noise_score(criterion, output, str(self.seed))

    def prompts(self, phase: str | None = None) -> list[str]:
        """The judge prompts of one phase (all with None), in arrival order."""
        return [p for ph, p in self.judge_prompts if phase is None or ph == phase]

    # ------------------------------------------------------------------ replies
    def reply(self, req: dict, mode: str) -> dict:
        msgs = req["messages"]
        if req.get("max_tokens") == 1 and req.get("logprobs"):
            with self._rec_lock:
                self.judge_prompts.append((self.phase, "\n".join(m.get("content") or "" for m in msgs)))
            return super().reply(req, mode)
        text, kind = self._generation_text(msgs) if mode == "ok" else (None, None)
        if text is None:
            return super().reply(req, mode)
        with self._rec_lock:
            self.generation.append((self.phase, kind))
        return {"id": "x", "object": "chat.completion", "model": req.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": sum(len(m.get("content") or "") for m in msgs) // 4,
                          "completion_tokens": max(1, len(text) // 4)}}

    def _generation_text(self, msgs: list[dict]) -> tuple[str | None, str | None]:
        """(reply, kind) for the generation prompts the stand-in answers itself; (None, None)
        leaves the request to the fake server (other DSPy programs, rationales)."""
        system, user = msgs[0].get("content") or "", msgs[-1].get("content") or ""
        first_user = next((m.get("content") or "" for m in msgs if m.get("role") == "user"), "")
        if "Your output fields are:" in system:  # a DSPy program: answer by its output fields
            section = system.split("Your output fields are:", 1)[1].split("All interactions", 1)[0]
            fields = _OUTPUT_FIELDS.findall(section)
            if fields == ["criteria"]:
                return self._criteria_reply(user, dspy=True), "criteria"
            if {f"level_{i}" for i in range(1, 6)} <= set(fields):
                m = re.search(r"\[\[ ## criterion ## \]\]\n(.*?)(?:\n\n|\Z)", user, flags=re.S)
                levels = self._levels_for(m.group(1) if m else "")
                return "".join(f"[[ ## level_{k} ## ]]\n{v}\n\n" for k, v in levels.items()) + "[[ ## completed ## ]]", "rubric"
            return None, None
        if "def metric(input: str, output: str" in first_user:
            written = re.search(r"Already written \(measure something different\): (.*)", first_user)
            done = set(re.split(r",\s*", written.group(1))) if written else set()
            name = next((n for n in CODE_METRICS if n not in done), next(iter(CODE_METRICS)))
            return f"```python\n{CODE_METRICS[name]}```", "code"
        if re.search(r"Write \d+ criteria, one per line\.", user):
            return self._criteria_reply(user, dspy=False), "criteria"
        if "Write a scoring rubric with five lines" in user:
            m = re.search(r"^Criterion: (.*)$", user, flags=re.M)
            levels = self._levels_for(m.group(1) if m else "")
            return "\n".join(f"{k}: {v}" for k, v in levels.items()), "rubric"
        return None, None

    def _criteria_reply(self, prompt: str, *, dspy: bool) -> str:
        m = re.search(r"\[\[ ## count ## \]\]\n(\d+)", prompt) or re.search(r"Write (\d+) criteria", prompt)
        n = int(m.group(1)) if m else len(CRITERIA)
        lines = "\n".join(f"{name}: {desc}" for name, desc in CRITERIA[: max(1, n)])
        return f"[[ ## criteria ## ]]\n{lines}\n\n[[ ## completed ## ]]" if dspy else lines

    def _levels_for(self, criterion_line: str) -> dict[str, str]:
        name, _, desc = criterion_line.strip().partition(":")
        known = self.criterion(name)
        return rubric_levels(known or name.strip(), desc.strip())
