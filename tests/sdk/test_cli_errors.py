"""Every bad flag or input file is one `error:` line and exit status 2, before any expensive step,
and a failed run never loses or changes what an earlier run wrote.

Each failing run points --out at a copy of a good evaluator folder from an earlier fit and checks
afterwards that the folder is byte-identical (no file replaced, none half-written, no temporary
left behind).  Runs are in-process (``main([...])``); one test runs the installed command to show
that a real process prints no traceback either."""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from autometrics._cli.main import main
from autometrics.evaluators.data import builtin_dataset_path

ROWS = pd.read_csv(builtin_dataset_path("simpeval")).head(60)


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _one_error(code: int, err: str, *fragments: str) -> str:
    """Exit 2, exactly one `error:` line holding every fragment, no traceback, no usage block."""
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err and "usage:" not in err, err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too: a leftover temporary shows) -> sha256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def previous(good_run, tmp_path) -> tuple[Path, dict]:
    """A private copy of the good folder and its snapshot."""
    out = tmp_path / "previous"
    shutil.copytree(good_run, out)
    return out, _snapshot(out)


@pytest.fixture
def data(tmp_path) -> Path:
    p = tmp_path / "data.csv"
    ROWS.to_csv(p, index=False)
    return p


def _fit(data, out, *extra) -> list[str]:
    return ["fit", data, "--target", "score", "--n-boot", "20", "--no-progress", "--out", out, *extra]


# ----------------------------------------------------------------- class 1: tracebacks -> clear errors
def _unwritable_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return ro
    try:  # root ignores permission bits; sysfs refuses root's new files
        fd = os.open("/sys/.autometrics-probe", os.O_CREAT | os.O_WRONLY)
        os.close(fd)
        os.unlink("/sys/.autometrics-probe")
    except OSError:
        return Path("/sys")
    pytest.skip("no unwritable folder available to this user")


def test_out_under_a_file_read_only_an_existing_file_or_a_folder_where_a_file_goes(tmp_path, data, previous, capsys):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    code, _, err = _run(_fit(data, afile / "sub"), capsys)
    _one_error(code, err, str(afile), "which is a file")
    code, _, err = _run(_fit(data, afile), capsys)
    _one_error(code, err, str(afile), "is a file; pass a folder")
    assert afile.read_text() == "keep me"
    code, _, err = _run(_fit(data, _unwritable_dir(tmp_path) / "out"), capsys)
    _one_error(code, err, "cannot write in")
    out, snap = previous
    (out / "report.html").unlink()
    (out / "report.html").mkdir()
    snap = _snapshot(out)
    code, _, err = _run(_fit(data, out), capsys)
    _one_error(code, err, "report.html is a folder")
    assert _snapshot(out) == snap


@pytest.mark.parametrize("argv,fragment", [
    (["--n-boot", "-5"], "--n-boot: must be from 0 to 100000, got -5"),
    (["--n-boot", "1e9"], "--n-boot: '1e9' is not a whole number"),
    (["--top-n", "0"], "--top-n: must be at least 1"),
    (["--test-size", "0"], "--test-size: must be between 0 and 1"),
    (["--test-size", "1.5"], "--test-size: must be between 0 and 1"),
    (["--test-size", "nan"], "--test-size: must be a finite number"),
    (["--seed", "-1"], "--seed: must be from 0 to 4294967295"),
    (["--scaling-seeds", "0"], "--scaling-seeds"),
    (["--robustness-n", "0"], "--robustness-n"),
    (["--retrieve-k", "0"], "--retrieve-k"),
    (["--n-single", "-1"], "--n-single"),
    (["--llm-concurrency", "0"], "--llm-concurrency"),
    (["--llm-timeout", "-3"], "--llm-timeout: must be greater than 0"),
    (["--llm-timeout", "inf"], "--llm-timeout: must be a finite number"),
    (["--regression", "ols"], "--regression: invalid choice"),
    (["--metrics", "BLUE"], "no metric named 'BLUE'"),
    (["--metrics", ","], "--metrics names no metric"),
    (["--target", "score"], "--target 'score' is given twice"),
    (["--input-col", "output"], "--input-col and --output-col both name 'output'"),
    (["--output-col", "score"], "is both the --target and the --output-col column"),
    (["--project", "p"], "--project applies to a trace store only"),
    (["--since", "7d"], "--since applies to a trace store only"),
])
def test_fit_flag_out_of_range_is_refused_and_nothing_is_written(argv, fragment, data, previous, capsys):
    out, snap = previous
    code, _, err = _run(_fit(data, out, *argv), capsys)
    _one_error(code, err, fragment)
    assert _snapshot(out) == snap


@pytest.mark.parametrize("argv,fragment", [
    (["benchmark", "DATA", "--target", "score", "--seeds", "0"], "--seeds: must be from 1 to 1000"),
    (["benchmark", "DATA", "--target", "score", "--max-rows", "-3"], "--max-rows: must be at least 10"),
    (["benchmark", "DATA", "--target", "score", "--test-size", "1"], "--test-size"),
    (["benchmark", "DATA", "--target", "score", "--top-n", "0"], "--top-n"),
    (["benchmark", "DATA", "--target", "score", "--methods", "magic"], "unknown method(s) magic"),
    (["benchmark", "DATA", "--target", "score", "--metrics", "BLUE"], "no metric named 'BLUE'"),
    (["benchmark", "DATA", "--target", "score", "--out", "AFILE"], "is a file; pass a folder"),
    (["worker", "--target", "x", "--batch-size", "0"], "--batch-size"),
    (["worker", "--target", "x", "--poll", "0"], "--poll: must be greater than 0"),
    (["worker", "--target", "x", "--holdout", "1"], "--holdout"),
    (["worker", "--target", "x", "--drift-ks-alpha", "2"], "--drift-ks-alpha"),
    (["worker", "--target", "x", "--drift-window", "0"], "--drift-window"),
    (["worker", "--target", "x", "--langfuse-max-attempts", "0"], "--langfuse-max-attempts"),
    (["worker", "--target", "x", "--dashboard", "AFILE/d.html"], "which is a file"),
    (["refit", "--target", "x", "--min-feedback", "0"], "--min-feedback"),
    (["refit", "--target", "x", "--n-boot", "-1"], "--n-boot"),
    (["versions", "show", "0", "--target", "x"], "argument N: must be at least 1"),
    (["versions", "compare", "1", "2", "--target", "x", "--holdout", "0"], "--holdout"),
    (["dashboard", "--target", "x", "--port", "70000"], "--port: must be from 0 to 65535"),
    (["dashboard", "--target", "x", "--out", "AFILE/d.html"], "which is a file"),
    (["demo", "--n-boot", "-2"], "--n-boot"),
    (["demo", "--out", "AFILE"], "is a file; pass a folder"),
    (["collector", "serve", "--port", "99999"], "--port: must be from 0 to 65535"),
    (["collector", "serve", "--max-body", "0"], "--max-body"),
    (["llm", "serve", "--port", "-1"], "--port"),
    (["score", "EVAL", "DATA", "--out", "DIR"], "is a folder; pass a file name"),
    (["score", "EVAL", "DATA", "--out", "AFILE/x.csv"], "which is a file"),
    (["score", "EVAL", "DATA", "--out", ""], "--out is empty"),
    (["fit", "DATA", "--target", "score", "--out", ""], "--out is empty"),
    (["score", "EVAL", "DATA", "--out", "SLASH"], "ends with a slash"),
    (["llm", "install", "--find-links", "AFILE"], "is not a folder"),
    (["versions", "list", "--target", "x", "--store", ""], "--store is empty"),
    (["bank"], "name a subcommand"),
    (["versions"], "name a subcommand"),
    (["llm"], "name a subcommand"),
    (["collector"], "name a subcommand"),
    (["fit", "DATA"], "the following arguments are required: --target, --out"),
])
def test_every_command_refuses_bad_flags_with_one_line(argv, fragment, tmp_path, data, good_run, capsys, monkeypatch):
    monkeypatch.setenv("AUTOMETRICS_HOME", str(tmp_path / "home"))  # a store opened by mistake lands here
    (tmp_path / "afile").write_text("x")
    subst = {"DATA": str(data), "AFILE": str(tmp_path / "afile"), "EVAL": str(good_run), "DIR": str(tmp_path),
             "SLASH": str(tmp_path / "new") + "/"}
    argv = [subst.get(a, a.replace("AFILE", str(tmp_path / "afile"))) for a in argv]
    code, _, err = _run(argv, capsys)
    _one_error(code, err, fragment)
    assert (tmp_path / "afile").read_text() == "x"


# ----------------------------------------------------------------- class 2: vague errors -> named causes
def _csv_text() -> str:
    return ROWS.to_csv(index=False)


def _write(tmp_path: Path, case: str) -> Path:
    """The bad data file of one case."""
    if case == "empty":
        p = tmp_path / "d.csv"
        p.write_bytes(b"")
    elif case == "blank_lines":
        p = tmp_path / "d.csv"
        p.write_text("\n  \n\n")
    elif case == "header_only":
        p = tmp_path / "d.csv"
        p.write_text("id,input,output,score\n")
    elif case == "binary":
        p = tmp_path / "d.csv"
        p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(2000))
    elif case == "latin1":
        p = tmp_path / "d.csv"
        p.write_bytes(_csv_text().replace("the ", "thé ", 1).encode("latin-1", "replace"))
    elif case == "utf16":
        p = tmp_path / "d.csv"
        p.write_bytes(_csv_text().encode("utf-16"))
    elif case == "ragged_csv":
        p = tmp_path / "d.csv"
        lines = _csv_text().splitlines()
        lines[5] = lines[5] + ",extra,fields"
        p.write_text("\n".join(lines) + "\n")
    elif case == "broken_jsonl":
        p = tmp_path / "d.jsonl"
        lines = ROWS.to_json(orient="records", lines=True).splitlines()
        lines[7] = lines[7][:-9]
        p.write_text("\n".join(lines) + "\n")
    elif case == "jsonl_not_object":
        p = tmp_path / "d.jsonl"
        lines = ROWS.to_json(orient="records", lines=True).splitlines()
        lines[2] = "[1, 2]"
        p.write_text("\n".join(lines) + "\n")
    elif case == "jsonl_duplicate_key":
        p = tmp_path / "d.jsonl"
        lines = ROWS.to_json(orient="records", lines=True).splitlines()
        lines[4] = lines[4][:-1] + ', "score": 3}'
        p.write_text("\n".join(lines) + "\n")
    elif case == "all_outputs_empty":
        p = tmp_path / "d.csv"
        ROWS.assign(output="").to_csv(p, index=False)
    elif case == "a_folder":
        p = tmp_path / "d.csv"
        p.mkdir()
    elif case in ("label_1e308", "label_minus_1e308", "label_inf", "label_1e13"):
        p = tmp_path / "d.csv"
        v = {"label_1e308": "1e308", "label_minus_1e308": "-1e308", "label_inf": "inf", "label_1e13": "1e13"}[case]
        ROWS.assign(score=ROWS["score"].astype(object).where(ROWS.index != 3, v)).to_csv(p, index=False)
    elif case == "duplicate_header":
        p = tmp_path / "d.csv"
        lines = _csv_text().splitlines()
        lines[0] = lines[0].replace("system", "score")
        p.write_text("\n".join(lines) + "\n")
    elif case == "truncated_gzip":
        p = tmp_path / "d.csv.gz"
        raw = gzip.compress(_csv_text().encode())
        p.write_bytes(raw[: len(raw) // 2])
    elif case == "json_object":
        p = tmp_path / "d.json"
        p.write_text(json.dumps({"rows": 60, "name": "x"}))
    elif case == "json_list_of_numbers":
        p = tmp_path / "d.json"
        p.write_text(json.dumps([1, 2, 3]))
    elif case == "json_truncated":
        p = tmp_path / "d.json"
        p.write_text(ROWS.to_json(orient="records")[:-40])
    elif case == "parquet_garbage":
        p = tmp_path / "d.parquet"
        p.write_bytes(b"PAR1 not really")
    elif case == "unknown_suffix":
        p = tmp_path / "d.xlsx"
        p.write_bytes(b"PK\x03\x04")
    elif case == "decimal_comma":
        p = tmp_path / "d.csv"
        ROWS.assign(score=["4,5" if i == 2 else str(i % 5 + 1) for i in range(len(ROWS))]).to_csv(p, sep=";", index=False)
    else:  # pragma: no cover
        raise AssertionError(case)
    return p


DATA_CASES = {
    "empty": "is empty (0 bytes)",
    "blank_lines": "is empty",
    "header_only": "has no rows",
    "binary": "is a binary file",
    "latin1": "Save it as UTF-8",
    "utf16": "UTF-16",
    "ragged_csv": "line 6 has 9 fields but the header has 7",
    "broken_jsonl": "line 8 is not valid JSON",
    "jsonl_not_object": "line 3 is a JSON list, not an object",
    "jsonl_duplicate_key": "line 5 has the key 'score' twice",
    "all_outputs_empty": "column 'output' is empty on all 60 rows",
    "a_folder": "is a folder, not a data file",
    "label_1e308": "row 4 (line 5 of d.csv): 1e+308",
    "label_minus_1e308": "row 4 (line 5 of d.csv): -1e+308",
    "label_inf": "row 4 (line 5 of d.csv): inf",
    "label_1e13": "within ±1e+12",
    "duplicate_header": "names column 'score' twice (columns 6 and 7)",
    "truncated_gzip": "truncated or corrupt gzip",
    "json_object": "holds a JSON object (keys 'rows', 'name'), not rows",
    "json_list_of_numbers": "row 1 (element 0 of the list) is a JSON number, not an object",
    "json_truncated": "not valid JSON",
    "parquet_garbage": "not a readable Parquet file",
    "unknown_suffix": "unknown file type '.xlsx'",
    "decimal_comma": "Write decimals with a point",
}


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_bad_data_file_names_the_cause_and_changes_nothing(case, tmp_path, previous, capsys):
    bad = _write(tmp_path, case)
    out, snap = previous
    code, _, err = _run(_fit(bad, out), capsys)
    line = _one_error(code, err, DATA_CASES[case])
    assert "d." in line  # the file is named
    assert _snapshot(out) == snap


def test_semicolon_csv_is_read_and_said(tmp_path, capsys):
    p = tmp_path / "semi.csv"
    ROWS.to_csv(p, sep=";", index=False)
    code, out, err = _run(_fit(p, tmp_path / "o"), capsys)
    assert code == 0, err
    assert "read semi.csv as ';'-separated" in out


def test_bad_rows_in_score_data_are_named(tmp_path, good_run, capsys):
    bad = _write(tmp_path, "broken_jsonl")
    code, _, err = _run(["score", good_run, bad, "--out", tmp_path / "s.csv"], capsys)
    _one_error(code, err, "line 8 is not valid JSON")
    assert not (tmp_path / "s.csv").exists()


# ----------------------------------------------------------------- class 3: silent accepts -> refused
def test_words_in_a_numeric_rating_column_are_refused_with_rows(tmp_path, previous, capsys):
    df = ROWS.copy()
    df["score"] = df["score"].round().astype(object)
    for i in range(0, 20, 2):
        df.loc[i, "score"] = "yes" if i % 4 else "no"
    df.loc[21, "score"] = "good"
    p = tmp_path / "mixed.csv"
    df.to_csv(p, index=False)
    out, snap = previous
    code, _, err = _run(_fit(p, out), capsys)
    _one_error(code, err, "mixes a numeric scale", "11 word label(s)", "row 1 (line 2 of mixed.csv): 'no'")
    assert _snapshot(out) == snap


def test_yes_no_with_zero_one_is_still_binary(tmp_path, capsys):
    df = ROWS.copy()
    df["score"] = ["yes" if i % 3 == 0 else (1 if i % 3 == 1 else 0) for i in range(len(df))]
    p = tmp_path / "bin.csv"
    df.to_csv(p, index=False)
    code, out, err = _run(_fit(p, tmp_path / "o"), capsys)
    assert code == 0, err
    assert "label: binary" in out


def test_non_string_references_are_refused(tmp_path, previous, capsys):
    df = ROWS.copy()
    df.loc[5, "references"] = json.dumps([1, 2, {"a": 1}])
    p = tmp_path / "refs.csv"
    df.to_csv(p, index=False)
    out, snap = previous
    code, _, err = _run(_fit(p, out), capsys)
    _one_error(code, err, "'references' at row 6 (line 7 of refs.csv)", "item 1 of the list is a number")
    assert _snapshot(out) == snap


def test_out_equal_to_the_input_is_refused_and_the_input_kept(tmp_path, data, good_run, capsys):
    before = data.read_bytes()
    code, _, err = _run(["score", good_run, data, "--out", data], capsys)
    _one_error(code, err, "is the input file")
    code, _, err = _run(["score", good_run, data, "--out", good_run / "evaluator.json"], capsys)
    _one_error(code, err, "is the input file")
    code, _, err = _run(_fit(data, data), capsys)
    _one_error(code, err, "is the input file")
    assert data.read_bytes() == before
    # a folder whose report.md is the input data: the fit would replace it
    inside = tmp_path / "o" / "report.md"
    inside.parent.mkdir()
    shutil.copy(data, inside)
    code, _, err = _run(["fit", inside, "--target", "score", "--out", inside.parent], capsys)
    _one_error(code, err, "would replace", "which is the input")


# ----------------------------------------------------------------- class 4: work lost or overwritten
def test_target_named_like_a_path_cannot_escape_the_output_folder(tmp_path, previous, capsys):
    victim, snap = previous  # out/../victim would be this folder
    df = ROWS.rename(columns={"score": "../previous"}).assign(other=ROWS["score"] % 7)
    p = tmp_path / "v.csv"
    df.to_csv(p, index=False)
    code, _, err = _run(["fit", p, "--target", "../previous", "--target", "other", "--out", tmp_path / "out"], capsys)
    _one_error(code, err, "--target '../previous' contains '/'")
    assert _snapshot(victim) == snap and not (tmp_path / "out").exists()
    for name, why in (("..", "is not a folder name"), ("a\\b", "contains '\\\\'"), ("x\ty", "contains '\\t'")):
        code, _, err = _run(["fit", p, "--target", name, "--target", "other", "--out", tmp_path / "out"], capsys)
        _one_error(code, err, why)
    code, _, err = _run(["fit", p, "--target", "Other", "--target", "other", "--out", tmp_path / "out"], capsys)
    _one_error(code, err, "differ only in case")


def test_out_is_checked_before_the_data_is_read_or_anything_fitted(tmp_path, data, monkeypatch, capsys):
    import autometrics._cli.store_source as store_source
    import autometrics.evaluators.fit as fit

    def never(*a, **k):
        raise AssertionError("reached the expensive step")

    monkeypatch.setattr(store_source, "load_fit_data", never)
    monkeypatch.setattr(fit, "fit_evaluator", never)
    (tmp_path / "afile").write_text("x")
    code, _, err = _run(_fit(data, tmp_path / "afile" / "sub"), capsys)
    _one_error(code, err, "which is a file")


def _fail_on_call(monkeypatch, module, name, n: int, exc: BaseException):
    """Make ``module.name`` raise ``exc`` on its n-th call (1-based); earlier calls run normally."""
    real = getattr(module, name)
    calls = {"n": 0}

    def wrapped(*a, **k):
        calls["n"] += 1
        if calls["n"] == n:
            raise exc
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapped)


@pytest.mark.parametrize("fault,code_wanted", [
    (OSError(errno.ENOSPC, "No space left on device"), 2),
    (KeyboardInterrupt(), 130),
])
def test_a_write_failing_after_the_first_file_leaves_the_previous_run_intact(fault, code_wanted, data, previous,
                                                                             monkeypatch, capsys):
    import autometrics.collectors.files as files

    out, snap = previous
    _fail_on_call(monkeypatch, files, "_write_temp", 2, fault)  # evaluator.json staged, report.md fails
    code, _, err = _run(_fit(data, out, "--top-n", "2"), capsys)
    assert code == code_wanted, err
    assert "Traceback" not in err
    if code_wanted == 2:
        _one_error(code, err, "No space left on device")
    assert _snapshot(out) == snap  # same three files, same bytes, no temporary left


def test_a_report_that_fails_to_render_writes_nothing(data, previous, monkeypatch, capsys):
    import autometrics.evaluators.report as report

    out, snap = previous
    _fail_on_call(monkeypatch, report, "render_html", 1, TypeError("boom"))
    code, _, err = _run(_fit(data, out), capsys)
    line = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 1 and len(line) == 1 and "internal error (TypeError: boom)" in line[0] and "--debug" in line[0]
    assert "Traceback" not in err
    assert _snapshot(out) == snap


def test_debug_adds_the_traceback(tmp_path, capsys):
    code, _, err = _run(["--debug", "fit", tmp_path / "missing.csv", "--target", "score", "--out", tmp_path / "o"], capsys)
    assert code == 2 and "Traceback" in err and err.rstrip().splitlines()[-1].startswith("error: cannot read")
    code, _, err = _run(["fit", tmp_path / "missing.csv", "--target", "score", "--out", tmp_path / "o", "--debug"], capsys)
    assert code == 2 and "Traceback" in err


def test_score_write_failure_keeps_the_previous_scores(tmp_path, data, good_run, monkeypatch, capsys):
    import autometrics.collectors.files as files

    scored = tmp_path / "scored.csv"
    scored.write_text("previous scores\n")
    real = files.os.replace

    def no_rename(src, dst):
        if str(dst) == str(scored):
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(files.os, "replace", no_rename)
    code, _, err = _run(["score", good_run, data, "--out", scored, "--no-progress"], capsys)
    _one_error(code, err, "Input/output error")
    assert scored.read_text() == "previous scores\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".scored")] == []


def test_store_commands_do_not_create_a_missing_sqlite_store(tmp_path, capsys):
    db = tmp_path / "typo.db"
    for argv in (["versions", "list"], ["dashboard", "--out", tmp_path / "d.html"], ["refit"]):
        code, _, err = _run([*argv, "--target", "x", "--store", f"sqlite:///{db}"], capsys)
        _one_error(code, err, "no SQLite trace store at", "typo.db")
        assert not db.exists()


def test_read_commands_after_the_demo_find_its_store_or_name_the_flags(tmp_path, monkeypatch, capsys):
    """Issue #28: right after `autometrics demo` (its store in ./autometrics-demo/), a command that
    reads a store finds that store when the default one does not exist, and says so; a --project or
    --target naming nothing in a store is one error listing what the store holds and the flag to
    pass, never "no evaluator versions" with exit 0."""
    from autometrics.collectors.store import TraceStore
    from monitor_data import simpeval, write_traces

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOMETRICS_HOME", str(tmp_path / "home"))  # no default store
    monkeypatch.delenv("AUTOMETRICS_PROJECT", raising=False)
    assert main(["demo", "--no-llm", "--n-boot", "50"]) == 0
    capsys.readouterr()
    assert (tmp_path / "autometrics-demo" / "traces.db").is_file()

    code, out, err = _run(["versions", "list", "--target", "score"], capsys)
    assert code == 0, err
    assert "v1  champion" in out and "v2" in out
    assert "reading autometrics-demo/traces.db" in err and "project 'demo-simpeval'" in err and str(tmp_path / "home") in err
    code, out, _ = _run(["versions", "show", "1", "--target", "score"], capsys)
    assert code == 0 and "v1" in out

    demo = ["--store", "autometrics-demo/traces.db"]
    holds = "holds project 'demo-simpeval' (360 traces; feedback 'score' (300 traces); evaluator versions of target 'score' (2 versions))"
    for argv in (["versions", "list", *demo], ["versions", "list", "--json", *demo], ["versions", "show", "1", *demo],
                 ["versions", "rollback", "1", *demo], ["refit", *demo], ["dashboard", "--out", tmp_path / "d.html", *demo]):
        code, out, err = _run([*argv, "--target", "score"], capsys)
        _one_error(code, err, "project 'default' has no traces or evaluator versions", holds, "Pass --project demo-simpeval.")
        assert out == ""
    assert not (tmp_path / "d.html").exists()
    code, _, err = _run(["versions", "list", "--target", "scroe", "--project", "demo-simpeval", *demo], capsys)
    _one_error(code, err, "no feedback or evaluator versions named 'scroe' in project 'demo-simpeval'", holds,
               "Pass --target score.")

    # a second project: labelled traces but no evaluator yet is an answer (exit 0), not a mistake
    store = TraceStore(f"sqlite:///{tmp_path / 'autometrics-demo' / 'traces.db'}")
    write_traces(store, simpeval(12), project="my app", target="thumbs")
    store.dispose()
    code, out, err = _run(["versions", "list", "--target", "thumbs", "--project", "my app", *demo], capsys)
    assert code == 0 and err == ""
    assert out.startswith("no evaluator versions for target 'thumbs' in project 'my app' yet; `autometrics refit "
                          "--target thumbs --project 'my app' --store autometrics-demo/traces.db` fits the first")
    code, _, err = _run(["versions", "list", "--target", "score", "--project", "my app", *demo], capsys)
    _one_error(code, err, "named 'score' in project 'my app'", "project 'my app' (12 traces; feedback 'thumbs' (12 traces))",
               "'score' is in project 'demo-simpeval': pass --project demo-simpeval.")
    code, _, err = _run(["versions", "list", "--target", "score", "--project", "nope", *demo], capsys)
    _one_error(code, err, "project 'nope' has no traces", "Pass --project demo-simpeval.")  # the one project with 'score'
    code, _, err = _run(["dashboard", "--target", "thumbs", "--project", "my app", "--out", tmp_path / "d.html", *demo], capsys)
    assert code == 0 and (tmp_path / "d.html").is_file()

    # no demo here: the default store's absence is the error, and it says where the demo's store is
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = _run(["versions", "list", "--target", "score"], capsys)
    _one_error(code, err, f"no SQLite trace store at {tmp_path / 'home' / 'traces.db'}", "pass --store URL",
               "--store autometrics-demo/traces.db from the folder it ran in")


def test_demo_refuses_to_replace_a_real_trace_store(tmp_path, capsys):
    import sqlite3

    conn = sqlite3.connect(tmp_path / "traces.db")  # an app's store (only what the check reads: its projects)
    conn.execute("CREATE TABLE spans (trace_id TEXT, project TEXT)")
    conn.execute("INSERT INTO spans VALUES ('t1', 'my-app')")
    conn.commit()
    conn.close()
    before = _snapshot(tmp_path)
    code, _, err = _run(["demo", "--no-llm", "--out", tmp_path], capsys)
    _one_error(code, err, "project(s) 'my-app'", "the demo replaces that file")
    assert _snapshot(tmp_path) == before


def test_a_real_process_prints_one_line_and_no_traceback(tmp_path):
    exe = shutil.which("autometrics")
    cmd = [exe] if exe else [sys.executable, "-m", "autometrics._cli.main"]
    (tmp_path / "afile").write_text("x")
    p = subprocess.run([*cmd, "fit", "demo:simpeval", "--target", "score", "--n-boot", "-5", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr
    p = subprocess.run([*cmd, "score", str(tmp_path / "nope.json"), "demo:simpeval", "--out", str(tmp_path / "afile" / "x")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr
