"""Progress bars only on a terminal (issue #28): written to a file, tqdm's redraws ran into the
next log line."""

from __future__ import annotations

import sys

from autometrics.evaluators.features import score_metrics
from autometrics.metricbank import get_metric


class _Terminal:
    """A stand-in stderr that says it is a terminal and keeps what is written."""

    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return True


def test_no_progress_bar_when_stderr_is_not_a_terminal(capsys, monkeypatch):
    metrics = [get_metric("LengthRatio"), get_metric("OutputLength")]
    outputs, inputs = ["a short one", "another output"], ["a longer input text", "the input"]
    score_metrics(metrics, outputs, inputs, None, progress=True)
    assert "scoring metrics" not in capsys.readouterr().err  # pytest's capture is a file, not a terminal
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    score_metrics(metrics, outputs, inputs, None, progress=True)
    assert "scoring metrics" in tty.text  # on a terminal the bar is drawn
