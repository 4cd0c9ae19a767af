"""Data loading and validation: every bad input gets a clear error naming the place and the fix."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.data import DataError, load_dataset, parse_labels


def _frame(n=20, **overrides):
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "id": [f"r{i}" for i in range(n)],
            "input": [f"input number {i // 2}" for i in range(n)],
            "output": [f"output text {i}" for i in range(n)],
            "reference": [f"reference {i}" for i in range(n)],
            "score": rng.integers(1, 6, n).astype(float),
        }
    )
    for k, v in overrides.items():
        df[k] = v
    return df


def test_loads_csv_jsonl_parquet_and_frame_identically(tmp_path):
    df = _frame()
    df.to_csv(tmp_path / "d.csv", index=False)
    df.to_json(tmp_path / "d.jsonl", orient="records", lines=True)
    df.to_parquet(tmp_path / "d.parquet")
    loaded = [load_dataset(src, "score") for src in (df, tmp_path / "d.csv", tmp_path / "d.jsonl", tmp_path / "d.parquet")]
    fps = {d.fingerprint() for d in loaded}
    assert len(fps) == 1
    assert loaded[1].references[3] == ["reference 3"]


def test_missing_column_suggests_close_name():
    df = _frame().rename(columns={"output": "outputs"})
    with pytest.raises(DataError) as e:
        load_dataset(df, "score")
    msg = str(e.value)
    assert "'output'" in msg and "'outputs'" in msg and "--output-col" in msg


def test_missing_target_column_lists_columns():
    with pytest.raises(DataError, match=r"no column 'scor3'.*Did you mean 'score'.*--target"):
        load_dataset(_frame(), "scor3")


def test_unparseable_labels_show_rows_and_values(tmp_path):
    df = _frame()
    df["score"] = df["score"].astype(object)
    df.loc[4, "score"] = "great"
    df.loc[7, "score"] = "??"
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError) as e:
        load_dataset(tmp_path / "bad.csv", "score")
    msg = str(e.value)
    assert "2 value(s)" in msg and "'great'" in msg and "row 5 (line 6 of bad.csv)" in msg and "'??'" in msg


def test_too_few_labels():
    df = _frame()
    df.loc[5:, "score"] = np.nan
    with pytest.raises(DataError, match="only 5 labelled row"):
        load_dataset(df, "score")


def test_constant_target():
    with pytest.raises(DataError, match="constant"):
        load_dataset(_frame(score=3.0), "score")


def test_duplicate_ids_named():
    df = _frame()
    df.loc[9, "id"] = "r3"
    with pytest.raises(DataError) as e:
        load_dataset(df, "score")
    assert "'r3'" in str(e.value) and "row 4" in str(e.value) and "row 10" in str(e.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_dataset(tmp_path / "nope.csv", "score")
    (tmp_path / "x.xlsx").write_text("not really")
    with pytest.raises(DataError, match="unknown file type"):
        load_dataset(tmp_path / "x.xlsx", "score")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(DataError, match="cannot read .*broken.parquet"):
        load_dataset(tmp_path / "broken.parquet", "score")
    (tmp_path / "broken.jsonl").write_text('{"a": 1}\n{oops\n')
    with pytest.raises(DataError, match="cannot read .*broken.jsonl"):
        load_dataset(tmp_path / "broken.jsonl", "score")


def test_bad_json_reference_list_names_row():
    df = _frame()
    df = df.drop(columns=["reference"])
    df["references"] = json.dumps(["a", "b"])
    df.loc[2, "references"] = '["a", "b"'
    with pytest.raises(DataError, match=r"'references' at row 3 looks like a JSON list"):
        load_dataset(df, "score")


def test_missing_targets_excluded_and_counted_never_zero():
    df = _frame()
    df.loc[[1, 2, 3], "score"] = np.nan
    ds = load_dataset(df, "score")
    assert ds.labels["score"].n_missing == 3
    assert any("3 row(s) have no 'score' label" in w for w in ds.warnings)
    lab = ds.labelled("score")
    assert len(lab) == 17 and not np.isnan(lab.y("score")).any()
    assert 0.0 not in set(lab.y("score"))


def test_empty_outputs_are_kept_and_counted():
    df = _frame()
    df.loc[0, "output"] = ""
    df.loc[1, "output"] = np.nan
    ds = load_dataset(df, "score")
    assert ds.outputs[0] == "" and ds.outputs[1] == ""
    assert any("2 row(s) have a missing or empty 'output'" in w for w in ds.warnings)


@pytest.mark.parametrize(
    "values,kind",
    [
        (["yes", "no", "yes", "no"], "binary"),
        (["thumbs up", "thumbs down", "👍", "👎"], "binary"),
        (["pass", "fail", "PASS", "Fail"], "binary"),
        ([True, False, True, True], "binary"),
        ([1, 0, 1, 0], "binary"),
        ([1, 2, 3, 4, 5, 3], "likert"),
        ([1.33, 4.67, 3.0, 2.5], "likert"),
        ([36.7, 99.3, 80.0, 55.5], "scale_0_100"),
        ([-1.2, 0.3, 0.8, -0.1], "z_score"),
        ([0, 0, 1, 0, 7, 0, 2, 0, 0, 12], "count"),
    ],
)
def test_label_kind_detection(values, kind):
    y, info = parse_labels(pd.Series(values, dtype=object), "label")
    assert info.kind == kind
    assert not np.isnan(y).any()


def test_multiple_reference_columns_and_json_lists():
    df = _frame()
    df["references"] = [json.dumps([f"reference {i}", f"alt {i}"]) for i in range(len(df))]
    ds = load_dataset(df, "score", reference_cols=["reference", "references"])
    assert ds.references[0] == ["reference 0", "alt 0"]  # de-duplicated, order kept


def test_grouped_split_never_shares_an_input(datasets_dir):
    ds = load_dataset(datasets_dir / "simpeval.csv", "score")
    for seed in range(3):
        tr, te = ds.split(0.3, seed)
        assert not set(tr.inputs) & set(te.inputs)
        assert len(tr) + len(te) == len(ds)
    a, _ = ds.split_positions(0.3, 1)
    b, _ = ds.split_positions(0.3, 1)
    assert (a == b).all()


def test_every_shared_dataset_loads(datasets_dir):
    targets = {
        "simpeval": ["score"],
        "simpda": ["fluency", "meaning", "simplicity"],
        "summeval": ["coherence", "consistency", "fluency", "relevance"],
        "topical_chat": ["overall"],
        "evalgen_product": ["grade"],
        "realhumaneval_chat": ["copied"],
    }
    for name, t in targets.items():
        ds = load_dataset(datasets_dir / f"{name}.csv", t)
        assert len(ds) > 50
    assert load_dataset(datasets_dir / "evalgen_product.csv", "grade").labels["grade"].kind == "binary"
    assert load_dataset(datasets_dir / "simpda.csv", "meaning").labels["meaning"].kind == "z_score"
