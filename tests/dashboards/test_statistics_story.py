"""One statistics story per page: every τ, CI and p-value the dashboard, ``versions show/list``
and the Langfuse warnings show names the data it was computed on (the fit-time test split, the
newest held-out feedback at refit, live feedback since the fit), warnings name the figure they
are about, and per-metric weights read correctly for lower-is-better metrics.

The store is real (SQLite), filled with SimpEval traces and feedback, with two real refits, real
online scoring and a real drift check, so the figures come from the code that stores them."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from monitor_data import add_feedback, simpeval, write_traces

# FKGL is lower-is-better, LengthRatio's card says higher is better; on SimpEval humans prefer
# simpler and shorter outputs, so the refit on 220 ratings weights both negatively: FKGL as its
# card expects, LengthRatio against its card (v1, on 63 ratings, still gives FKGL a positive weight)
METRICS = ["FKGL", "LengthRatio"]
LABELS = re.compile(r"fit-time test split|fit-time training split|newest held-out feedback at refit|live feedback since the fit"
                    r"|score distribution|cross-fitted on the fit's feedback")
WITH_N = re.compile(rf"(?:{LABELS.pattern}) \(n=\d+")
FIGURE = re.compile(r"τ|\btau\b|\bp\s*[=<>]|\bp \d|p-value")


@pytest.fixture(scope="module")
def story_store(tmp_path_factory):
    """v1 fitted on 90 labelled traces (its own split is small, its held-out set n=27 < 30: both
    kinds of warning), v2 refitted on 220 and promoted, 140 unlabelled traces scored online, late
    feedback on 80 of them, 120 traces of changed traffic, and a drift check (live validity of
    v2 and a score-drift alert)."""
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    url = f"sqlite:///{tmp_path_factory.mktemp('story') / 'traces.db'}"
    store = TraceStore(url)
    df = simpeval()
    # each fit keeps its own test split (the protocol before cross-fitted validity), and v1, fitted
    # on 63 ratings of two metrics, is not validated: promoted anyway, so the page has two
    # versions whose three figures disagree (what this test is about)
    mon = Monitor(store, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200, metrics=METRICS,
                                       reference_window=50, drift_window=40, promote_unvalidated=True,
                                       fit_test_size=0.3))
    write_traces(store, df.iloc[:90], project="p")
    assert mon.refit().outcome == "promoted"
    write_traces(store, df.iloc[90:220], project="p", t0_ns=3_000_000_000)
    second = mon.refit()
    assert second.outcome == "promoted", second  # v2 is the champion, v1 retired
    unlabelled = write_traces(store, df.iloc[220:], project="p", t0_ns=6_000_000_000, feedback=False)
    assert mon.score_new() == 360
    add_feedback(store, unlabelled[:80], df["score"].iloc[220:300], t0_ns=4 * 10**18)  # late ratings of scored traces
    shifted = simpeval(120, seed=3).assign(output=lambda d: d.output.str.repeat(4))  # then the traffic changes
    write_traces(store, shifted, project="p", t0_ns=9_000_000_000, feedback=False)
    assert mon.score_new() == 120
    kinds = {a["kind"] for a in mon.check_drift()}
    assert "score_drift" in kinds, kinds
    assert mon.champion()["statistics"].get("live_validity"), "the drift check measured live validity"
    return mon


class _Blocks(HTMLParser):
    """The page as (container, text) pairs: each text goes to its nearest container (a card, a
    warning, a table cell, an SVG title, a panel), where the figure's label must be."""

    CONTAINER_CLASSES = {"stat", "warn", "alert", "story", "panel", "meta", "ok"}
    CONTAINER_TAGS = {"td", "th", "title", "li", "p", "h1", "h2"}
    VOID = {"meta", "br", "img", "input", "link", "hr", "rect", "line", "polygon", "polyline"}

    def __init__(self):
        super().__init__()
        self.stack: list[dict] = []
        self.blocks: list[dict] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        node = {"tag": tag, "classes": classes, "id": a.get("id"), "text": [], "figure": False,
                "container": tag in self.CONTAINER_TAGS or bool(classes & self.CONTAINER_CLASSES)}
        if tag in ("style", "head") or a.get("id") == "rationales":  # CSS; user data (trace texts)
            self.skip += 1
            node["skipping"] = True
        self.stack.append(node)

    def handle_endtag(self, tag):
        if tag in self.VOID or not self.stack:
            return
        node = self.stack.pop()
        if node.get("skipping"):
            self.skip -= 1
        text = "".join(node["text"])
        if self.stack:
            self.stack[-1]["text"].append(text)
            self.stack[-1]["figure"] |= node["figure"] and not node["container"]
        if node["container"]:
            self.blocks.append({**node, "text": text})

    def handle_data(self, data):
        if self.stack and not self.skip:
            self.stack[-1]["text"].append(data)
            if FIGURE.search(data):
                self.stack[-1]["figure"] = True


def _blocks(page: str) -> list[dict]:
    p = _Blocks()
    p.feed(page)
    return p.blocks


def test_every_agreement_figure_on_the_dashboard_names_its_data(story_store):
    from autometrics.dashboards.render import render_dashboard

    mon = story_store
    page = render_dashboard(mon)
    with_figures = [b for b in _blocks(page) if b["figure"]]
    assert len(with_figures) > 10
    for b in with_figures:
        assert LABELS.search(b["text"]), f"a τ/p without the data it was computed on: {b['tag']} {b['classes']}: {b['text'][:300]}"
        if b["tag"] != "th" and not b["classes"] & {"panel", "meta"}:  # headers and explanations: n is per row
            assert WITH_N.search(b["text"]), f"a label without its n: {b['text'][:300]}"

    ch = mon.champion()
    st = ch["statistics"]
    cards = {b["id"]: b["text"] for b in _blocks(page) if b["id"] in ("heldout", "fit-test", "live")}
    hold, fit_test, live = st["holdout"]["challenger"], st["fit"]["test"], st["live_validity"]["window"]
    assert f"{hold['tau']:.3f}" in cards["heldout"] and f"newest held-out feedback at refit (n={hold['n']}, champion/challenger" in cards["heldout"]
    assert f"{fit_test['tau']:.3f}" in cards["fit-test"] and f"fit-time test split (n={fit_test['n']};" in cards["fit-test"]
    assert f"{live['tau']:.3f}" in cards["live"] and f"live feedback since the fit (n={live['n']}, from " in cards["live"]


def _warning_items(page: str) -> list[str]:
    section = page.split("<div id='alerts'>", 1)[1].split("<h2>", 1)[0]
    return [b["text"] for b in _blocks(section) if b["classes"] & {"warn", "alert"}]


def _assert_warnings_labelled(mon, page: str) -> None:
    """Each of the champion's warnings carries the label of its figure, by where it came from:
    the evaluator artifact (the fit, its test split) or the refit (the newest held-out feedback)."""
    champ = mon.champion()
    st = champ["statistics"]
    items = _warning_items(page)
    assert len(items) == len(st["warnings"]) + len(mon.alerts())
    for w in st["warnings"]:
        (item,) = [i for i in items if w in i]
        if w in champ["artifact"]["warnings"]:
            expected = f"fit-time test split (n={st['fit']['test']['n']};"
        else:
            expected = f"newest held-out feedback at refit (n={st['holdout']['challenger']['n']},"
        assert expected in item.split(w)[0], item


def test_warnings_name_the_figure_they_are_about(story_store, tmp_path):
    """The fit's own warnings (from the evaluator artifact) are about its test split, the refit's
    about the newest held-out feedback; the monitor's alerts say which data they were measured on
    and which version they are about."""
    import sqlite3

    import sqlalchemy as sa
    from autometrics.dashboards.render import render_dashboard
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    mon = story_store
    page = render_dashboard(mon)
    _assert_warnings_labelled(mon, page)
    small = [a for a in mon.alerts() if a["kind"] == "small_n"]  # raised when v1 was promoted on 27 held-out points
    assert len(small) == 1 and small[0]["details"]["n"] == 27
    (item,) = [i for i in _warning_items(page) if small[0]["message"] in i]
    assert "v1 (retired, not the current evaluator)" in item and "newest held-out feedback at refit (n=27," in item
    (drift,) = [a for a in mon.alerts() if a["kind"] == "score_drift"]
    (item,) = [i for i in _warning_items(page) if drift["message"] in i]
    run = [w for w in drift["details"]["windows"] if w["index"] in drift["details"]["run"]]  # the significant windows
    assert len(run) >= 2 and f"score distribution (n={40 * len(run)} online scores in {len(run)} window(s) vs the reference of the " \
        "first 50 online scores after the fit's data)" in item

    # v1 as the champion again (on a copy): its warnings are of both kinds
    copy = tmp_path / "copy.db"
    with sqlite3.connect(sa.engine.make_url(mon.store.url).database) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)  # the store runs in WAL mode: a file copy could miss the newest pages
    old = Monitor(f"sqlite:///{copy}", MonitorConfig(target="score", project="p"))
    old.rollback(1)
    v1 = old.champion()
    assert any(w.startswith("only 63 labelled examples") for w in v1["artifact"]["warnings"])  # the fit's 63 training rows
    assert any(w.startswith("small held-out set (n=27") for w in v1["statistics"]["warnings"])  # the refit's held-out set
    page = render_dashboard(old)
    _assert_warnings_labelled(old, page)
    assert "fit-time test split (n=" in page.split("only 63 labelled examples")[0].rsplit("⚠", 1)[1]


def test_lower_is_better_metrics_read_correctly(story_store):
    """The direction shown is the one the evaluator uses (checked on the evaluator itself), and a
    direction against the metric's card is flagged with a reading; a negative weight on a
    lower-is-better metric is not."""
    from autometrics.dashboards.render import render_dashboard
    from autometrics.evaluators.evaluator import Evaluator

    mon = story_store
    ch = mon.champion()
    ev = Evaluator(ch["artifact"])
    page = render_dashboard(mon)
    table = page.split("<table id='contributions'>", 1)[1].split("</table>", 1)[0]
    rows = {re.search(r"<code>([^<]+)</code>", r).group(1): r for r in table.split("<tr")[2:]}
    feats = {f["feature"]: f for f in ch["artifact"]["features"]}
    assert set(rows) == set(feats)
    for name, f in feats.items():
        base = {k: [g["mean"]] for k, g in feats.items()}
        up = dict(base, **{name: [f["mean"] + f["scale"]]})
        raises = ev.predict(up, clip=False)[0] > ev.predict(base, clip=False)[0]  # what the evaluator does
        row = rows[name]
        assert ("higher value raises the score" if raises else "lower value raises the score") in row
        assert ("higher is better" if f["higher_is_better"] else "lower is better") in row
        against = raises != f["higher_is_better"]
        assert (f"data-contradicts='{str(against).lower()}'" in row) and (("⚠ contradicts its card" in row) == against)
    fkgl, length = feats["FKGL"], feats["LengthRatio"]
    assert fkgl["weight"] < 0 and not fkgl["higher_is_better"]
    assert "negative weight on a lower-is-better metric: a lower FKGL raises the score, as its card expects" in rows["FKGL"]
    assert length["weight"] < 0 and length["higher_is_better"]
    assert ("a lower LengthRatio raises the score although the card says higher is better; on this feedback humans preferred "
            "lower LengthRatio (its τ with the labels on the fit-time training split (n=") in rows["LengthRatio"]


def test_versions_show_and_list_label_every_tau(story_store, capsys):
    from autometrics._cli.main import main

    mon = story_store
    scope = ["--store", mon.store.url, "--project", "p", "--target", "score"]
    for number in (1, 2):
        assert main(["versions", "show", str(number), *scope]) == 0
        out = capsys.readouterr().out
        lines = [x for x in out.splitlines() if re.search(r"\btau\b|τ|p=", x)]
        assert len(lines) >= 3
        for line in lines[1:]:  # the first line is the refit's reason, which says "on the newest held-out feedback ... n="
            if not line.endswith(":"):  # a heading
                assert LABELS.search(line) or line.strip().startswith("champion v"), line
        st = mon.version(number)["statistics"]
        assert f"newest held-out feedback at refit (n={st['holdout']['challenger']['n']}, champion/challenger comparison): tau" in out
        assert f"fit-time test split (n={st['fit']['test']['n']}; the fit's own split of the {st['n_train']} older" in out
        if number == 1:  # retired: its warnings, each with its figure; FKGL against its card on 63 ratings
            assert "warning [fit-time test split (n=" in out and "]: only 63 labelled examples" in out
            assert "warning [newest held-out feedback at refit (n=27, champion/challenger comparison)]: small held-out set" in out
            assert "not measured (only the champion scores traces online)" in out
            assert re.search(r"FKGL +weight \+[0-9.]+  higher value raises the score \(card: lower is better\)\n"
                             r"      ⚠ contradicts its card: a higher FKGL", out)
        else:  # the champion: live validity measured, FKGL as its card expects, LengthRatio against its card
            assert f"live feedback since the fit (n={st['live_validity']['window']['n']}, from " in out
            assert "champion v1 on the same feedback: tau" in out
            assert re.search(r"FKGL +weight -[0-9.]+  lower value raises the score \(card: lower is better\)\n(?!      ⚠)", out)
            assert re.search(r"LengthRatio +weight -[0-9.]+  lower value raises the score \(card: higher is better\)\n"
                             r"      ⚠ contradicts its card: a lower LengthRatio", out)
    assert main(["versions", "list", *scope]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "on the newest held-out feedback at refit" in header and "on the fit-time test split" in header


def test_langfuse_warnings_name_their_figure(story_store):
    from autometrics.dashboards.langfuse_push import LangfusePush

    mon = story_store
    v1 = mon.version(1)
    warn = dict(LangfusePush.version_warnings(None, v1, mon.alerts()))  # plain text; no Langfuse needed
    assert "newest held-out feedback at refit (n=27, champion/challenger comparison)" in warn["small-n"]


def test_reconcile_says_whether_figures_on_different_data_contradict():
    from autometrics.dashboards.figures import reconcile

    sig = {"tau": 0.41, "ci_low": 0.2, "ci_high": 0.6, "p_value": 4e-4}
    weak = {"tau": 0.2, "ci_low": -0.1, "ci_high": 0.45, "p_value": 0.21}
    apart = {"tau": -0.1, "ci_low": -0.3, "ci_high": 0.1, "p_value": 0.4}
    assert reconcile([(sig, "a (n=36)"), (sig, "b (n=40)")]) is None  # they agree: nothing to explain
    both = reconcile([(sig, "newest held-out feedback at refit (n=36)"), (weak, "fit-time test split (n=26)")])
    assert "CIs overlap, so they do not contradict" in both and "(n=26) τ = 0.200, p = 0.21" in both
    assert "do not overlap" in reconcile([(sig, "x (n=36)"), (apart, "y (n=30)")])
    assert reconcile([(sig, "x (n=36)"), ({}, None)]) is None  # a figure not measured yet is left out
