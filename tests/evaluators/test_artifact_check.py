"""A tampered, truncated or foreign evaluator.json is refused by `autometrics score` with exit 2
and one `error:` line naming the file and the field, never a traceback or NaN scores."""

from __future__ import annotations

import json

import pytest
from autometrics._cli.main import main
from autometrics.evaluators.fit import fit_evaluator


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    d = tmp_path_factory.mktemp("ev")
    path = d / "evaluator.json"
    fit_evaluator("demo:simpeval", "score", n_boot=20).evaluator.save(path)
    return json.loads(path.read_text())


def _tamper(a, how):
    b = json.loads(json.dumps(a))
    if how == "weight_string":
        b["features"][0]["weight"] = "abc"
    elif how == "unknown_metric":
        b["features"][-1]["metric"]["name"] = "NoSuchMetric"
    elif how == "json_list":
        b = [b]
    elif how == "scale_zero":
        b["features"][0]["scale"] = 0
    elif how == "intercept_missing":
        del b["intercept"]
    elif how == "not_ours":
        b["format"] = "something.else"
    return json.dumps(b)


CASES = {
    "weight_string": "features[0].weight",
    "unknown_metric": "NoSuchMetric",
    "json_list": "top level must be a JSON object",
    "scale_zero": "features[0].scale",
    "intercept_missing": "intercept",
    "not_ours": "format",
}


@pytest.mark.parametrize("how", sorted(CASES) + ["nan_weight", "truncated", "garbage_bytes"])
def test_bad_evaluator_json_is_a_clear_error(artifact, tmp_path, capsys, how):
    path = tmp_path / "evaluator.json"
    good = json.dumps(artifact, indent=2)
    if how == "nan_weight":
        path.write_text(good.replace('"weight": ', '"weight": NaN, "w0": ', 1))
    elif how == "truncated":
        path.write_text(good[: len(good) // 2])
    elif how == "garbage_bytes":
        path.write_bytes(b"\xff\xfe\x00garbage")
    else:
        path.write_text(_tamper(artifact, how))
    data = tmp_path / "in.csv"
    data.write_text('id,input,output,references\n1,The old cat sat.,The cat sat.,"[""The cat sat.""]"\n')
    out = tmp_path / "scored.csv"
    code = main(["score", str(path), str(data), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err and str(path) in err
    assert CASES.get(how, "") in err
    assert not out.exists()
