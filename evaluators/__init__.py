"""Evaluators: the AutoMetrics method and everything that runs it.

Layout (one home per concern):

- core, at this level: ``data`` (load and validate labelled data), ``scoring`` (score texts
  with metrics), ``regression`` (metric selection + weights), ``induce`` (from a scored matrix to
  a validated evaluator), ``estimator`` (the fit as a scikit-learn estimator,
  ``AutoMetricsRegressor``), ``fit`` (**the one entry point**, ``fit_evaluator``), ``evaluator``
  (the JSON artifact and its formula), ``stats`` (Kendall tau, bootstrap, paired differences),
  ``report`` (Markdown/HTML).
- ``llm/``: LLM infrastructure (model config, client, reply cache, the embedded local model).
- ``judges/``: the LLM half of the method (generated judges, retrieval, ``LLMOptions``).
- ``continuous/``: refit on a schedule, online scoring, drift (``Monitor``, ``Worker``).
- ``analysis/``: robustness, data scaling, the evaluator as an optimization reward.
- ``benchmark/``: baselines and the benchmark harness.

Vocabulary (used in code, CLI output, reports and the dashboard):

- **label**: the human judgment of one example (a data column, or a feedback name in the
  trace store).  ``target`` names the label a fit predicts (``--target``).
- **example** (a row): one input, output and optional references.
- **metric**: any candidate scorer, a MetricBank metric or a generated **judge** (an LLM metric).
  A metric yields one or more **features** (numeric columns, e.g. ``ROUGE.rouge1``).
- **criterion**: what a judge rates; a **rubric** gives its levels.  The judge's *kind* is its
  generator (single, rubric, example, optimized).
- **score**: the evaluator's prediction of the label (``autometrics_score``); a metric produces
  **values**.  **weight** and **contribution** (``weight * z``) explain a score.
- **agreement**: Kendall tau-b between scores and labels, with a bootstrap CI and a p-value.
- **version**: an evaluator stored by the continuous loop: champion, rejected or retired.
"""
