"""The one duration syntax every flag and argument takes (``--budget``, ``--older-than``, ``--since``)."""

from __future__ import annotations

import datetime as dt

import pytest
from autometrics.collectors.durations import parse_duration
from autometrics.metricbank.errors import UserError


@pytest.mark.parametrize("text,seconds", [
    ("90s", 90), ("20m", 1200), ("2min", 120), ("1h30m", 5400), ("1.5h", 5400), ("30d", 30 * 86400), (" 2w ", 14 * 86400),
    ("1d", 86400), ("1d 12h", 36 * 3600), ("12H", 12 * 3600), (3600, 3600), (dt.timedelta(minutes=5), 300)])
def test_forms(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["20", "", "m", "0s", "0d", "-5d", "30x", "1mo", "30 days", "1e3h", "twenty minutes",
                                 "1h x", True, 0, float("inf"), float("nan")])
def test_refused_with_the_field_and_the_accepted_forms(bad):
    with pytest.raises(UserError, match=r"^--budget .*90s, 20m, 12h, 7d, 2w, or parts such as 1h30m"):
        parse_duration(bad, field="--budget")


def test_every_flag_takes_the_same_forms(tmp_path, capsys):
    """``--budget 1d`` and ``--older-than 1h30m`` were refused when each flag had its own parser."""
    from autometrics._cli.checks import duration
    from autometrics._cli.main import main
    from autometrics._cli.store_source import parse_since

    assert duration("1d") == 86400 and duration("1h30m") == 5400
    now = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
    assert parse_since("1d 12h", now=now) == now - dt.timedelta(hours=36)
    db = tmp_path / "app.db"
    from autometrics.collectors.store import TraceStore

    TraceStore(f"sqlite:///{db}").dispose()
    assert main(["store", "prune", "--store", f"sqlite:///{db}", "--older-than", "1h30m", "--dry-run"]) == 0
    assert main(["store", "prune", "--store", f"sqlite:///{db}", "--older-than", "90"]) == 2
    assert "--older-than" in capsys.readouterr().err
