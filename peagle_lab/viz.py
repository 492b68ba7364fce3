"""Plots and widgets: acceptance per draft position, and the token stream of one generation.

* :func:`acceptance_figure` -- bars per draft position (one trace per method/K), plotly;
* :func:`acceptance_explorer` -- the same with dropdowns for method, K, prompt set, temperature (in
  Colab its figure is shown as HTML, see :func:`figure_for_output`);
* :func:`token_stream_html` -- generated text coloured by accepted draft and the target's token, with the
  rejected drafts struck through, so one can watch the drafter at work;
* :func:`step_view` / :func:`step_html` / :func:`step_explorer` -- one speculative step at a time
  (its K drafts, which the target accepted, where it rejected, the token the target added), with
  a slider and buttons to move through the steps of a generation.

Rows are dicts as written by ``peagle-lab bench`` (``method``, ``k``,
``acceptance_per_position``), optionally with ``prompts``, ``temperature`` and ``source`` (which
engine measured the row, e.g. vLLM's counters or the teaching engine).
"""
from __future__ import annotations

import html
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
