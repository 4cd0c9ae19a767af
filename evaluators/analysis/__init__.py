"""Analyses of a fitted evaluator: robustness to perturbations (sensitivity, stability), data
scaling (held-out tau against the number of labels), and the evaluator as an optimization reward
(``reward``: DSPy GEPA/MIPROv2 metric, reward-hacking watch)."""
