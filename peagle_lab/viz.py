"""Plots and widgets: acceptance per draft position, and the token stream of one generation.

* :func:`acceptance_figure` -- bars per draft position (one trace per method/K), plotly;
* :func:`acceptance_explorer` -- the same with dropdowns for method, K, prompt set, temperature;
* :func:`token_stream_html` -- generated text coloured by accepted draft / bonus token, with the
  rejected drafts struck through, so one can watch the drafter at work.

Rows are dicts as written by ``peagle-lab bench`` (``method``, ``k``,
``acceptance_per_position``), optionally with ``prompts`` and ``temperature``.
"""
from __future__ import annotations

import html
import sys

import plotly.graph_objects as go
import plotly.io as pio

if "google.colab" not in sys.modules:
    # Live plots in JupyterLab (mimetype) and self-contained ones in exported HTML (`make tour`).
    pio.renderers.default = "plotly_mimetype+notebook"

COLORS = {"eagle": "#1f77b4", "peagle": "#d62728"}


def acceptance_figure(rows: list[dict], title: str = "Acceptance per draft position") -> go.Figure:
    """Grouped bars: x = draft position (1..K), y = accepted at that position / drafts."""
    fig = go.Figure()
    for row in rows:
        per_pos = row.get("acceptance_per_position")
        if not per_pos:
            continue
        label = f"{row['method']} K={row['k']}" + (f" (AL {row['acceptance_length']:.2f})" if row.get("acceptance_length") else "")
        fig.add_bar(x=list(range(1, len(per_pos) + 1)), y=per_pos, name=label,
                    marker_color=COLORS.get(row["method"]) if len(rows) <= 2 else None)
    fig.update_layout(title=title, barmode="group", xaxis_title="draft position", yaxis_title="acceptance rate",
                      yaxis_range=[0, 1], xaxis_dtick=1, height=380, margin=dict(t=50, b=40))
    return fig


def acceptance_explorer(rows: list[dict]):
    """ipywidgets dropdowns (method, K, prompt set, temperature) over bench rows, re-plotting on change."""
    import ipywidgets as W
    from IPython.display import display

    rows = [r for r in rows if r.get("acceptance_per_position")]
    if not rows:
        raise ValueError("no rows with acceptance_per_position; run a speculative method (eagle/peagle) first")

    def options(key):
        return sorted({r.get(key) for r in rows}, key=lambda v: (v is None, v))

    method = W.Dropdown(options=["all"] + options("method"), description="method")
    k = W.Dropdown(options=options("k"), description="K")
    prompts = W.Dropdown(options=options("prompts"), description="prompts")
    temperature = W.Dropdown(options=options("temperature"), description="temperature")
    out = W.Output()

    def redraw(*_):
        chosen = [r for r in rows if r.get("k") == k.value and r.get("prompts") == prompts.value
                  and r.get("temperature") == temperature.value and method.value in ("all", r["method"])]
        out.clear_output(wait=True)
        with out:
            if chosen:
                display(acceptance_figure(chosen, f"Acceptance per draft position, K={k.value}"))
            else:
                print("no measurement for this combination")

    for w in (method, k, prompts, temperature):
        w.observe(redraw, names="value")
    redraw()
    return W.VBox([W.HBox([method, k]), W.HBox([prompts, temperature]), out])


def token_stream_html(result, decode, show_rejected: bool = True) -> str:
    """HTML of a speculative generation: green = accepted draft, blue = target's own token."""
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
        parts.append(span([step.next_token], "background:#cfe2ff", "target token (correction or bonus)"))
    legend = ('<div style="font-size:85%;margin-bottom:4px"><span style="background:#c8f7c5">accepted draft</span> '
              '<span style="background:#cfe2ff">target token</span> '
              '<span style="color:#c0392b;text-decoration:line-through">rejected draft</span></div>')
    return legend + '<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6">' + "".join(parts) + "</div>"


def time_split_figure(rows: list[dict], title: str = "Where a generation's time goes") -> go.Figure:
    """Stacked bars of prefill / draft / verify / bookkeeping seconds per configuration."""
    rows = [r for r in rows if r.get("time_split_s")]
    labels = [f"{r['method']} K={r['k']}" for r in rows]
    fig = go.Figure()
    for part in ("prefill", "draft", "verify", "bookkeeping"):
        fig.add_bar(x=labels, y=[r["time_split_s"][part] for r in rows], name=part)
    fig.update_layout(title=title, barmode="stack", yaxis_title="seconds", height=360, margin=dict(t=50, b=40))
    return fig
