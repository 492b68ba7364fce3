"""The widgets show what the engine recorded: the step view against the Step records and the output."""
from html.parser import HTMLParser

import pytest

from helpers import random_drafter, tiny_target
from peagle_lab.engines.request import SpecResult, Step
from peagle_lab.engines.teaching import generate
from peagle_lab.viz import acceptance_explorer, acceptance_figure, step_explorer, step_html, step_view


def decode(ids):
    return "".join(f"<{i}>" for i in ids)


class _Cells(HTMLParser):
    """Collects (data-role, data-token, shown text) of every table cell in step_html's output."""

    def __init__(self):
        super().__init__()
        self.cells, self._depth, self.summary = [], 0, ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "td":
            self.cells.append({"role": attrs["data-role"], "token": int(attrs["data-token"]), "text": []})
            self._depth = 1
        elif tag == "b":
            self._depth = -1

    def handle_endtag(self, tag):
        if tag in ("td", "b"):
            self._depth = 0

    def handle_data(self, data):
        if self._depth == 1:
            self.cells[-1]["text"].append(data)
        elif self._depth == -1:
            self.summary += data


def parse(html):
    p = _Cells()
    p.feed(html)
    return p


@pytest.fixture(scope="module")
def spec():
    """A real sampled generation with the engine: a two-token target and a random drafter, so every
    accept count 0..K occurs (K = all accepted, a bonus step)."""
    tgt = tiny_target(vocab=2, seed=0)
    drafter = random_drafter(tgt, parallel=False, seed=1)
    out = generate(tgt, [1, 0, 1, 0], method="eagle", drafter=drafter, k=3, max_new_tokens=30, temperature=1.0,
                   seed=0, stop_at_eos=False)
    assert {s.accepted for s in out.steps} == {0, 1, 2, 3}, [s.accepted for s in out.steps]
    return out


def test_step_view_follows_the_records_and_rebuilds_the_output(spec):
    rebuilt = [spec.tokens[0]]
    for i, step in enumerate(spec.steps):
        v = step_view(spec, i)
        assert v["drafts"] == step.drafts and v["accepted"] == step.accepted and v["next_token"] == step.next_token
        n, k = step.accepted, len(step.drafts)
        assert v["verdicts"][:n] == ["accepted"] * n and len(v["verdicts"]) == k
        if n < k:
            assert v["verdicts"][n] == "rejected" and set(v["verdicts"][n + 1:]) <= {"discarded"}
        assert v["next_kind"] == ("extra" if n == k else "replacement")
        assert v["start"] == len(rebuilt)
        rebuilt += v["yielded"]
    # the steps' accepted drafts + target tokens are exactly the generated text, in order
    assert rebuilt == spec.tokens


def test_step_html_shows_each_cell_as_recorded(spec):
    for i, step in enumerate(spec.steps):
        v = step_view(spec, i)
        page = parse(step_html(spec, decode, i))
        assert [c["role"] for c in page.cells] == v["verdicts"] + [v["next_kind"]]
        assert [c["token"] for c in page.cells] == step.drafts + [step.next_token]
        for c in page.cells:  # each cell shows its position, the decoded token and its verdict
            assert decode([c["token"]]) in c["text"] and c["role"] in c["text"]
        assert f"step {i + 1} of {len(spec.steps)}: accepted {step.accepted} of {len(step.drafts)}" in page.summary


def test_extra_bonus_when_all_accepted_and_clear_errors():
    r = SpecResult(tokens=[5, 1, 2, 3, 9], prompt_len=2, seconds=0.0, steps=[Step([1, 2, 3], 3, 9)])
    page = parse(step_html(r, decode, 0))
    assert [c["role"] for c in page.cells] == ["accepted"] * 3 + ["extra"]
    assert "bonus" in page.summary and "4 tokens this step" in page.summary
    with pytest.raises(IndexError, match="1 steps"):
        step_view(r, 1)
    with pytest.raises(ValueError, match="no speculative steps"):
        step_view(SpecResult(tokens=[5], prompt_len=2, seconds=0.0), 0)


def test_step_explorer_slider_and_buttons(spec):
    w = step_explorer(spec, decode)
    num = len(spec.steps)
    assert (w.slider.min, w.slider.max, w.slider.value) == (1, num, 1)
    assert w.view.value == step_html(spec, decode, 0) and w.prev.disabled and not w.next.disabled
    w.next.click()
    assert w.slider.value == 2 and w.view.value == step_html(spec, decode, 1)
    w.slider.value = num
    assert w.view.value == step_html(spec, decode, num - 1) and w.next.disabled
    w.next.click()  # stays on the last step
    assert w.slider.value == num
    w.prev.click()
    assert w.view.value == step_html(spec, decode, num - 2)


def test_acceptance_figure_has_k_bars_with_the_stats_heights(spec):
    stats = spec.acceptance
    fig = acceptance_figure([dict(method="eagle", k=3, acceptance_per_position=stats.per_position,
                                  acceptance_length=stats.acceptance_length)])
    (bars,) = fig.data
    assert list(bars.x) == [1, 2, 3] and list(bars.y) == stats.per_position
    counts = [sum(s.accepted > i for s in spec.steps) / len(spec.steps) for i in range(3)]
    assert list(bars.y) == counts


def test_acceptance_explorer_toggles_method_k_and_source():
    def row(method, k, source, first):
        return dict(method=method, k=k, source=source, prompts="mt-bench", temperature=0.0,
                    acceptance_per_position=[first] + [first / 2] * (k - 1))
    rows = [row("peagle", 3, "vLLM", 0.6), row("peagle", 3, "teaching engine", 0.6), row("eagle", 3, "vLLM", 0.5),
            row("peagle", 5, "vLLM", 0.4), dict(method="none", k=None, source="vLLM", acceptance_per_position=None)]
    box = acceptance_explorer(rows)
    d = box.dropdowns
    assert list(d["source"].options) == ["all", "teaching engine", "vLLM"] and list(d["k"].options) == [3, 5]
    assert list(d["method"].options) == ["all", "eagle", "peagle"]  # the row without acceptance is left out
    assert box.selected() == rows[:3]  # K = 3, every method and source
    d["source"].value = "vLLM"
    assert box.selected() == [rows[0], rows[2]]
    d["method"].value, d["k"].value = "peagle", 5
    assert box.selected() == [rows[3]]
    d["source"].value = "teaching engine"
    assert box.selected() == []
    # the bars of one method from two engines are told apart by their label and colour
    fig = acceptance_figure(rows[:2])
    assert [b.name for b in fig.data] == ["peagle K=3 · vLLM", "peagle K=3 · teaching engine"]
    assert fig.data[0].marker.color is None


def test_acceptance_explorer_without_source_and_with_one_row():
    box = acceptance_explorer([dict(method="eagle", k=3, acceptance_per_position=[0.5, 0.2, 0.1])])
    assert "source" not in box.dropdowns and len(box.selected()) == 1
    with pytest.raises(ValueError, match="no rows"):
        acceptance_explorer([dict(method="none", k=None, acceptance_per_position=None)])


def test_token_stream_colours_accepted_bonus_and_rejected():
    from types import SimpleNamespace as NS

    from peagle_lab.viz import BONUS_STYLE, TARGET_STYLE, token_stream_html
    steps = [NS(drafts=[11, 12, 13], accepted=1, next_token=20),      # 11 accepted, 12 13 rejected, 20 replaces 12
             NS(drafts=[14, 15, 16], accepted=3, next_token=21)]      # all accepted: 21 comes after them
    html = token_stream_html(NS(tokens=[10], steps=steps), lambda ids: "".join(f"<{i}>" for i in ids))
    body = html.split("</div>", 1)[1]                                  # after the legend
    assert 'title="accepted 1 of 3 drafts">&lt;11&gt;<' in body
    assert 'line-through' in body and '&lt;12&gt;&lt;13&gt;' in body
    assert f'style="{TARGET_STYLE}" title="target\'s token in place of a rejected draft">&lt;20&gt;' in body
    assert f'style="{BONUS_STYLE}" title="bonus token after all drafts">&lt;21&gt;' in body
    assert body.count("bonus token after all drafts") == 1 and body.count("in place of a rejected draft") == 1


def test_acceptance_explorer_in_colab_shows_the_figure_as_a_page_that_loads_plotly(monkeypatch):
    """Colab does not render a plotly figure inside an ipywidgets Output: there the explorer displays HTML (an
    iframe whose page loads plotly.js from its CDN), elsewhere the figure itself."""
    import html as htmllib
    import sys
    import types

    import IPython.display
    import plotly.graph_objects as go

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    rows = [dict(method="eagle", k=k, acceptance_per_position=[0.5] * k) for k in (3, 5)]
    acceptance_explorer(rows)
    assert isinstance(shown.pop(), go.Figure)  # JupyterLab, nbmake: the figure itself

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    box = acceptance_explorer(rows)
    box.dropdowns["k"].value = 5
    assert len(shown) == 2 and all(isinstance(obj, IPython.display.HTML) for obj in shown)
    for obj, k in zip(shown, (3, 5)):
        assert obj.data.startswith('<div><iframe srcdoc="') and "height:400px" in obj.data  # the figure's 380 + 20
        page = htmllib.unescape(obj.data.split('srcdoc="', 1)[1].split('" style=', 1)[0])
        assert '<script charset="utf-8" src="https://cdn.plot.ly/' in page and "Plotly.newPlot" in page
        assert f"K={k}" in page and page.index("cdn.plot.ly") < page.index("Plotly.newPlot")


def test_what_if_explorer_prints_first_then_follows_its_sliders(capsys, monkeypatch):
    """The what-if control prints the prediction at its starting position (what a run without widgets shows), then
    redraws on every slider move; its buttons load the 135M engine's and a 20B-size drafter's costs; without
    ipywidgets it prints and returns None."""
    import sys

    from peagle_lab import costmodel as cm
    from peagle_lab.viz import what_if_explorer, what_if_text

    box = what_if_explorer(accuracy=1.0)
    printed = capsys.readouterr().out
    start = what_if_text(cm.what_if(1.0))
    assert start in printed and "P-EAGLE / EAGLE-3 1.10x (pays)" in printed
    assert start in box.view.value.replace("&#x27;", "'")
    s = box.sliders
    s["accuracy"].value = 0.8
    assert "does not pay" in box.view.value
    assert what_if_text(cm.what_if(0.8, s["pass_vs_verify"].value, s["pass_ratio"].value)) in \
        box.view.value.replace("&#x27;", "'")
    big, own = cm.cost_ratios(cm.drafter_20b()), cm.cost_ratios(cm.h200_135m())
    box.buttons[1].click()
    assert s["pass_vs_verify"].value == pytest.approx(big["pass_vs_verify"], abs=0.001)
    assert s["pass_ratio"].value == pytest.approx(big["pass_ratio"], abs=0.01)
    assert "(pays)" in box.view.value                                   # dear passes: parallel drafting pays
    box.buttons[0].click()
    assert s["pass_vs_verify"].value == pytest.approx(own["pass_vs_verify"], abs=0.001)

    monkeypatch.setitem(sys.modules, "ipywidgets", None)                 # a Python without ipywidgets
    assert what_if_explorer(accuracy=0.9) is None
    assert what_if_text(cm.what_if(0.9)) in capsys.readouterr().out


def test_pays_figure_shows_every_setting_the_paper_band_and_the_lines_to_clear():
    """Notebook 07's figure: three panels sharing x; every row's point sits at its drafting share with the row's
    values; the paper's range is a band in the middle panel and the blog's 1.55x a star; 1.0 is drawn in the two
    speed panels."""
    from peagle_lab import costmodel as cm
    from peagle_lab.viz import PAYS_LABELS, pays_figure

    rows = cm.where_it_pays()
    fig = pays_figure(rows)
    assert fig.layout.xaxis.matches == fig.layout.xaxis2.matches == "x3"       # one x axis for the three panels
    assert set(PAYS_LABELS) == {r["setting"] for r in rows}
    for r in rows:
        label = PAYS_LABELS[r["setting"]]
        for axis, column in (("y", "al_ratio"), ("y2", "measured_ratio"), ("y2", "predicted_ratio"),
                             ("y3", "measured_parallel_vs_ar"), ("y3", "parallel_vs_ar")):
            if r[column] is None or (axis == "y" and r["setting"].startswith("gpt-oss-20b-size")):
                continue
            hits = [(x, y) for t in fig.data if t.yaxis == axis and t.hovertext is not None
                    for x, y, h in zip(t.x, t.y, t.hovertext) if h == r["setting"] and y == r[column]]
            assert hits and hits[0][0] == r["draft_share"], (label, column)
    star = [t for t in fig.data if t.marker.symbol == "star" and t.yaxis == "y2"]
    assert list(star[0].y) == [1.55]
    band = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(band) == 1 and (band[0].y0, band[0].y1) == cm.paper_range() and band[0].yref == "y2"
    ones = [s for s in fig.layout.shapes if s.type == "line" and s.y0 == s.y1 == 1.0]
    assert sorted(s.yref for s in ones) == ["y2", "y3"]


# --- repeated concurrency-1 measurements: notebook 05's spread ---------------------------------------------------
def _c1_rounds():
    """The H100 rows of CUDA vLLM at concurrency 1, each configuration in three interleaved rounds."""
    from peagle_lab import recorded

    return [r for r in recorded.load("dspark")["vllm"]["rows"] if r["concurrency"] == 1]


def test_repeat_spread_is_the_median_min_and_max_of_the_recorded_rounds():
    import numpy as np

    from peagle_lab.viz import repeat_spread

    rows = _c1_rounds()
    table = repeat_spread(rows, min_repeats=3)
    assert [s["config"] for s in table] == list(dict.fromkeys(r["config"] for r in rows))
    plain = {r["runner"]: float(np.median([q["tokens_per_s"] for q in rows if q["config"] == f"ar-{r['runner']}"]))
             for r in rows}
    for s in table:
        mine = [r for r in rows if r["config"] == s["config"]]
        tps = [r["tokens_per_s"] for r in mine]
        assert s["repeats"] == len(tps) == len({r["run"] for r in mine}) >= 3
        assert s["median_tok_s"] == pytest.approx(float(np.median(tps)), rel=1e-12)
        assert (s["min_tok_s"], s["max_tok_s"]) == (min(tps), max(tps))
        assert s["spread_pct"] == pytest.approx(100 * (max(tps) - min(tps)) / float(np.median(tps)))
        assert s["x_plain"] == pytest.approx(s["median_tok_s"] / plain[s["runner"]])
        als = {r["acceptance_length"] for r in mine}
        assert s["acceptance_length"] == (None if als == {None} else pytest.approx(float(np.median(list(als)))))
        assert (s["method"], s["k"], s["runner"]) == (mine[0]["method"], mine[0]["k"], mine[0]["runner"])
    by = {s["config"]: s for s in table}
    # what notebook 05 reads off the table: P-EAGLE (V1) 0.65x plain V1 and 0.56x EAGLE-3 (V2); EAGLE-3 1.26x plain V2
    assert round(by["peagle-k3-v1"]["x_plain"], 2) == 0.65 and round(by["eagle-k3-v2"]["x_plain"], 2) == 1.26
    assert round(by["peagle-k3-v1"]["median_tok_s"] / by["eagle-k3-v2"]["median_tok_s"], 2) == 0.56
    assert max(s["spread_pct"] for s in table) < 6          # a few percent within a configuration


def test_spread_figure_draws_each_configuration_from_its_repeats_beside_plain_decoding():
    from peagle_lab.viz import MIN_REPEATS, repeat_spread, spread_figure

    rows = _c1_rounds()
    by = {s["config"]: s for s in repeat_spread(rows)}
    fig = spread_figure(rows)
    drawn = []
    for trace in fig.data:
        for config, y, up, down in zip(trace.customdata, trace.y, trace.error_y.array, trace.error_y.arrayminus):
            s = by[config]
            assert s["repeats"] >= MIN_REPEATS == 3
            assert y == s["median_tok_s"]
            assert y + up == pytest.approx(s["max_tok_s"]) and y - down == pytest.approx(s["min_tok_s"])
            drawn.append(config)
    plain = [c for c, s in by.items() if s["method"] == "ar"]
    assert sorted(drawn) == sorted(set(by) - set(plain))
    lines = sorted(s.y0 for s in fig.layout.shapes if s.type == "line" and s.y0 == s.y1)
    bands = sorted((s.y0, s.y1) for s in fig.layout.shapes if s.type == "rect")
    assert lines == sorted(by[c]["median_tok_s"] for c in plain)            # plain decoding, V1 and V2
    assert bands == sorted((by[c]["min_tok_s"], by[c]["max_tok_s"]) for c in plain)


def test_spread_figure_refuses_a_configuration_measured_twice():
    from peagle_lab.viz import repeat_spread, spread_figure

    rows = [r for r in _c1_rounds() if not (r["config"] == "peagle-k3-v1" and r["run"] == "c1-r2")]
    with pytest.raises(ValueError, match=r"peagle-k3-v1 has 2 measurement.*at least 3.*interleaved rounds.*"
                                         r"min_repeats=1"):
        spread_figure(rows)
    with pytest.raises(ValueError, match="peagle-k3-v1 has 2"):
        repeat_spread(rows, min_repeats=3)
    assert {s["config"]: s["repeats"] for s in repeat_spread(rows)}["peagle-k3-v1"] == 2   # a table still can
    with pytest.raises(ValueError, match="no rows at concurrency 2"):
        repeat_spread(rows, concurrency=2)
