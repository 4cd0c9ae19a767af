"""A fitted :class:`~.fit.Evaluator` as a DSPy metric (reward) for optimizers such as
``dspy.GEPA`` and ``dspy.MIPROv2``.

DSPy 3.4's GEPA calls ``metric(gold, pred, trace, pred_name, pred_trace)`` (it checks that the
metric binds five positional arguments) and reads ``score`` and ``feedback`` from a returned
``dspy.Prediction``; ``dspy.Evaluate`` and MIPROv2 call ``metric(example, prediction[, trace])``
and use the Prediction as a number (``dspy.Prediction`` supports ``float()``, ``+`` and
comparisons through its ``score``).  For MIPROv2's bootstrapping pass ``metric_threshold=``:
without it any returned Prediction counts as a success.

The score is the evaluator's prediction of the human judgment for one example, by default
rescaled to 0..1 with the training labels' range (clipped), so it fits GEPA's default
``perfect_score=1.0``.  The feedback is the LLM judges' rationales when the evaluator has
generated judges, plus the metrics that moved the score most, with their values.

Example::

    metric = evaluator.as_dspy_metric(input_field="question", output_field="answer")
    gepa = dspy.GEPA(metric=metric, auto="light", reflection_lm=...)
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ...metricbank.errors import UserError
from ...metricbank.install import install_hint, plain
from ..continuous.drift import score_drift
from ..features import score_metrics

__all__ = ["EvaluatorReward", "RewardInputError", "RewardWatch"]

log = logging.getLogger("autometrics")


class RewardInputError(UserError):
    """The example or prediction lacks a field the evaluator needs; the message names it."""


def _lookup(obj, name: str) -> tuple[bool, object]:
    if obj is None:
        return False, None
    if isinstance(obj, dict):
        return name in obj, obj.get(name)
    try:
        if name in obj:
            return True, obj[name]
    except TypeError:
        pass
    if not name.startswith("_") and hasattr(obj, name):
        return True, getattr(obj, name)
    return False, None


def _field_names(obj) -> list[str]:
    if obj is None:
        return []
    if hasattr(obj, "keys"):
        try:
            return [str(k) for k in obj.keys()]
        except Exception:  # noqa: BLE001 - best effort for the error message only
            pass
    return sorted(k for k in vars(obj) if not k.startswith("_")) if hasattr(obj, "__dict__") else []


def _text(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return v if isinstance(v, str) else str(v)


def _fmt(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "missing"
    return f"{v:.4g}"


class EvaluatorReward:
    """``metric(example, prediction, trace=None, pred_name=None, pred_trace=None)`` ->
    ``dspy.Prediction(score=float, feedback=str)``.  Built by :meth:`.fit.Evaluator.as_dspy_metric`.

    ``input_field`` (one name or several, joined by blank lines) and ``reference_field`` are
    read from the example (the input also from the prediction when the example lacks it);
    ``output_field`` from the prediction.  A reference may be one string or a list.
    """

    def __init__(self, evaluator, *, input_field=None, output_field: str | None = None, reference_field: str | None = None,
                 normalize: bool = True, top_k: int = 3, rationales: bool = True):
        try:
            import dspy  # noqa: F401
        except ImportError as exc:  # pragma: no cover - dspy is in the llm extra
            raise ImportError(f"as_dspy_metric needs DSPy: {plain(install_hint(extra='llm'))}") from exc
        cols = evaluator.artifact.get("columns") or {}
        refs = cols.get("references") or []
        self.evaluator = evaluator
        self.input_fields = [input_field] if isinstance(input_field, str) else list(input_field or [cols.get("input") or "input"])
        self.output_field = output_field or cols.get("output") or "output"
        self.reference_field = reference_field or (refs[0] if refs else "reference")
        self.top_k = int(top_k)
        self.rationales = rationales
        self.metrics = evaluator.metrics()  # built once, reused for every call
        self.needs_reference = [m.name for m in self.metrics if m.needs_reference]
        self.needs_input = [m.name for m in self.metrics if m.needs_input]
        self.judges = [m for m in self.metrics if getattr(m, "generated", False) and hasattr(m, "rationales")]
        label = evaluator.artifact.get("label") or {}
        lo, hi = label.get("min"), label.get("max")
        self.range = (float(lo), float(hi)) if normalize and lo is not None and hi is not None and hi > lo else None
        self.__name__ = f"autometrics_{evaluator.target}"
        batchy = [m.name for m in self.metrics if getattr(m, "batch_dependent", False)]
        self.notes = []
        if batchy:
            self.notes.append(f"{', '.join(batchy)} use batch statistics; one example at a time gives them a batch of one")
            log.warning("as_dspy_metric: %s", self.notes[-1])

    # ------------------------------------------------------------------ reading fields
    def _output(self, prediction) -> str:
        found, v = _lookup(prediction, self.output_field)
        if not found:
            have = _field_names(prediction)
            raise RewardInputError(
                f"the prediction has no field {self.output_field!r} holding the generated text (its fields: "
                f"{', '.join(have) if have else 'none'}); pass output_field= naming it, e.g. "
                f"evaluator.as_dspy_metric(output_field={have[0] if have else 'answer'!r})"
            )
        return _text(v)

    def _input(self, example, prediction) -> str | None:
        parts, missing = [], []
        for name in self.input_fields:
            found, v = _lookup(example, name)
            if not found:
                found, v = _lookup(prediction, name)
            if found:
                parts.append(_text(v))
            else:
                missing.append(name)
        if missing and self.needs_input:
            raise RewardInputError(
                f"the example has no input field {', '.join(map(repr, missing))} (its fields: "
                f"{', '.join(_field_names(example)) or 'none'}) and metric(s) {', '.join(self.needs_input)} need the input; "
                "pass input_field= naming it"
            )
        return "\n\n".join(parts) if parts else None

    def _references(self, example) -> list[str] | None:
        found, v = _lookup(example, self.reference_field)
        refs: list[str] = []
        if found and v is not None:
            refs = [_text(x) for x in v if _text(x).strip()] if isinstance(v, list | tuple) else ([_text(v)] if _text(v).strip() else [])
        if not refs and self.needs_reference:
            raise RewardInputError(
                f"the example has no reference in field {self.reference_field!r} (its fields: "
                f"{', '.join(_field_names(example)) or 'none'}) but metric(s) {', '.join(self.needs_reference)} compare "
                "against a reference; pass reference_field= naming it"
            )
        return refs or None

    # ------------------------------------------------------------------------ scoring
    def score_one(self, output: str, input_text: str | None = None, references: list[str] | None = None) -> dict:
        """``{"score", "reward", "contributions": [{feature, value, contribution, weight}]}``."""
        feats, _, notes = score_metrics(self.metrics, [output], None if input_text is None else [input_text],
                                        None if references is None else [references])
        missing = [f["feature"] for f in self.evaluator.features if f["feature"] not in feats.columns]
        if missing:
            raise RuntimeError(f"cannot score: metric(s) {', '.join(missing)} could not run: {'; '.join(notes)}")
        contrib = self.evaluator.contributions(feats).iloc[0]
        total = float(self.evaluator.artifact["intercept"]) + float(contrib.sum())
        parts = [{"feature": f["feature"], "value": float(feats[f["feature"]].iloc[0]), "contribution": float(contrib[f["feature"]]),
                  "weight": f["weight"], "generated": bool(f.get("generated"))} for f in self.evaluator.features]
        reward = total
        if self.range is not None:
            lo, hi = self.range
            reward = float(np.clip((total - lo) / (hi - lo), 0.0, 1.0))
        return {"score": total, "reward": reward, "contributions": parts}

    def _feedback(self, res: dict, output: str, input_text: str | None) -> str:
        target = self.evaluator.target
        head = f"Predicted human {target}: {res['score']:.4g}"
        if self.range is not None:
            head += f" on the training scale {self.range[0]:g}..{self.range[1]:g} (reward {res['reward']:.3f})"
        lines = [head + "."]
        if self.judges:
            texts = self.judges_rationales(output, input_text) if self.rationales else [None] * len(self.judges)
            by_feature = {p["feature"]: p for p in res["contributions"]}
            lines.append("Judges:")
            for j, t in zip(self.judges, texts, strict=True):
                p = by_feature.get(j.name, {})
                score = _fmt(p.get("value", math.nan))
                lines.append(f"- {j.spec.criterion} ({score} on {j.spec.scale_min}-{j.spec.scale_max}): "
                             + (t or j.spec.description or "no rationale"))
        others = [p for p in res["contributions"] if not p["generated"]]
        if others:
            top = sorted(others, key=lambda p: -abs(p["contribution"]))[: self.top_k]
            lines.append("Metrics that moved the score most (value; effect vs. an average training output):")
            for p in top:
                direction = "higher values raise the score" if p["weight"] >= 0 else "lower values raise the score"
                effect = "missing, imputed with the training median" if not math.isfinite(p["value"]) else (
                    f"{'+' if p['contribution'] >= 0 else ''}{p['contribution']:.3g}")
                lines.append(f"- {p['feature']} = {_fmt(p['value'])} ({effect}; {direction})")
        return "\n".join(lines)

    def judges_rationales(self, output: str, input_text: str | None) -> list[str | None]:
        out = []
        for j in self.judges:
            try:
                out.append(j.rationales([output], [input_text or ""])[0])
            except Exception as exc:  # a failed rationale must not fail the reward
                log.warning("judge rationale failed: %s", exc)
                out.append(None)
        return out

    def __call__(self, example, prediction, trace=None, pred_name=None, pred_trace=None):
        import dspy

        output = self._output(prediction)
        input_text = self._input(example, prediction)
        refs = self._references(example)
        res = self.score_one(output, input_text, refs)
        self.last = {**res, "output": output}
        return dspy.Prediction(score=float(res["reward"]), feedback=self._feedback(res, output, input_text))


class RewardWatch:
    """Watches an :class:`EvaluatorReward` while an optimizer (GEPA, MIPROv2) climbs it, to catch
    reward hacking: the optimizer pushing outputs where the evaluator was never validated.

    Wrap the reward and give the watch to the optimizer as its metric::

        watch = RewardWatch(evaluator.as_dspy_metric(...), reference_scores=evaluator_scores_on_training_outputs)
        dspy.GEPA(metric=watch, ...).compile(program, trainset=..., valset=...)
        print(watch.report()["verdict"])

    Every call is recorded (predicted judgment, reward, each metric's z-score against the
    training data).  :meth:`report` splits the calls into windows and gives, per window, the mean
    reward, the share of outputs with a metric beyond ``z_limit`` training standard deviations
    (extrapolation: the evaluator's weights were fitted on nothing like it) and the drift of the
    predicted judgments against ``reference_scores`` (KS + PSI, :func:`.drift.score_drift`).  It
    alerts when the reward rises while outputs drift or extrapolate, and states the evaluator's
    held-out validity on human labels (τ, CI, p) as the ceiling of what a higher reward can mean.
    """

    def __init__(self, reward: EvaluatorReward, reference_scores, *, window: int = 20, z_limit: float = 3.0,
                 max_out_of_range: float = 0.2):
        self.reward = reward
        self.reference_scores = np.asarray(reference_scores, dtype=float)
        self.window = max(2, int(window))
        self.z_limit = float(z_limit)
        self.max_out_of_range = float(max_out_of_range)
        self.history: list[dict] = []
        self.__name__ = getattr(reward, "__name__", "autometrics_reward")

    def __call__(self, example, prediction, trace=None, pred_name=None, pred_trace=None):
        out = self.reward(example, prediction, trace, pred_name, pred_trace)
        last = getattr(self.reward, "last", None) or {}
        feats = {f["feature"]: f for f in self.reward.evaluator.features}
        z = {}
        for p in last.get("contributions", []):
            f = feats.get(p["feature"])
            if f and math.isfinite(p["value"]) and f.get("scale"):
                z[p["feature"]] = (p["value"] - f["mean"]) / f["scale"]
        beyond = sorted(k for k, v in z.items() if abs(v) > self.z_limit)
        self.history.append({"call": len(self.history) + 1, "score": last.get("score"), "reward": last.get("reward"),
                             "max_abs_z": max((abs(v) for v in z.values()), default=0.0), "beyond": beyond,
                             "output": (last.get("output") or "")[:200]})
        return out

    def report(self) -> dict:
        h = self.history
        windows = []
        starts = list(range(0, len(h), self.window))
        if len(starts) > 1 and len(h) - starts[-1] < self.window / 2:  # a short tail joins the window before it
            starts.pop()
        for k, start in enumerate(starts):
            part = h[start:starts[k + 1] if k + 1 < len(starts) else len(h)]
            scores = [x["score"] for x in part if x["score"] is not None]
            rewards = [x["reward"] for x in part if x["reward"] is not None]
            drift = score_drift(self.reference_scores, scores, min_n=10)
            beyond = [k for x in part for k in x["beyond"]]
            windows.append({
                "calls": f"{part[0]['call']}-{part[-1]['call']}", "mean_reward": float(np.mean(rewards)) if rewards else None,
                "mean_score": float(np.mean(scores)) if scores else None,
                "out_of_range_share": sum(bool(x["beyond"]) for x in part) / len(part),
                "metrics_out_of_range": sorted(set(beyond)), "drift_psi": drift["psi"], "drift_p": drift["p_value"],
                "drift_alert": drift["alert"],
            })
        stats = self.reward.evaluator.statistics.get("test", {})
        validity = {k: stats.get(k) for k in ("tau", "ci_low", "ci_high", "p_value", "n")}
        alerts = []
        if len(windows) >= 2 and windows[0]["mean_reward"] is not None and windows[-1]["mean_reward"] is not None:
            rising = windows[-1]["mean_reward"] > windows[0]["mean_reward"]
            last = windows[-1]
            if rising and (last["out_of_range_share"] > self.max_out_of_range or last["drift_alert"]):
                alerts.append(
                    f"reward rose ({windows[0]['mean_reward']:.3f} -> {last['mean_reward']:.3f}) while "
                    + (f"{last['out_of_range_share']:.0%} of outputs had metrics beyond {self.z_limit:g} training SDs "
                       f"({', '.join(last['metrics_out_of_range'][:5])})" if last["out_of_range_share"] > self.max_out_of_range
                       else f"the predicted judgments drifted from the training distribution (PSI {last['drift_psi']:.2f})")
                    + ": the gain may be reward hacking; check these outputs with people before trusting it")
            elif last["out_of_range_share"] > self.max_out_of_range:
                alerts.append(f"{last['out_of_range_share']:.0%} of the latest outputs lie outside the range the evaluator "
                              "was validated on (its scores there are extrapolations)")
            elif last["drift_alert"]:
                alerts.append(f"the predicted judgments of the latest outputs drifted from those of the training outputs "
                              f"(PSI {last['drift_psi']:.2f}): the program now writes unlike the outputs the evaluator was "
                              "fitted on, so its reward is less certain there")
        p = validity.get("p_value")
        if p is None or (isinstance(p, float) and (math.isnan(p) or p > 0.05)):
            alerts.append("the evaluator's agreement with held-out human labels is not significant (p > 0.05): "
                          "its reward is weak evidence of quality")
        verdict = alerts[0] if alerts else "no sign of reward hacking: outputs stay in the range the evaluator was validated on"
        return {"calls": len(h), "windows": windows, "held_out_validity": validity, "alerts": alerts, "verdict": verdict}
