"""Continuous evaluation on the trace store: refit on a schedule, promote only better versions,
score new traces online, watch drift.

- ``monitor``: :class:`Monitor`, one (store, project, label) — each job is one method
  (``refit``, ``score_new``, ``check_drift``, ``tick``); all SQL goes through the store's methods.
- ``refit``: the statistics of a refit (newest-feedback holdout, paired bootstrap, decision).
- ``drift``: score drift (KS + PSI) and validity decay.
- ``scoring``: online scoring shared by any number of workers (claims with a lease, LLM judges
  with sampling, an hourly budget and bounded concurrency).
- ``worker``: the APScheduler worker that runs the monitor's jobs; it publishes through hooks
  (dashboard, Langfuse) that the CLI wires, so it imports no later stage.
"""
