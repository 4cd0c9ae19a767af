"""Warnings a fit shows are collected for its report (metricbank/notices.py)."""

from __future__ import annotations

import logging
import warnings

from autometrics.metricbank import notices
from autometrics.metricbank.notices import collect_warnings, warn_once

log = logging.getLogger("autometrics.test_notices")


def test_logged_and_python_warnings_are_collected_once_each(recwarn):
    with collect_warnings() as seen:
        log.warning("no %s here", "numba")
        log.warning("no numba here")
        log.info("progress: not a warning")
        warnings.warn("careful", UserWarning, stacklevel=1)
    log.warning("after the fit")
    assert seen.messages == ["no numba here", "UserWarning: careful"]
    assert [str(w.message) for w in recwarn] == ["careful"]  # still shown as before


def test_warn_once_per_process_and_again_in_each_outermost_collection(monkeypatch, caplog):
    monkeypatch.setattr(notices, "_logged_once", set())
    with caplog.at_level(logging.WARNING, logger=log.name):
        warn_once(log, "no WordNet")
        warn_once(log, "no WordNet")  # once per process outside a fit
        with collect_warnings() as first:
            warn_once(log, "no WordNet")  # a fit logs it again, so its report keeps it
            with collect_warnings() as inner:
                warn_once(log, "no WordNet")  # a nested fit (a scaling run) does not repeat it
        with collect_warnings() as second:
            warn_once(log, "no WordNet")
        warn_once(log, "no WordNet")
    assert [r.getMessage() for r in caplog.records].count("no WordNet") == 3
    assert first.messages == second.messages == ["no WordNet"] and inner.messages == []


def test_a_collection_does_not_silence_unconfigured_logging(capsys):
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()  # logging as a library user has it: not configured, last resort to stderr
    try:
        with collect_warnings() as outer, collect_warnings():
            log.warning("shown once")
    finally:
        root.handlers[:] = saved
    assert capsys.readouterr().err.count("shown once") == 1 and outer.messages == ["shown once"]
