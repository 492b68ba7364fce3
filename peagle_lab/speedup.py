"""What speculative decoding buys, on paper: tokens/s from acceptance length and step costs.

One speculative step drafts K tokens, verifies bonus + K drafts in one target forward, and yields
AL tokens on average (AL = 1 + accepted / drafts, :mod:`peagle_lab.stats`). Its time is

    sequential drafting (EAGLE-3):  K * seq_pass_ms + verify_ms     (K drafter passes)
    parallel drafting   (P-EAGLE):      par_pass_ms + verify_ms     (one pass over K slots)

so tokens/s = 1000 * AL / step_ms. Plain decoding yields one token per ``decode_ms``.

>>> round(tokens_per_s(3.0, step_ms("sequential", 5, 0.1, 3.0)), 1)   # 3 tokens / 3.5 ms
857.1
>>> round(tokens_per_s(3.0, step_ms("parallel", 5, 0.3, 3.0)), 1)     # 3 tokens / 3.3 ms
909.1
>>> crossover_k(seq_pass_ms=0.1, par_pass_ms=0.3, verify_ms=3.0)      # 3 passes cost one parallel pass
3
"""
from __future__ import annotations

from dataclasses import dataclass


def step_ms(drafting: str, k: int, pass_ms: float, verify_ms: float) -> float:
    """Time of one speculative step: K drafter passes (``"sequential"``) or one (``"parallel"``)."""
    if drafting not in ("sequential", "parallel"):
        raise ValueError(f"drafting must be 'sequential' or 'parallel', not {drafting!r}")
    if k < 1:
        raise ValueError("K must be >= 1")
    passes = k if drafting == "sequential" else 1
    return passes * pass_ms + verify_ms


def tokens_per_s(al: float, step_time_ms: float) -> float:
    """AL tokens per step over the step's time."""
    return 1000.0 * al / step_time_ms


def acceptance_needed(tokens_per_s_goal: float, step_time_ms: float) -> float:
    """The AL a method needs to reach ``tokens_per_s_goal`` at a step time of ``step_time_ms``
    (:func:`tokens_per_s` solved for AL).

    >>> round(acceptance_needed(1000.0, 1.5), 2)   # 1.5 ms a step: 1.5 tokens a step for 1,000 tok/s
    1.5
    """
    return tokens_per_s_goal * step_time_ms / 1000.0


def crossover_k(seq_pass_ms: float, par_pass_ms: float, verify_ms: float, al_seq: float = 1.0,
                al_par: float | None = None, k_max: int = 16) -> int | None:
    """Smallest K in 1..k_max at which parallel drafting gives at least sequential's tokens/s.

    ``al_seq`` / ``al_par`` are the two methods' acceptance lengths at that K (one value each, held
    fixed over K; ``al_par`` defaults to ``al_seq``). None when sequential wins up to ``k_max``.
    """
    al_par = al_seq if al_par is None else al_par
    for k in range(1, k_max + 1):
        par = tokens_per_s(al_par, step_ms("parallel", k, par_pass_ms, verify_ms))
        seq = tokens_per_s(al_seq, step_ms("sequential", k, seq_pass_ms, verify_ms))
        if par >= seq:
            return k
    return None


@dataclass
class Estimate:
    ar: float            # tokens/s of plain decoding
    sequential: float    # tokens/s with K sequential drafter passes per step
    parallel: float      # tokens/s with one parallel drafter pass per step
    crossover: int | None

    def summary(self) -> str:
        cross = (f"parallel drafting wins from K = {self.crossover}" if self.crossover
                 else "sequential drafting wins at every K up to 16")
        return (f"AR {self.ar:.0f} tok/s | sequential {self.sequential:.0f} tok/s ({self.sequential / self.ar:.2f}x) | "
                f"parallel {self.parallel:.0f} tok/s ({self.parallel / self.ar:.2f}x) | {cross}")


def estimate(*, k: int, al_seq: float, al_par: float, seq_pass_ms: float, par_pass_ms: float,
             verify_ms: float, decode_ms: float) -> Estimate:
    """Both methods at one K, plain decoding beside them, and the crossover K."""
    return Estimate(ar=1000.0 / decode_ms,
                    sequential=tokens_per_s(al_seq, step_ms("sequential", k, seq_pass_ms, verify_ms)),
                    parallel=tokens_per_s(al_par, step_ms("parallel", k, par_pass_ms, verify_ms)),
                    crossover=crossover_k(seq_pass_ms, par_pass_ms, verify_ms, al_seq, al_par))


def calculator(*, k: int = 5, al_seq: float = 2.5, al_par: float = 2.5, seq_pass_ms: float = 0.1,
               par_pass_ms: float = 0.3, verify_ms: float = 3.0, decode_ms: float = 2.5):
    """Sliders over :func:`estimate`'s inputs (defaults: pass the numbers you measured) and its result."""
    import ipywidgets as W

    def slider(value, lo, hi, step, name):
        return W.FloatSlider(value=value, min=lo, max=max(hi, value), step=step, description=name,
                             readout_format=".3g", style={"description_width": "130px"},
                             layout=W.Layout(width="460px"))

    controls = {
        "k": W.IntSlider(value=k, min=1, max=16, description="K", style={"description_width": "130px"},
                         layout=W.Layout(width="460px")),
        "al_seq": slider(al_seq, 1.0, 8.0, 0.05, "AL sequential"),
        "al_par": slider(al_par, 1.0, 8.0, 0.05, "AL parallel"),
        "seq_pass_ms": slider(seq_pass_ms, 0.0, 4 * seq_pass_ms + 1e-3, seq_pass_ms / 50 + 1e-4, "seq. pass ms"),
        "par_pass_ms": slider(par_pass_ms, 0.0, 4 * par_pass_ms + 1e-3, par_pass_ms / 50 + 1e-4, "par. pass ms"),
        "verify_ms": slider(verify_ms, 0.0, 4 * verify_ms + 1e-3, verify_ms / 50 + 1e-4, "verify ms"),
        "decode_ms": slider(decode_ms, 0.0, 4 * decode_ms + 1e-3, decode_ms / 50 + 1e-4, "decode ms (AR)"),
    }
    out = W.HTML()

    def show(*_):
        values = {name: c.value for name, c in controls.items()}
        if values["verify_ms"] <= 0 or values["decode_ms"] <= 0:
            out.value = "<b>verify and decode must cost more than 0 ms</b>"
            return
        out.value = f"<b>{estimate(**values).summary()}</b>"

    for c in controls.values():
        c.observe(show, names="value")
    show()
    box = W.VBox(list(controls.values()) + [out])
    box.controls, box.result = controls, out   # handles for tests and readers
    return box
