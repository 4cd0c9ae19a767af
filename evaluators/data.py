"""Loading and validating human-judgment data: CSV, JSONL, Parquet or a pandas DataFrame.

Every problem is reported as a :class:`DataError` that names the file, column and rows at
fault and says how to fix it.  Rows whose target is missing are excluded and counted (never
filled with 0); missing or empty outputs are kept as real data (a system that produced
nothing) and counted in the warnings.

Example::

    ds = load_dataset("simpeval.csv", target="score")
    train, test = ds.split(test_size=0.3, seed=0)
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..collectors.feedback import binary_word
from ..metricbank.errors import DataError
from .tables import (
    as_text,
    builtin_dataset_path,
    parse_reference_cell,
    read_table,
    row_ref,
)

__all__ = [
    "Dataset",
    "LabelInfo",
    "load_dataset",
    "read_table",
    "parse_labels",
    "check_target",
    "builtin_dataset_path",
    "MIN_LABELLED",
]

MIN_LABELLED = 10
#: labels beyond this magnitude are refused: no human judgment is that large, and squares of values near
#: 1e154 overflow float64 (the regression then fails with "A has a NaN entry")
MAX_LABEL_MAGNITUDE = 1e12
#: frame column of a subset whose train/test split is fixed (:meth:`Dataset.with_split`)
FIXED_SPLIT = "__autometrics_split__"

# Binary vocabularies (lower-cased, stripped).  1 = the positive judgment.
_DECIMAL_COMMA = re.compile(r"^[-+]?\d+,\d+$")


@dataclass
class LabelInfo:
    """What kind of human judgment a target column holds (detected, reported to the user)."""

    kind: str  # binary | likert | scale_0_100 | z_score | count | continuous
    n_labelled: int
    n_missing: int
    minimum: float
    maximum: float
    n_distinct: int
    mapping: dict[str, float] | None = None  # for textual binary labels

    def describe(self) -> str:
        names = {
            "binary": "binary",
            "likert": "Likert-type rating",
            "scale_0_100": "0-100 rating",
            "z_score": "z-normalised score",
            "count": "behavioural count",
            "continuous": "continuous score",
        }
        base = f"{names[self.kind]} ({self.n_distinct} distinct values, range {self.minimum:g}..{self.maximum:g})"
        if self.mapping:
            base += " mapped " + ", ".join(f"{k!r}->{v:g}" for k, v in sorted(self.mapping.items()))
        return base

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "n_labelled": self.n_labelled,
            "n_missing": self.n_missing,
            "min": self.minimum,
            "max": self.maximum,
            "n_distinct": self.n_distinct,
            "mapping": self.mapping,
        }


def _require_column(frame: pd.DataFrame, col: str, role: str, source: str, flag: str) -> None:
    if col in frame.columns:
        return
    close = difflib.get_close_matches(col, [str(c) for c in frame.columns], n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}? " if close else " "
    raise DataError(
        f"{source}: no column {col!r} for the {role}.{hint}Columns present: {', '.join(map(str, frame.columns))}. "
        f"Pass {flag} COLUMN to choose another."
    )


def _no_input_warning(frame: pd.DataFrame, input_col: str, taken: list[str], group_col: str | None) -> str:
    """What data without its input column loses, the columns that could hold the inputs, and the flag."""
    cols = [str(c) for c in frame.columns]
    close = difflib.get_close_matches(input_col, [c for c in cols if c not in taken and c != group_col], n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    split = "" if group_col else ", and rows are split one by one instead of grouped by input"
    return (f"no {input_col!r} column: the outputs are used alone (metrics that need the input are skipped{split}). "
            f"Columns present: {', '.join(cols)}. If one of them holds the inputs (prompts, sources), {hint}"
            "pass --input-col NAME.")


def parse_labels(values: pd.Series, column: str, source: str = "<data>") -> tuple[np.ndarray, LabelInfo]:
    """Parse a target column to floats (NaN = missing) and detect its label kind.

    Numbers pass through; textual binary labels (yes/no, pass/fail, thumbs up/down, true/false,
    ...) map to 1/0.  One column holds one kind: words next to numbers other than 0/1 (``yes``
    in a 1-100 rating column) are refused with the rows named, never mapped into the scale.
    Anything else that is not a label, and values that are not finite or beyond
    :data:`MAX_LABEL_MAGNITUDE`, are errors that show the offending rows.
    """
    mapping: dict[str, float] = {}
    out = np.full(len(values), np.nan)
    bad: list[tuple[int, object]] = []
    words: list[tuple[int, object]] = []  # rows whose label came from the binary vocabulary
    for i, v in enumerate(values.tolist()):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if isinstance(v, bool | np.bool_):
            out[i] = float(v)
            mapping[str(bool(v)).lower()] = float(v)
            words.append((i, v))
            continue
        if isinstance(v, int | float | np.integer | np.floating):
            out[i] = float(v)
            continue
        s = str(v).strip()
        if not s or s.lower() in {"nan", "none", "null", "na", "n/a"}:
            continue
        try:
            out[i] = float(s)
            continue
        except ValueError:
            pass
        word = binary_word(s)
        if word is not None:
            out[i] = word
            mapping[s.lower()] = out[i]
            words.append((i, v))
        else:
            bad.append((i, v))
    if bad:
        examples = "; ".join(f"{row_ref(source, i)}: {v!r}" for i, v in bad[:5])
        comma = any(isinstance(v, str) and _DECIMAL_COMMA.match(v.strip()) for _, v in bad)
        raise DataError(
            f"{source}: column {column!r} has {len(bad)} value(s) that are not labels: {examples}. "
            + ("Write decimals with a point (4.5, not 4,5). " if comma else "")
            + "Use numbers (Likert 1-5, 1-100, z-scores, counts) or binary words (true/false, yes/no, pass/fail, "
            "thumbs up/down, 1/0); leave a cell empty for a missing label."
        )
    _check_magnitudes(out, column, source)
    if words:
        from_words = {j for j, _ in words}
        numeric = [(i, out[i]) for i in range(len(out)) if not np.isnan(out[i]) and i not in from_words]
        scale = [(i, x) for i, x in numeric if x not in (0.0, 1.0)]
        if scale:
            lo, hi = min(x for _, x in numeric), max(x for _, x in numeric)
            where = "; ".join(f"{row_ref(source, i)}: {v!r}" for i, v in words[:5])
            raise DataError(
                f"{source}: column {column!r} mixes a numeric scale ({len(numeric)} numbers from {lo:g} to {hi:g}) with "
                f"{len(words)} word label(s) ({where}{'; ...' if len(words) > 5 else ''}). A column must hold one kind of "
                "label: replace the words by numbers on the scale, empty them (missing label), or keep yes/no labels "
                "in their own column."
            )
    labelled = out[~np.isnan(out)]
    n_distinct = int(len(np.unique(labelled))) if len(labelled) else 0
    lo = float(labelled.min()) if len(labelled) else float("nan")
    hi = float(labelled.max()) if len(labelled) else float("nan")
    is_int = bool(len(labelled)) and bool(np.all(np.isclose(labelled, np.round(labelled))))
    kind = _label_kind(labelled, is_int, bool(mapping))
    info = LabelInfo(
        kind=kind,
        n_labelled=int(len(labelled)),
        n_missing=int(np.isnan(out).sum()),
        minimum=lo,
        maximum=hi,
        n_distinct=n_distinct,
        mapping=mapping or None,
    )
    return out, info


def _check_magnitudes(out: np.ndarray, column: str, source: str) -> None:
    """Refuse infinite labels and labels beyond :data:`MAX_LABEL_MAGNITUDE`, naming the rows."""
    with np.errstate(invalid="ignore"):
        far = np.flatnonzero(~np.isnan(out) & ~(np.abs(out) <= MAX_LABEL_MAGNITUDE))
    if len(far):
        what = "an infinite" if np.isinf(out[far]).all() else "a non-finite or absurdly large"
        rows = "; ".join(f"{row_ref(source, int(i))}: {out[i]:g}" for i in far[:5])
        raise DataError(
            f"{source}: column {column!r} has {len(far)} label(s) with {what} value ({rows}). Labels must be finite "
            f"numbers within ±{MAX_LABEL_MAGNITUDE:g}; fix those cells or leave them empty (missing label)."
        )


def _label_kind(labelled: np.ndarray, is_int: bool, textual_binary: bool) -> str:
    """Best-effort label kind, reported to the user (it does not change the fit)."""
    if not len(labelled):
        return "continuous"
    lo, hi, med = float(labelled.min()), float(labelled.max()), float(np.median(labelled))
    if textual_binary or set(np.unique(labelled)).issubset({0.0, 1.0}):
        return "binary"
    if lo < 0:
        return "z_score"
    # counts of behaviour (copies, retries, clicks) are integers from 0, usually skewed to small values
    skewed_count = is_int and lo == 0 and med <= 1 and hi >= 3
    if hi <= 10:
        return "count" if skewed_count else "likert"
    if hi <= 100:
        return "count" if is_int and med <= 5 else "scale_0_100"
    return "count" if is_int else "continuous"


def _check_roles(targets: list[str], roles: dict[str, str | None], source: str) -> None:
    """A column plays one part: a target that is also the output (or input, id, ...) column, or
    one column given as input and output, is a mix-up of flags, refused before anything runs."""
    for t in targets:
        for flag, col in roles.items():
            if col and col == t:
                raise DataError(f"{source}: column {t!r} is both the --target and the {flag.split()[0]} column; "
                                "a judgment cannot also be the text it judges. Check the flags.")
    if roles.get("--input-col") and roles["--input-col"] == roles.get("--output-col"):
        raise DataError(f"{source}: --input-col and --output-col both name {roles['--output-col']!r}; pass the column "
                        "holding the prompts as --input-col and the generated text as --output-col.")


@dataclass
class Dataset:
    """Validated examples: ``frame`` has columns id, group, input, output, references (list of
    str) and one float column per target (NaN = unlabelled)."""

    frame: pd.DataFrame
    targets: list[str]
    labels: dict[str, LabelInfo]
    source: str
    columns: dict[str, object]
    warnings: list[str] = field(default_factory=list)
    has_references: bool = False
    has_input: bool = True

    def __len__(self) -> int:
        return len(self.frame)

    @property
    def inputs(self) -> list[str]:
        return self.frame["input"].tolist()

    @property
    def outputs(self) -> list[str]:
        return self.frame["output"].tolist()

    @property
    def references(self) -> list[list[str]] | None:
        return self.frame["references"].tolist() if self.has_references else None

    def y(self, target: str | None = None) -> np.ndarray:
        return self.frame[target or self.targets[0]].to_numpy(dtype=float)

    def labelled(self, target: str | None = None) -> Dataset:
        """Only rows that carry a label for ``target``."""
        target = target or self.targets[0]
        keep = self.frame[target].notna().to_numpy()
        return self.subset(np.flatnonzero(keep))

    def subset(self, positions) -> Dataset:
        return Dataset(
            frame=self.frame.iloc[np.asarray(positions, dtype=int)].reset_index(drop=True),
            targets=self.targets,
            labels=self.labels,
            source=self.source,
            columns=self.columns,
            warnings=list(self.warnings),
            has_references=self.has_references,
            has_input=self.has_input,
        )

    def fingerprint(self) -> str:
        """sha256 over the content that a fit depends on (texts, references, targets)."""
        h = hashlib.sha256()
        cols = ["id", "input", "output", "references", *self.targets]
        for row in self.frame[cols].itertuples(index=False):
            h.update(json.dumps([str(x) if not isinstance(x, list) else x for x in row], ensure_ascii=False).encode())
            h.update(b"\n")
        return h.hexdigest()

    def split_positions(self, test_size: float | None = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Train/test positions grouped by ``group`` (by default the input): the same input is
        never on both sides.  Seeded and deterministic.  A subset made by :meth:`with_split`
        keeps the split it was given (``test_size`` and ``seed`` are then not used).
        ``test_size`` None: no held-out split (validity is cross-fitted): every row trains."""
        if FIXED_SPLIT in self.frame.columns:
            is_test = self.frame[FIXED_SPLIT].to_numpy(dtype=bool)
            return np.flatnonzero(~is_test), np.flatnonzero(is_test)
        if test_size is None:
            return np.arange(len(self.frame)), np.array([], dtype=int)
        if not 0 < test_size < 1:
            raise DataError(f"test_size must be between 0 and 1 (exclusive), got {test_size}")
        from sklearn.model_selection import GroupShuffleSplit

        groups = self.frame["group"].astype(str).to_numpy()
        if len(np.unique(groups)) < 2:
            raise DataError(
                "all rows share one input/group, so a grouped train/test split is impossible. "
                "Pass --group-col with a column that varies, or more distinct inputs."
            )
        splitter = GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=seed)
        train, test = next(splitter.split(np.zeros(len(groups)), groups=groups))
        return np.sort(train), np.sort(test)

    def has_holdout(self, test_size: float | None) -> bool:
        """Whether a fit validates on a held-out split (``test_size`` given, or a split fixed by
        :meth:`with_split`) rather than by cross-fitting every row."""
        if FIXED_SPLIT in self.frame.columns:
            return bool(self.frame[FIXED_SPLIT].to_numpy(dtype=bool).any())
        return test_size is not None

    def with_split(self, train_pos, test_pos) -> Dataset:
        """The rows at ``train_pos`` and ``test_pos`` (of this dataset), with that split fixed:
        e.g. a budget plan that scores judges on fewer training rows keeps every held-out row, so
        the evaluator with judges and the LLM-free one are validated on the same rows."""
        train_pos, test_pos = np.asarray(train_pos, dtype=int), np.asarray(test_pos, dtype=int)
        pos = np.concatenate([train_pos, test_pos])
        sub = self.subset(pos)
        sub.frame[FIXED_SPLIT] = np.r_[np.zeros(len(train_pos), dtype=bool), np.ones(len(test_pos), dtype=bool)]
        return sub

    def split(self, test_size: float = 0.3, seed: int = 0) -> tuple[Dataset, Dataset]:
        train, test = self.split_positions(test_size, seed)
        return self.subset(train), self.subset(test)


def check_target(info: LabelInfo, column: str, source: str, min_labelled: int = MIN_LABELLED) -> list[str]:
    """Refuse labels no evaluator can be fitted to (too few, or constant), naming ``source`` and
    ``column``; returns the warnings the data still deserves (rows without a label)."""
    if info.n_labelled < min_labelled:
        raise DataError(
            f"{source}: column {column!r} has only {info.n_labelled} labelled row(s); at least {min_labelled} "
            "are needed to fit and validate an evaluator. Collect more feedback first."
        )
    if info.n_distinct < 2:
        raise DataError(
            f"{source}: column {column!r} is constant ({info.minimum:g} on all {info.n_labelled} labelled rows); "
            "a constant judgment cannot be predicted. Check that you chose the right --target."
        )
    return [f"{info.n_missing} row(s) have no {column!r} label; they are excluded from the fit."] if info.n_missing else []


def load_dataset(
    data,
    target: str | list[str] | None = None,
    *,
    input_col: str = "input",
    output_col: str = "output",
    reference_cols: list[str] | str | None = None,
    id_col: str | None = "id",
    group_col: str | None = None,
    require_target: bool = True,
    min_labelled: int = MIN_LABELLED,
    source: str | None = None,
) -> Dataset:
    """Load and validate data for fitting (``require_target``) or scoring.

    ``reference_cols`` default: ``references`` (a JSON list per row) if present, else
    ``reference``, else no references.  Several columns may be given; a column may hold a
    single string or a JSON list.  ``source`` names the data in error messages when a caller
    has already read the file into a DataFrame (e.g. ``source="new.csv"``).
    """
    frame, label = read_table(data)
    source = source or label
    frame.columns = [str(c) for c in frame.columns]
    warnings: list[str] = [frame.attrs["autometrics_read_note"]] if frame.attrs.get("autometrics_read_note") else []

    targets = [target] if isinstance(target, str) else list(target or [])
    if require_target and not targets:
        raise DataError("no target given: pass --target COLUMN naming the human-judgment column.")
    twice = sorted({t for t in targets if targets.count(t) > 1})
    if twice:
        raise DataError(f"target {twice[0]!r} is given more than once; name each --target once.")

    _require_column(frame, output_col, "outputs (the generated text to evaluate)", source, "--output-col")
    has_input = input_col in frame.columns
    if not has_input:
        if input_col != "input":
            _require_column(frame, input_col, "inputs", source, "--input-col")
        # a warning, not an error: outputs rated on their own are a real case (fitted on output-only metrics)
        warnings.append(_no_input_warning(frame, input_col, [output_col, *targets, id_col or ""], group_col))

    if reference_cols is None:
        reference_cols = [c for c in ("references", "reference") if c in frame.columns][:1]
    elif isinstance(reference_cols, str):
        reference_cols = [reference_cols]
    for col in reference_cols:
        _require_column(frame, col, "references", source, "--reference-col")

    for t in targets:
        _require_column(frame, t, "target (human judgment)", source, "--target")
    _check_roles(targets, {"--output-col": output_col, "--input-col": input_col if has_input else None,
                           "--id-col": id_col, "--group-col": group_col,
                           **{f"--reference-col {c}": c for c in reference_cols}}, source)

    out = pd.DataFrame(index=range(len(frame)))
    if id_col and id_col in frame.columns:
        ids = frame[id_col].astype(str)
        dup = ids[ids.duplicated(keep=False)]
        if len(dup):
            first = dup.drop_duplicates().head(3)
            where = "; ".join(
                f"{v!r} at " + ", ".join(row_ref(source, int(i)) for i in np.flatnonzero(ids.to_numpy() == v)[:3])
                for v in first
            )
            raise DataError(
                f"{source}: column {id_col!r} has {dup.nunique()} duplicated id(s): {where}. "
                "Ids must be unique; fix them or pass --id-col with another column (or --id-col '' to number rows)."
            )
        out["id"] = ids.to_numpy()
    else:
        if id_col and id_col != "id":
            _require_column(frame, id_col, "ids", source, "--id-col")
        out["id"] = [str(i) for i in range(len(frame))]

    def text(col: str) -> list[str]:
        return [as_text(v) for v in frame[col].tolist()]

    out["input"] = text(input_col) if has_input else [""] * len(frame)
    outputs = text(output_col)
    n_empty = sum(1 for o in outputs if not o.strip())
    if n_empty:
        warnings.append(
            f"{n_empty} row(s) have a missing or empty {output_col!r}; they are kept and scored as empty text "
            "(a system that produced nothing)."
        )
    if require_target and n_empty == len(outputs):
        raise DataError(
            f"{source}: column {output_col!r} is empty on all {len(outputs)} rows: there is no generated text to evaluate. "
            "Pass --output-col naming the column that holds the outputs."
        )
    out["output"] = outputs

    refs: list[list[str]] = [[] for _ in range(len(frame))]
    for col in reference_cols:
        for i, v in enumerate(frame[col].tolist()):
            refs[i].extend(parse_reference_cell(v, col, i, source))
    # one reference column is often a copy of the first entry of another: de-duplicate, keep order
    out["references"] = [list(dict.fromkeys(r)) for r in refs]
    has_refs = bool(reference_cols) and any(out["references"].map(len))
    if reference_cols:
        n_noref = int((out["references"].map(len) == 0).sum())
        if n_noref and has_refs:
            warnings.append(f"{n_noref} row(s) have no reference; reference-based metrics give no score (NaN) there.")

    if group_col:
        _require_column(frame, group_col, "groups", source, "--group-col")
        out["group"] = frame[group_col].astype(str).to_numpy()
    else:
        out["group"] = out["input"] if has_input else out["id"]

    labels: dict[str, LabelInfo] = {}
    for t in targets:
        y, info = parse_labels(frame[t], t, source)
        out[t] = y
        labels[t] = info
        if require_target:
            warnings += check_target(info, t, source, min_labelled)

    return Dataset(
        frame=out,
        targets=targets,
        labels=labels,
        source=source,
        columns={
            "input": input_col if has_input else None,
            "output": output_col,
            "references": list(reference_cols),
            "id": id_col,
            "group": group_col,
        },
        warnings=warnings,
        has_references=has_refs,
        has_input=has_input,
    )
