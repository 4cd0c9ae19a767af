"""Data loading and validation: every bad input gets a clear error naming the place and the fix."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from autometrics.evaluators.data import load_dataset, parse_labels
from autometrics.metricbank.errors import DataError


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


# ------------------------------------------------------------------ file shapes and label kinds
def test_mixed_label_kinds_are_refused_with_rows_not_mapped():
    df = _frame(n=30)
    df["score"] = (np.arange(30) * 3 + 10).astype(object)  # a 10-97 scale
    df.loc[[2, 5], "score"] = ["yes", "no"]
    df.loc[9, "score"] = "good"
    with pytest.raises(DataError) as e:
        load_dataset(df, "score")
    msg = str(e.value)
    assert "mixes a numeric scale" in msg and "3 word label(s)" in msg
    assert "row 3: 'yes'" in msg and "row 6: 'no'" in msg and "row 10: 'good'" in msg
    with pytest.raises(DataError, match="mixes a numeric scale"):  # booleans next to a 1-5 scale too
        parse_labels(pd.Series([True, 4, 5, 2, False], dtype=object), "label")
    y, info = parse_labels(pd.Series(["yes", 0, 1, "no", "1"], dtype=object), "label")  # words with 0/1: one kind
    assert info.kind == "binary" and list(y) == [1, 0, 1, 0, 1]


@pytest.mark.parametrize("value", [1e308, -1e308, float("inf"), float("-inf"), 2e12])
def test_absurd_or_infinite_labels_are_refused_with_rows(value):
    df = _frame()
    df.loc[6, "score"] = value
    with pytest.raises(DataError, match=r"row 7: .*within ±1e\+12"):
        load_dataset(df, "score")


def test_decimal_comma_labels_get_a_hint():
    with pytest.raises(DataError, match="decimals with a point"):
        parse_labels(pd.Series(["4,5", "3", "2"], dtype=object), "label")


def test_non_string_references_are_refused_with_row():
    df = _frame().drop(columns=["reference"])
    df["references"] = [["a", "b"]] * len(df)
    df.at[4, "references"] = [1, 2, {"x": 1}]
    with pytest.raises(DataError, match=r"'references' at row 5: item 1 of the list is a number"):
        load_dataset(df, "score")
    df.at[4, "references"] = {"text": "a dict"}
    with pytest.raises(DataError, match="is a JSON object"):
        load_dataset(df, "score")
    df.at[4, "references"] = ["fine", None, ""]
    assert load_dataset(df, "score").references[4] == ["fine"]


def test_a_target_that_is_also_another_role_or_given_twice_is_refused():
    with pytest.raises(DataError, match="both the --target and the --output-col"):
        load_dataset(_frame(), "score", output_col="score")
    with pytest.raises(DataError, match="given more than once"):
        load_dataset(_frame(), ["score", "score"])
    with pytest.raises(DataError, match="--input-col and --output-col both name 'output'"):
        load_dataset(_frame(), "score", input_col="output")


def test_all_outputs_empty_is_an_error_for_fitting_only():
    df = _frame(output="")
    with pytest.raises(DataError, match="column 'output' is empty on all 20 rows"):
        load_dataset(df, "score")
    assert len(load_dataset(df, None, require_target=False)) == 20  # scoring empty outputs is allowed


def test_structured_outputs_become_json_text(tmp_path):
    df = _frame()
    df["output"] = [{"answer": f"x{i}", "ok": True} for i in range(len(df))]
    df.to_json(tmp_path / "d.jsonl", orient="records", lines=True)
    ds = load_dataset(tmp_path / "d.jsonl", "score")
    assert json.loads(ds.outputs[3]) == {"answer": "x3", "ok": True}


def test_other_text_shapes_still_load_identically(tmp_path):
    import gzip

    df = _frame()
    ref = load_dataset(df, "score").fingerprint()
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + df.to_csv(index=False).encode())
    df.to_csv(tmp_path / "d.tsv", sep="\t", index=False)
    df.to_csv(tmp_path / "semi.csv", sep=";", index=False)
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(df.to_json(orient="records", lines=True).encode()))
    (tmp_path / "d.csv.gz").write_bytes(gzip.compress(df.to_csv(index=False).encode()))
    df.to_json(tmp_path / "records.json", orient="records")
    df.to_json(tmp_path / "columns.json")  # pandas' default layout: {"col": {"0": v, ...}}
    for name in ("bom.csv", "d.tsv", "semi.csv", "d.jsonl.gz", "d.csv.gz", "records.json", "columns.json"):
        ds = load_dataset(tmp_path / name, "score")
        assert ds.fingerprint() == ref, name
    assert any("';'-separated" in w for w in load_dataset(tmp_path / "semi.csv", "score").warnings)


def test_jsonl_errors_name_the_line(tmp_path):
    lines = _frame().to_json(orient="records", lines=True).splitlines()
    lines.insert(3, "")  # blank lines are skipped but still counted
    lines[6] = lines[6][:-4]
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"b.jsonl: line 7 is not valid JSON"):
        load_dataset(tmp_path / "b.jsonl", "score")


def test_excel_sep_line_and_an_unclosed_quote(tmp_path):
    df = _frame()
    (tmp_path / "x.csv").write_text("sep=;\n" + df.to_csv(sep=";", index=False))
    ds = load_dataset(tmp_path / "x.csv", "score")
    assert ds.fingerprint() == load_dataset(df, "score").fingerprint()
    assert any("first line says sep=;" in w for w in ds.warnings)
    (tmp_path / "q.csv").write_text('id,input,output,score\n1,a,b,3\n2,"c,d,4\n3,e,f,5\n')
    with pytest.raises(DataError, match=r'q.csv: a quote \(\"\) opened in data row 2 is never closed'):
        load_dataset(tmp_path / "q.csv", "score", min_labelled=1)


def test_label_words_are_read_alike_in_a_csv_and_through_feedback():
    """One vocabulary: a word a CSV label column reads as thumbs up/down is the same value when an
    application sends it with ``feedback()`` (``pass``/``accept``/``+1`` were once CSV-only)."""
    import pandas as pd
    from autometrics.collectors.feedback import NEGATIVE_WORDS, POSITIVE_WORDS, coerce_value, make_schema

    # "+1"/"-1" are numbers in a CSV column (a -1/+1 scale ranks the same as 0/1), so only words here
    words = sorted((POSITIVE_WORDS | NEGATIVE_WORDS) - {"+1", "-1"})
    from_csv, _ = parse_labels(pd.Series([w.upper() if w.isascii() else w for w in words]), "label")
    thumbs = make_schema("thumbs", None)
    through_feedback = [coerce_value(f" {w} ", thumbs, "helpful")[0] for w in words]
    assert list(from_csv) == through_feedback == [1.0 if w in POSITIVE_WORDS else 0.0 for w in words]
    assert {"pass", "accept", "+1", "correct"} <= POSITIVE_WORDS and {"fail", "reject", "-1", "incorrect"} <= NEGATIVE_WORDS
