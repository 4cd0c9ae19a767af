"""What a newcomer meets first (issue #28): every flag explains itself in --help, data without
the input column says which columns it has and which flag to pass, and every file the CLI writes
gets the permissions the user's umask gives a new file.  Runs are in-process (``main([...])``)
on samples of the shared datasets."""

from __future__ import annotations

import argparse
import json
import os
import stat

import pandas as pd
import pytest
from autometrics._cli.main import _build_parser, main


def _run(argv: list, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _actions(parser: argparse.ArgumentParser, path: str):
    """(command path, action) of every action of ``parser`` and of its sub-parsers, recursively;
    a sub-command's own help is the help of its entry in the parent's choices."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield path, choice
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_flag_and_positional_of_every_command_has_help():
    seen = list(_actions(_build_parser(), "autometrics"))
    assert len({p for p, _ in seen}) > 15 and len(seen) > 200  # the walk reached the sub-commands' sub-commands
    assert any(p == "autometrics versions show" and a.dest == "number" for p, a in seen)
    missing = [f"{p} {'/'.join(a.option_strings) or a.metavar or a.dest}" for p, a in seen if not (a.help or "").strip()]
    assert missing == [], "no help text: " + ", ".join(missing)


def _fit(data, out, *extra) -> list:
    return ["fit", data, "--target", "score", "--n-boot", "20", "--permutations", "19", "--no-progress", "--out", out, *extra]


def _warnings(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("warning: no ")]


def test_a_missing_input_column_warns_with_the_columns_and_the_flag(tmp_path, datasets_dir, capsys):
    """Outputs rated on their own are a real case, so the fit goes on without inputs (a warning,
    not an error); the warning lists the columns present and names --input-col.  Scoring with an
    evaluator whose metrics need the input is refused the same way."""
    rows = pd.read_csv(datasets_dir / "simpeval.csv").head(60)
    renamed = tmp_path / "renamed.csv"
    rows.rename(columns={"input": "source"}).to_csv(renamed, index=False)

    code, out, err = _run(_fit(renamed, tmp_path / "alone"), capsys)
    assert code == 0, err
    assert _warnings(out) == [
        "warning: no 'input' column: the outputs are used alone (metrics that need the input are skipped, and rows are "
        "split one by one instead of grouped by input). Columns present: id, source, output, reference, references, "
        "system, score. If one of them holds the inputs (prompts, sources), pass --input-col NAME."]
    assert json.loads((tmp_path / "alone" / "evaluator.json").read_text())["columns"]["input"] is None

    code, out, err = _run(_fit(renamed, tmp_path / "with", "--input-col", "source", "--metrics", "LengthRatio,InputSimilarity"),
                          capsys)
    assert code == 0, err
    assert _warnings(out) == []
    ev = json.loads((tmp_path / "with" / "evaluator.json").read_text())
    assert ev["columns"]["input"] == "source" and ev["dataset"]["n_groups"] == 10  # grouped by input: 6 outputs each

    near = tmp_path / "near.csv"
    rows.rename(columns={"input": "inputs"}).to_csv(near, index=False)
    code, out, _ = _run(_fit(near, tmp_path / "near", "--metrics", "OutputLength,BLEU"), capsys)
    assert code == 0 and "did you mean 'inputs'? pass --input-col NAME." in _warnings(out)[0]

    # an evaluator reading the input, on data without that column: refused, columns and flag named
    scored = tmp_path / "scored.csv"
    code, out, err = _run(["score", tmp_path / "with", near, "--out", scored, "--no-progress"], capsys)
    assert code == 2 and out == "" and not scored.exists()
    assert err.startswith(f"error: {near}: no column 'source' for the inputs.")
    with_input = tmp_path / "with-input"
    os.rename(tmp_path / "with", with_input)
    ev["columns"]["input"] = "input"  # the same evaluator, fitted on a file whose input column is 'input'
    (with_input / "evaluator.json").write_text(json.dumps(ev))
    code, out, err = _run(["score", with_input, renamed, "--out", scored, "--no-progress"], capsys)
    assert code == 2 and out == "" and not scored.exists()
    assert err.startswith(f"error: {renamed}: this evaluator uses metrics that need the input (")
    assert "no 'input' column. Columns present: id, source, output, reference, references, system, score. " \
           "Pass --input-col NAME" in err
    code, _, err = _run(["score", with_input, renamed, "--input-col", "source", "--out", scored, "--no-progress"], capsys)
    assert code == 0, err
    assert len(pd.read_csv(scored)) == 60


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.skipif(os.name != "posix", reason="file modes and the umask are POSIX")
def test_every_output_gets_the_mode_the_umask_gives_a_new_file(tmp_path, datasets_dir, capsys):
    """evaluator.json, the reports and the scored CSV used to be 0600 (tempfile.mkstemp's mode,
    kept by the rename) while the dashboard was 0644: every output now gets what the umask gives."""
    data = tmp_path / "simpda.csv"
    pd.read_csv(datasets_dir / "simpda.csv").head(60).to_csv(data, index=False)
    out, scored = tmp_path / "run", tmp_path / "scored.csv"
    previous = os.umask(0o022)
    try:
        code, _, err = _run(["fit", data, "--target", "simplicity", "--n-boot", "20", "--no-progress", "--out", out], capsys)
        assert code == 0, err
        code, _, err = _run(["score", out, data, "--out", scored, "--no-progress"], capsys)
        assert code == 0, err
        written = sorted(p.name for p in out.iterdir())
        assert written == ["evaluator.json", "report.html", "report.md"]  # and no temporary left behind
        assert {name: oct(_mode(out / name)) for name in written} == {name: "0o644" for name in written}
        assert oct(_mode(scored)) == "0o644"
        os.umask(0o027)  # the umask decides, not a fixed mode: a replaced file gets the new one
        code, _, err = _run(["score", out, data, "--out", scored, "--no-progress"], capsys)
        assert code == 0, err
        assert oct(_mode(scored)) == "0o640"
    finally:
        os.umask(previous)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "scored.csv", "simpda.csv"]
