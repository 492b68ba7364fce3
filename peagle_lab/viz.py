"""Plots and widgets: acceptance per draft position, and the token stream of one generation.

* :func:`acceptance_figure` -- bars per draft position (one trace per method/K), plotly;
* :func:`acceptance_explorer` -- the same with dropdowns for method, K, prompt set, temperature (in
  Colab its figure is shown as HTML, see :func:`figure_for_output`);
* :func:`token_stream_html` -- generated text coloured by accepted draft and the target's token, with the
  rejected drafts struck through, so one can watch the drafter at work;
* :func:`step_view` / :func:`step_html` / :func:`step_explorer` -- one speculative step at a time
  (its K drafts, which the target accepted, where it rejected, the token the target added), with
  a slider and buttons to move through the steps of a generation.
* :func:`pays_figure` -- notebook 07's three panels on where parallel drafting pays, and
  :func:`what_if_explorer` -- sliders over the cost model's what-if (it prints first, so a run
  without widgets still shows the prediction).
* :func:`repeat_spread` / :func:`spread_figure` -- one configuration measured several times (vLLM rows with a
  ``config`` and a ``run`` each): the median, lowest and highest tokens/s per configuration, and a figure of the
  medians with the lowest-to-highest range as error bars beside plain decoding's medians.

Rows are dicts as written by ``peagle-lab bench`` (``method``, ``k``,
``acceptance_per_position``), optionally with ``prompts``, ``temperature`` and ``source`` (which
engine measured the row, e.g. vLLM's counters or the teaching engine).
"""
from __future__ import annotations

import html
import statistics
import sys

import plotly.graph_objects as go
import plotly.io as pio

COLORS = {"eagle": "#1f77b4", "peagle": "#d62728"}


def in_colab() -> bool:
    """True in Google Colab (checked when called, so a test can pretend)."""
    return "google.colab" in sys.modules


if not in_colab():
    # Live plots in JupyterLab (mimetype) and self-contained ones in exported HTML (`make tour`).
    pio.renderers.default = "plotly_mimetype+notebook"


def figure_for_output(fig: go.Figure):
    """What to display for ``fig`` inside an ``ipywidgets.Output``.

    JupyterLab, VS Code and nbmake get the figure itself. Colab does not render a plotly figure
    displayed inside an Output widget (plotly.js is not loaded there), so in Colab the figure becomes
    a page of its own, in an iframe, that loads plotly.js from its CDN before drawing.
    """
    if not in_colab():
        return fig
    from IPython.display import HTML

    page = fig.to_html(include_plotlyjs="cdn", full_html=True)
    height = (fig.layout.height or 450) + 20
    return HTML(f'<div><iframe srcdoc="{html.escape(page, quote=True)}" '
                f'style="width:100%;height:{height}px;border:0"></iframe></div>')


def acceptance_figure(rows: list[dict], title: str = "Acceptance per draft position") -> go.Figure:
    """Grouped bars: x = draft position (1..K), y = accepted at that position / drafts."""
    fig = go.Figure()
    rows = [r for r in rows if r.get("acceptance_per_position")]
    methods = [r["method"] for r in rows]
    by_method = len(rows) <= 2 and len(set(methods)) == len(methods)  # a method colour names one bar
    for row in rows:
        per_pos = row["acceptance_per_position"]
        label = (f"{row['method']} K={row['k']}" + (f" · {row['source']}" if row.get("source") else "")
                 + (f" (AL {row['acceptance_length']:.2f})" if row.get("acceptance_length") else ""))
        fig.add_bar(x=list(range(1, len(per_pos) + 1)), y=per_pos, name=label,
                    marker_color=COLORS.get(row["method"]) if by_method else None)
    fig.update_layout(title=title, barmode="group", xaxis_title="draft position", yaxis_title="acceptance rate",
                      yaxis_range=[0, 1], xaxis_dtick=1, height=380, margin=dict(t=50, b=40))
    return fig


def acceptance_explorer(rows: list[dict]):
    """ipywidgets dropdowns (method, K, prompt set, temperature) over bench rows, re-plotting on change.

    Rows that carry a ``source`` (which engine measured them) get one more dropdown, so rows from
    two engines can be compared or looked at one engine at a time. ``box.selected()`` returns the
    rows now plotted and ``box.dropdowns`` the dropdowns by key (handles for tests and readers).
    """
    import ipywidgets as W
    from IPython.display import display

    rows = [r for r in rows if r.get("acceptance_per_position")]
    if not rows:
        raise ValueError("no rows with acceptance_per_position; run a speculative method (eagle/peagle) first")

    def options(key):
        return sorted({r.get(key) for r in rows}, key=lambda v: (v is None, v))

    dropdowns = {"method": W.Dropdown(options=["all"] + options("method"), description="method"),
                 "k": W.Dropdown(options=options("k"), description="K"),
                 "prompts": W.Dropdown(options=options("prompts"), description="prompts"),
                 "temperature": W.Dropdown(options=options("temperature"), description="temperature")}
    if any(r.get("source") for r in rows):
        dropdowns["source"] = W.Dropdown(options=["all"] + options("source"), description="source")
    any_of = {"method", "source"}  # dropdowns with an "all" entry
    out = W.Output()

    def selected():
        return [r for r in rows if all(d.value == r.get(key) or (key in any_of and d.value == "all")
                                       for key, d in dropdowns.items())]

    def redraw(*_):
        chosen = selected()
        out.clear_output(wait=True)
        with out:
            if chosen:
                fig = acceptance_figure(chosen, f"Acceptance per draft position, K={dropdowns['k'].value}")
                display(figure_for_output(fig))
            else:
                print("no measurement for this combination")

    for w in dropdowns.values():
        w.observe(redraw, names="value")
    redraw()
    d = dropdowns
    top = [d["method"], d["k"]] + ([d["source"]] if "source" in d else [])
    box = W.VBox([W.HBox(top), W.HBox([d["prompts"], d["temperature"]]), out])
    box.selected, box.dropdowns = selected, dropdowns
    return box


TARGET_STYLE = "background:#cfe2ff"
BONUS_STYLE = "background:#ffe08a;font-weight:bold"


def token_stream_html(result, decode, show_rejected: bool = True) -> str:
    """HTML of a speculative generation: green = accepted draft, struck-through red = rejected draft, and each
    step's last token (the target's own) blue where it replaced a rejected draft, gold where every draft of
    the step was accepted (vLLM's bonus token)."""
    def span(ids, style, title):
        text = html.escape(decode(ids)).replace("\n", "&#8629;<br>")
        return f'<span style="{style}" title="{title}">{text}</span>'

    parts = [span([result.tokens[0]], "background:#cfe2ff", "first token (prefill)")]
    for step in result.steps:
        n = step.accepted
        if n:
            parts.append(span(step.drafts[:n], "background:#c8f7c5", f"accepted {n} of {len(step.drafts)} drafts"))
        if show_rejected and n < len(step.drafts):
            parts.append(span(step.drafts[n:], "color:#c0392b;text-decoration:line-through;font-size:80%",
                              "rejected drafts"))
        if n == len(step.drafts):   # every draft accepted: the target's token is an extra one, the bonus token
            parts.append(span([step.next_token], BONUS_STYLE, "bonus token after all drafts"))
        else:                       # the target's token stands where the first rejected draft stood
            parts.append(span([step.next_token], TARGET_STYLE, "target's token in place of a rejected draft"))
    legend = ('<div style="font-size:85%;margin-bottom:4px"><span style="background:#c8f7c5">accepted draft</span> '
              f'target\'s token: <span style="{TARGET_STYLE}">in place of a rejected draft</span> '
              f'<span style="{BONUS_STYLE}">after all drafts (bonus)</span> '
              '<span style="color:#c0392b;text-decoration:line-through">rejected draft</span></div>')
    mono = "font-family:monospace;white-space:pre-wrap;line-height:1.6"
    return legend + f'<div style="{mono}">' + "".join(parts) + "</div>"


def time_split_figure(rows: list[dict], title: str = "Where a generation's time goes") -> go.Figure:
    """Stacked bars of prefill / draft / verify / bookkeeping seconds per configuration."""
    rows = [r for r in rows if r.get("time_split_s")]
    labels = [f"{r['method']} K={r['k']}" for r in rows]
    fig = go.Figure()
    for part in ("prefill", "draft", "verify", "bookkeeping"):
        fig.add_bar(x=labels, y=[r["time_split_s"][part] for r in rows], name=part)
    fig.update_layout(title=title, barmode="stack", yaxis_title="seconds", height=360, margin=dict(t=50, b=40))
    return fig


# --- one speculative step at a time ---------------------------------------------------------------
# Greedy and sampled verification both accept a prefix: drafts 1..n pass, draft n+1 is rejected,
# and drafts after it are never looked at (they were conditioned on a rejected token). The target
# then adds one token of its own: in place of draft n+1 ("replacement"), or after draft K when all K
# passed ("extra": vLLM's bonus token). So one step yields n + 1 tokens.
STEP_COLORS = {"accepted": "#c8f7c5", "rejected": "#f5b7b1", "discarded": "#e5e7e9",
               "extra": "#ffe08a", "replacement": "#cfe2ff"}


def step_view(result, index: int) -> dict:
    """What step ``index`` (0-based) of a speculative generation did, from its recorded ``Step``.

    Returns ``{"index", "num_steps", "k", "drafts", "verdicts", "accepted", "next_token",
    "next_kind", "start", "yielded"}``: ``verdicts[i]`` is ``"accepted"``, ``"rejected"`` or
    ``"discarded"`` for draft position i+1; ``next_kind`` says where the target's token went: ``"extra"``
    (after all K drafts) or ``"replacement"`` (in place of draft n+1);
    ``start`` is where the step's tokens begin in ``result.tokens`` and ``yielded`` the tokens it
    added there (accepted drafts + the target's token; the last step may be cut by the token
    budget or EOS)::

        >>> from peagle_lab.engines.request import SpecResult, Step
        >>> r = SpecResult(tokens=[7, 1, 2, 9], prompt_len=3, seconds=0.0, steps=[Step([1, 2, 3], 2, 9)])
        >>> v = step_view(r, 0)
        >>> v["verdicts"], v["next_kind"], v["yielded"]
        (['accepted', 'accepted', 'rejected'], 'replacement', [1, 2, 9])
    """
    steps = result.steps
    if not steps:
        raise ValueError("this result has no speculative steps (method 'ar', or it stopped after prefill)")
    if not 0 <= index < len(steps):
        raise IndexError(f"step {index} out of range: this generation has {len(steps)} steps (0..{len(steps) - 1})")
    start = 1 + sum(s.accepted + 1 for s in steps[:index])  # tokens[0] came from prefill
    step = steps[index]
    k, n = len(step.drafts), step.accepted
    verdicts = ["accepted"] * n + (["rejected"] if n < k else []) + ["discarded"] * max(0, k - n - 1)
    yielded = (step.drafts[:n] + [step.next_token])[: max(0, len(result.tokens) - start)]
    return {"index": index, "num_steps": len(steps), "k": k, "drafts": list(step.drafts), "verdicts": verdicts,
            "accepted": n, "next_token": step.next_token, "next_kind": "extra" if n == k else "replacement",
            "start": start, "yielded": yielded}


def step_html(result, decode, index: int, context_tokens: int = 24) -> str:
    """HTML for step ``index``: the text so far, then one cell per draft position and the target's token.

    Every cell carries ``data-role`` (accepted / rejected / discarded / extra / replacement) and
    ``data-token`` (the token id), so tests and scripts can read what is shown.
    """
    v = step_view(result, index)

    def text(ids):
        return html.escape(decode(ids)).replace("\n", "&#8629;") or "&nbsp;"

    def cell(role, token, head):
        strike = ";text-decoration:line-through" if role in ("rejected", "discarded") else ""
        return (f'<td data-role="{role}" data-token="{token}" style="background:{STEP_COLORS[role]};'
                f'padding:4px 8px;border:1px solid #fff;text-align:center">'
                f'<div style="font-size:75%;color:#555">{head}</div>'
                f'<div style="font-family:monospace{strike}">{text([token])}</div>'
                f'<div style="font-size:75%;color:#555">{role}</div></td>')

    cells = [cell(role, tok, f"draft {i + 1}") for i, (tok, role) in enumerate(zip(v["drafts"], v["verdicts"]))]
    cells.append(cell(v["next_kind"], v["next_token"], "target's token"))
    before = result.tokens[max(0, v["start"] - context_tokens): v["start"]]
    n = v["accepted"]
    why = ("all accepted, so the bonus token comes after them" if v["next_kind"] == "extra"
           else f"draft {n + 1} rejected, so the target's token takes its place")
    summary = (f'step {index + 1} of {v["num_steps"]}: accepted {n} of {v["k"]} drafts; {why}; '
               f'{n + 1} token{"s" if n else ""} this step')
    return (f'<div class="peagle-step" data-step="{index}">'
            f'<div style="font-size:90%;margin-bottom:4px"><b>{summary}</b></div>'
            f'<div style="font-family:monospace;color:#555;margin-bottom:4px">...{text(before)}</div>'
            f'<table style="border-collapse:collapse"><tr>{"".join(cells)}</tr></table></div>')


def step_explorer(result, decode):
    """Slider + previous/next buttons over the steps of one speculative generation (see :func:`step_html`)."""
    import ipywidgets as W

    num = len(result.steps)
    step_view(result, 0)  # raises a clear error for a result without steps
    slider = W.IntSlider(value=1, min=1, max=num, description="step", continuous_update=True)
    prev = W.Button(description="previous", icon="arrow-left", layout=W.Layout(width="110px"))
    nxt = W.Button(description="next", icon="arrow-right", layout=W.Layout(width="110px"))
    view = W.HTML()

    def show(*_):
        view.value = step_html(result, decode, slider.value - 1)
        prev.disabled, nxt.disabled = slider.value == 1, slider.value == num

    prev.on_click(lambda _: setattr(slider, "value", max(1, slider.value - 1)))
    nxt.on_click(lambda _: setattr(slider, "value", min(num, slider.value + 1)))
    slider.observe(show, names="value")
    show()
    box = W.VBox([W.HBox([prev, slider, nxt]), view])
    box.slider, box.view, box.prev, box.next = slider, view, prev, nxt  # handles for tests and readers
    return box


PAYS_LABELS = {"135M, CPU teaching engine": "CPU teaching", "135M, H200 fast engine": "H200 fast engine",
               "135M, CUDA vLLM V1 (c=1)": "vLLM V1", "135M DSpark, CUDA vLLM V2 (c=1)": "vLLM V2 (DSpark)",
               "135M DSpark, H200 fast engine (pass cost assumed = P-EAGLE's)": "DSpark, fast engine",
               "what if: 135M P-EAGLE as accurate as EAGLE-3": "what if: as accurate",
               "what if: 135M pair, a 20B-size drafter's costs": "what if: 20B-size costs",
               "gpt-oss-20b-size drafter, blog's AL (model)": "20B-size drafter (model)",
               "gpt-oss-20b, B200 (blog, measured)": "blog: gpt-oss-20b"}
_PAYS_TEXT_AT = {"CPU teaching": "top left", "DSpark, fast engine": "bottom right", "vLLM V2 (DSpark)": "bottom center",
                 "vLLM V1": "bottom right", "blog: gpt-oss-20b": "top left"}   # the rest: right of the marker


_BLUE, _ORANGE, _GREY = "#1f77b4", "#ff7f0e", "#7f7f7f"
_SHARES = [i / 100 for i in range(0, 96, 2)]


def _pays_points(fig, rows, panel, which, y, name, symbol, color=_BLUE, labels=True, size=11, at=None):
    """One marker per row that ``which`` keeps and that has a value in column ``y``, labelled unless told not."""
    sel = [r for r in rows if which(r) and r[y] is not None]
    fig.add_trace(go.Scatter(
        x=[r["draft_share"] for r in sel], y=[r[y] for r in sel], name=name, legendgroup=name,
        mode="markers+text" if labels else "markers", text=[r["label"] for r in sel] if labels else None,
        textposition=[(at or {}).get(r["label"], _PAYS_TEXT_AT.get(r["label"], "middle right")) for r in sel],
        textfont={"size": 10}, hovertext=[r["setting"] for r in sel],
        marker={"size": size, "symbol": symbol, "color": color, "line": {"width": 2}}), row=panel, col=1)


def _pays_line(fig, panel, y, name, dash="solid", color="black"):
    fig.add_trace(go.Scatter(x=_SHARES, y=y, mode="lines", name=name,
                             line={"dash": dash, "color": color, "width": 1.5}), row=panel, col=1)


def _is_what_if(r):
    return r["setting"].startswith("what if")


def _is_published(r):
    return r["kind"] == "published"


def _pays_al_panel(fig, rows, pair):
    """Top: the AL ratio each setting has, the ratio it needs at its own K and pass cost, and break-even lines."""
    from .costmodel import break_even_ratio

    k_seq, r_pair = pair["k_sequential"], pair["pass_ratio"]
    for k, dash in ((3, "dash"), (7, "dot")):
        _pays_line(fig, 1, [break_even_ratio(f, k) for f in _SHARES],
                   f"break-even, K={k}, a parallel pass = a sequential one", dash, _GREY)
    _pays_line(fig, 1, [break_even_ratio(f, k_seq, r_pair) for f in _SHARES],
               f"break-even, the 135M pair (K={k_seq}, a parallel pass = {r_pair:.1f} sequential)")
    _pays_points(fig, rows, 1, lambda r: True, "al_ratio_needed", "AL ratio needed (break-even)", "line-ew-open",
                 "black", False, 16)
    def measured(r):        # the modelled 20B-size point's ALs are the blog's: drawn once, as its star
        return not (_is_what_if(r) or _is_published(r) or r["setting"].startswith("gpt-oss-20b-size"))

    _pays_points(fig, rows, 1, measured, "al_ratio", "measured", "circle")
    _pays_points(fig, rows, 1, _is_what_if, "al_ratio", "predicted by the cost model", "circle-open")
    _pays_points(fig, rows, 1, _is_published, "al_ratio", "published (measured by others)", "star", _ORANGE, size=14)


def _pays_speed_panel(fig, rows, pair):
    """Middle: speed over EAGLE-3, predicted, measured here, and published (the blog's star, the paper's band)."""
    from .costmodel import paper_range, speed_ratio

    _pays_line(fig, 2, [speed_ratio(f, pair["al_ratio"], pair["k_sequential"], pair["pass_ratio"]) for f in _SHARES],
               f"cost model, the 135M pair's AL ratio {pair['al_ratio']:.2f}")
    _pays_points(fig, rows, 2, lambda r: r["measured_ratio"] is None, "predicted_ratio",
                 "predicted by the cost model", "circle-open")
    _pays_points(fig, rows, 2, lambda r: r["measured_ratio"] is not None, "predicted_ratio",
                 "predicted by the cost model", "circle-open", labels=False)
    _pays_points(fig, rows, 2, lambda r: not _is_published(r), "measured_ratio", "measured", "circle")
    _pays_points(fig, rows, 2, _is_published, "measured_ratio", "published (measured by others)", "star", _ORANGE,
                 size=14)
    low, high = paper_range()
    fig.add_hrect(y0=low, y1=high, fillcolor=_ORANGE, opacity=0.25, line_width=0, row=2, col=1,
                  exclude_empty_subplots=False)
    fig.add_annotation(x=0.01, y=high, xanchor="left", yanchor="bottom", showarrow=False, font={"size": 10},
                       text=f"published, the paper: {low:.2f}-{high:.2f}x over EAGLE-3 (20B-120B targets, "
                            "drafting share not given)", row=2, col=1)


def _pays_ar_panel(fig, rows, pair):
    """Bottom: speed over plain decoding, with the cost model's curves for the 135M pair's two ALs."""
    from .costmodel import acceptance_length, h200_135m, speedup_vs_ar

    acc = h200_135m().acceptance
    k_seq = pair["k_sequential"]
    for method, al, dash in (("sequential", acceptance_length(acc["eagle"], k_seq), "dash"),
                             ("parallel", acceptance_length(acc["peagle"], pair["k_parallel"]), "solid")):
        _pays_line(fig, 3, [speedup_vs_ar(f, al, k_seq, method, pair["pass_ratio"]) for f in _SHARES],
                   f"cost model, 135M {'EAGLE-3' if method == 'sequential' else 'P-EAGLE'} (AL {al:.2f})", dash)
    _pays_points(fig, rows, 3, lambda r: r["measured_parallel_vs_ar"] is None, "parallel_vs_ar",
                 "predicted by the cost model", "circle-open", at={"what if: as accurate": "bottom right"})
    _pays_points(fig, rows, 3, lambda r: r["measured_parallel_vs_ar"] is not None, "parallel_vs_ar",
                 "predicted by the cost model", "circle-open", labels=False)
    _pays_points(fig, rows, 3, lambda r: True, "measured_parallel_vs_ar", "measured", "circle",
                 at={"H200 fast engine": "top right"})
    for column, symbol in (("sequential_vs_ar", "diamond-open"), ("measured_sequential_vs_ar", "diamond")):
        _pays_points(fig, rows, 3, lambda r: True, column, "EAGLE-3 beside it (open: predicted)", symbol, _GREY,
                     False, 9)


def pays_figure(rows: list[dict]) -> go.Figure:
    """Notebook 07's answer to *when does parallel drafting pay?* for :func:`peagle_lab.costmodel.where_it_pays`'s
    rows: three panels over EAGLE-3's drafting share of a step. Top: each setting's AL(parallel) / AL(EAGLE-3) and
    the ratio it needs (a bar), with break-even lines; middle: speed over EAGLE-3, predicted (open), measured
    (filled) and published (stars, and the paper's range as a band); bottom: speed over plain decoding, with the
    cost model's curves for the 135M pair. The lines to clear in the lower panels are 1."""
    from plotly.subplots import make_subplots

    rows = [{**r, "label": PAYS_LABELS.get(r["setting"], r["setting"])} for r in rows]
    pair = next(r for r in rows if r["setting"] == "135M, H200 fast engine")   # the shipped pair, compiled engine
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, subplot_titles=(
        "AL(parallel) / AL(EAGLE-3): a setting pays when its marker sits above its own bar",
        "speed over EAGLE-3 (tokens/s ratio): pays above 1",
        "speed over plain decoding: speculation pays above 1"))
    _pays_al_panel(fig, rows, pair)
    _pays_speed_panel(fig, rows, pair)
    _pays_ar_panel(fig, rows, pair)
    for panel in (2, 3):
        fig.add_hline(y=1.0, line={"color": "black", "width": 1}, row=panel, col=1, exclude_empty_subplots=False)
    seen = set()
    for trace in fig.data:          # one legend entry per kind of marker
        trace.showlegend = trace.name not in seen
        seen.add(trace.name)
    fig.update_xaxes(range=[0, 1.0])
    fig.update_xaxes(title_text="EAGLE-3's drafting share of a step (each method at its best K)", row=3, col=1)
    fig.update_yaxes(range=[0.3, 1.35], title_text="AL ratio", row=1, col=1)
    fig.update_yaxes(range=[0.5, 3.2], title_text="x EAGLE-3", row=2, col=1)
    fig.update_yaxes(range=[0.3, 2.7], title_text="x plain decoding", row=3, col=1)
    fig.update_layout(title="Where parallel drafting pays", height=1150, margin={"r": 20},
                      legend={"font": {"size": 10}, "orientation": "h", "y": -0.07})
    return fig

def what_if_text(row: dict) -> str:
    """One line for a :func:`peagle_lab.costmodel.what_if` row: the share, the line, the predicted speed-ups."""
    verdict = "pays" if row["pays"] else "does not pay"
    return (f"EAGLE-3 (K={row['k_sequential']}) drafts {row['draft_share']:.0%} of its step; "
            f"P-EAGLE (K={row['k_parallel']}) needs AL ratio {row['al_ratio_needed']:.3f} "
            f"and has {row['al_ratio']:.3f}: "
            f"P-EAGLE / EAGLE-3 {row['predicted_ratio']:.2f}x ({verdict}); over plain decoding: "
            f"P-EAGLE {row['parallel_vs_ar']:.2f}x, EAGLE-3 {row['sequential_vs_ar']:.2f}x")


def what_if_explorer(accuracy: float = 1.0):
    """Sliders over :func:`peagle_lab.costmodel.what_if`: P-EAGLE's acceptance as a share of EAGLE-3's, one sequential
    drafter pass over one verify (p/V), and one parallel pass in sequential passes (r); two buttons set the costs to
    the 135M engine's or a gpt-oss-20b-size drafter's. The prediction at the starting values is printed first, so a
    run that cannot show widgets (a static render, a headless run) still shows it; without ipywidgets the function
    returns None after printing. ``box.sliders`` and ``box.view`` are handles for tests and readers."""
    from .costmodel import cost_ratios, drafter_20b, h200_135m, what_if

    own, big = cost_ratios(h200_135m()), cost_ratios(drafter_20b())
    print(f"costs: 135M engine p/V {own['pass_vs_verify']:.3f}, r {own['pass_ratio']:.2f}; "
          f"gpt-oss-20b-size drafter p/V {big['pass_vs_verify']:.3f}, r {big['pass_ratio']:.2f}")
    print(f"at {accuracy:.2f}x EAGLE-3's acceptance, the 135M engine's costs:",
          what_if_text(what_if(accuracy, **own)))
    try:
        import ipywidgets as W
    except ImportError:
        return None

    style, wide = {"description_width": "190px"}, W.Layout(width="520px")
    sliders = {"accuracy": W.FloatSlider(value=accuracy, min=0.6, max=1.2, step=0.01, readout_format=".2f",
                                         description="acceptance vs EAGLE-3", style=style, layout=wide),
               "pass_vs_verify": W.FloatSlider(value=own["pass_vs_verify"], min=0.005, max=0.6, step=0.001,
                                               readout_format=".3f", description="p/V (sequential pass)",
                                               style=style, layout=wide),
               "pass_ratio": W.FloatSlider(value=own["pass_ratio"], min=0.5, max=5.0, step=0.01, readout_format=".2f",
                                           description="r (parallel pass)", style=style, layout=wide)}
    view = W.HTML()

    def show(*_):
        view.value = f"<b>{html.escape(what_if_text(what_if(**{k: s.value for k, s in sliders.items()})))}</b>"

    def use(costs):
        def set_costs(_):
            sliders["pass_vs_verify"].value, sliders["pass_ratio"].value = costs["pass_vs_verify"], costs["pass_ratio"]
        return set_costs

    buttons = [W.Button(description="135M engine's costs"), W.Button(description="20B-size drafter's costs")]
    buttons[0].on_click(use(own))
    buttons[1].on_click(use(big))
    for s in sliders.values():
        s.observe(show, names="value")
    show()
    box = W.VBox([*sliders.values(), W.HBox(buttons), view])
    box.sliders, box.view, box.buttons = sliders, view, buttons
    return box


# --- repeated measurements: how much one configuration's tokens/s moves -------------------------------------------
MIN_REPEATS = 3              # a spread drawn from fewer measurements says little about the next one
METHOD_NAMES = {"ar": "plain decoding", "none": "plain decoding", "eagle": "EAGLE-3", "peagle": "P-EAGLE",
                "dspark": "DSpark"}
_SPREAD_COLORS = {**COLORS, "dspark": "#2ca02c"}


def _config(r: dict) -> str:
    if r.get("config"):
        return r["config"]
    return "-".join(str(x) for x in (r["method"], r.get("k") and f"k{r['k']}", r.get("runner")) if x)


def repeat_spread(rows: list[dict], concurrency: int = 1, min_repeats: int = 1) -> list[dict]:
    """Per configuration, its repeated measurements at one ``concurrency``: ``repeats`` (how many),
    ``median_tok_s``, ``min_tok_s``, ``max_tok_s``, ``spread_pct`` (highest minus lowest, in % of the median),
    ``acceptance_length`` (the median AL; None for plain decoding) and ``x_plain``: the median over plain decoding's
    median on the same model runner (``runner``; None where that runner has no plain decoding). A configuration is
    the row's ``config``, or its method, K and runner. Configurations keep the order they first appear in.

    ``min_repeats`` refuses (ValueError) a configuration measured fewer times: 3 before drawing a spread.

    >>> rows = [dict(config="ar-v1", method="ar", k=None, runner="v1", concurrency=1, tokens_per_s=t,
    ...              acceptance_length=None) for t in (100.0, 104.0, 98.0)]
    >>> rows += [dict(config="peagle-k3-v1", method="peagle", k=3, runner="v1", concurrency=1, tokens_per_s=t,
    ...               acceptance_length=1.9) for t in (60.0, 66.0, 65.0)]
    >>> [(s["config"], s["repeats"], s["median_tok_s"], s["min_tok_s"], s["max_tok_s"], s["x_plain"])
    ...  for s in repeat_spread(rows)]
    [('ar-v1', 3, 100.0, 98.0, 104.0, 1.0), ('peagle-k3-v1', 3, 65.0, 60.0, 66.0, 0.65)]
    """
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r["concurrency"] == concurrency:
            groups.setdefault(_config(r), []).append(r)
    if not groups:
        raise ValueError(f"no rows at concurrency {concurrency} (the rows have "
                         f"{sorted({r['concurrency'] for r in rows})}): pass one of those as concurrency=")
    few = {c: len(g) for c, g in groups.items() if len(g) < min_repeats}
    if few:
        raise ValueError(f"{', '.join(f'{c} has {n}' for c, n in few.items())} measurement(s) at concurrency "
                         f"{concurrency}; a spread needs at least {min_repeats} per configuration. Measure each "
                         f"configuration {min_repeats} times, in interleaved rounds, or pass min_repeats=1 for a table "
                         "of single measurements (no spread to draw)")
    table = []
    for config, group in groups.items():
        tps = [r["tokens_per_s"] for r in group]
        als = [r["acceptance_length"] for r in group if r.get("acceptance_length") is not None]
        first = group[0]
        table.append({"config": config, "method": first["method"], "k": first.get("k"), "runner": first.get("runner"),
                      "repeats": len(tps), "median_tok_s": statistics.median(tps), "min_tok_s": min(tps),
                      "max_tok_s": max(tps), "spread_pct": 100 * (max(tps) - min(tps)) / statistics.median(tps),
                      "acceptance_length": statistics.median(als) if als else None})
    plain = {s["runner"]: s["median_tok_s"] for s in table if s["method"] in ("ar", "none")}
    for s in table:
        s["x_plain"] = s["median_tok_s"] / plain[s["runner"]] if s["runner"] in plain else None
    return table


def _spread_label(s: dict) -> str:
    name = METHOD_NAMES.get(s["method"], s["method"])
    return (name + (f" K={s['k']}" if s["k"] else "")
            + (f" · {s['runner'].upper()}" if s["runner"] else ""))


def spread_figure(rows: list[dict], title: str | None = None, concurrency: int = 1) -> go.Figure:
    """:func:`repeat_spread` drawn: one marker per speculative configuration at its median tokens/s, an error bar
    from its lowest to its highest measurement, labelled with its ratio to plain decoding on the same runner; plain
    decoding's median on each runner is a dashed line over a band from its lowest to highest. Refuses (ValueError)
    a configuration measured fewer than :data:`MIN_REPEATS` times: one or two measurements make no spread."""
    table = repeat_spread(rows, concurrency, min_repeats=MIN_REPEATS)
    fig = go.Figure()
    spec = [s for s in table if s["method"] not in ("ar", "none")]
    for method in dict.fromkeys(s["method"] for s in spec):
        mine = [s for s in spec if s["method"] == method]
        fig.add_scatter(
            x=[_spread_label(s) for s in mine], y=[s["median_tok_s"] for s in mine], mode="markers+text",
            name=METHOD_NAMES.get(method, method), marker={"size": 10, "color": _SPREAD_COLORS.get(method)},
            customdata=[s["config"] for s in mine],
            error_y={"type": "data", "symmetric": False, "array": [s["max_tok_s"] - s["median_tok_s"] for s in mine],
                     "arrayminus": [s["median_tok_s"] - s["min_tok_s"] for s in mine], "width": 8},
            text=[f"   {s['x_plain']:.2f}x" if s["x_plain"] is not None else "" for s in mine],
            textposition="middle right", textfont={"size": 11},
            hovertext=[f"{s['repeats']} measurements: median {s['median_tok_s']:.0f}, "
                       f"{s['min_tok_s']:.0f}-{s['max_tok_s']:.0f} tokens/s, AL {s['acceptance_length'] or 0:.2f}"
                       for s in mine])
    plain = [s for s in table if s["method"] in ("ar", "none")]
    for i, s in enumerate(plain):
        dash = ("dash", "dot", "dashdot")[i % 3]
        fig.add_hrect(y0=s["min_tok_s"], y1=s["max_tok_s"], fillcolor=_GREY, opacity=0.15, line_width=0)
        fig.add_hline(y=s["median_tok_s"], line={"dash": dash, "color": _GREY, "width": 1.5},
                      annotation_text=f"{_spread_label(s)}: {s['median_tok_s']:.0f} "
                                      f"({s['min_tok_s']:.0f}-{s['max_tok_s']:.0f})",
                      annotation_position="top left" if i % 2 == 0 else "bottom left", annotation_font_size=10)
    n = sorted({s["repeats"] for s in table})
    repeats = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
    fig.update_layout(
        title=title or f"Tokens/s at concurrency {concurrency}: the median of {repeats} measurements<br><sup>bar: "
                       "lowest to highest; label: over plain decoding on the same runner</sup>",
        yaxis_title=f"tokens/s at concurrency {concurrency}", yaxis_rangemode="tozero", height=440,
        xaxis_range=[-0.5, len(spec) - 0.2],           # room for the last configuration's label
        margin={"t": 70, "b": 40}, legend={"orientation": "h", "y": -0.15})
    return fig
