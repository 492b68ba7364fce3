"""When parallel drafting pays: a cost model built from parts measured apart.

Notation (one speculative step of one request; vLLM's definitions, :mod:`peagle_lab.stats`):

    a_i          acceptance at draft position i = accepted at i / drafts   (i = 1..K)
    AL(K)      = 1 + a_1 + ... + a_K          tokens a step yields (the target's token + accepted drafts)
    draft(K)   = K x seq_pass                  sequential drafting (EAGLE-3): K drafter passes
               = par_pass(K)                   parallel drafting (P-EAGLE): one pass over K slots
    verify(n)  = verify_fixed + per_token x n  the target over n tokens; a batch of B requests
                                               verifies n = B (K+1), plain decoding n = B
    step(K)    = draft(K) + verify(B (K+1)) + host
    tokens/s   = 1000 x B x AL(K) / step(K)

Within a step a draft at position i never sees later slots, so acceptance at position i depends on K
only through where the steps start; one replay at the largest K gives AL at every smaller K to within a
few percent (about 2% for the shipped pair, K=7 against K=3). Each method is compared at its own best K.

>>> parts = Parts(verify_fixed_ms=2.0, seq_pass_ms=0.1, par_pass_ms=0.3)
>>> acceptance = [0.6, 0.4, 0.2]                         # replayed at K = 3
>>> acceptance_length(acceptance, 2)                     # 1 + 0.6 + 0.4
2.0
>>> round(tokens_per_s("sequential", 2, acceptance, parts), 1)    # 2 tokens / (2 x 0.1 + 2.0) ms
909.1
>>> round(tokens_per_s("parallel", 2, acceptance, parts), 1)      # 2 tokens / (0.3 + 2.0) ms
869.6
"""
from __future__ import annotations

from dataclasses import dataclass, field

METHODS = {"ar": "ar", "eagle": "sequential", "peagle": "parallel",
           "sequential": "sequential", "parallel": "parallel"}
NAMES = {"ar": "AR", "sequential": "EAGLE-3", "parallel": "P-EAGLE"}


@dataclass(frozen=True)
class Parts:
    """Step parts in ms, each measured on its own (a microbenchmark, a profiler replay).
    A pass cost is one number (flat in K) or a table {K: ms} (the nearest K is used)."""
    verify_fixed_ms: float               # the target over K+1 tokens at batch 1
    seq_pass_ms: float | dict            # one sequential drafter pass (one token)
    par_pass_ms: float | dict            # one parallel pass over K slots
    host_ms: float = 0.0                 # Python / scheduling between device steps
    per_token_ms: float = 0.0            # verify growth per token verified (matters at large batch)
    decode_ms: float | None = None       # the target over one token (plain decoding); default verify_fixed_ms
    note: str = ""

    def seq_pass(self, k: int) -> float:
        return _at(self.seq_pass_ms, k)

    def par_pass(self, k: int) -> float:
        return _at(self.par_pass_ms, k)


def _at(cost: float | dict, k: int) -> float:
    if isinstance(cost, dict):
        return float(cost[min(sorted(cost), key=lambda x: (abs(x - k), -x))])
    return float(cost)


def _method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, not {method!r}")
    return METHODS[method]


def acceptance_length(acceptance, k: int) -> float:
    """AL(K): ``acceptance`` is per-position acceptance (a list, from a replay at K >= k) or a
    table ``{K: AL}`` of measured ALs."""
    if k < 0:
        raise ValueError("K must be >= 0")
    if isinstance(acceptance, dict):
        if k not in acceptance:
            raise KeyError(f"no AL for K={k}; known: {sorted(acceptance)}")
        return float(acceptance[k])
    if k > len(acceptance):
        raise ValueError(f"acceptance was replayed up to K={len(acceptance)}, not {k}")
    return 1.0 + float(sum(acceptance[:k]))


def draft_ms(method: str, k: int, parts: Parts) -> float:
    """Drafting time of one step: K passes (sequential), one (parallel), none (AR)."""
    m = _method(method)
    if m == "ar":
        return 0.0
    if k < 1:
        raise ValueError("K must be >= 1")
    return k * parts.seq_pass(k) if m == "sequential" else parts.par_pass(k)


def verify_ms(n_tokens: int, parts: Parts) -> float:
    """The target's forward over ``n_tokens`` (batch x (K+1) when verifying, batch when decoding)."""
    return parts.verify_fixed_ms + parts.per_token_ms * n_tokens


def step_ms(method: str, k: int, parts: Parts, batch: int = 1) -> float:
    """One step of ``batch`` requests: drafting + verify of batch x (K+1) tokens + host."""
    if _method(method) == "ar":
        fixed = parts.verify_fixed_ms if parts.decode_ms is None else parts.decode_ms
        return fixed + parts.per_token_ms * batch + parts.host_ms
    return draft_ms(method, k, parts) + verify_ms(batch * (k + 1), parts) + parts.host_ms


def tokens_per_s(method: str, k: int, acceptance, parts: Parts, batch: int = 1) -> float:
    """All requests' tokens per second: batch x AL(K) tokens per step."""
    al = 1.0 if _method(method) == "ar" else acceptance_length(acceptance, k)
    return 1000.0 * batch * al / step_ms(method, k, parts, batch)


def best_k(method: str, acceptance, parts: Parts, ks, batch: int = 1) -> tuple[int, float]:
    """(K, tokens/s) at the K in ``ks`` where the method is fastest."""
    ks = [k for k in ks if not isinstance(acceptance, dict) or k in acceptance]
    if not ks:
        raise ValueError("no K to try")
    return max(((k, tokens_per_s(method, k, acceptance, parts, batch)) for k in ks), key=lambda x: x[1])


def break_even_al(k_par: int, seq_acceptance, parts: Parts, ks_seq, batch: int = 1) -> float:
    """The AL parallel drafting needs at ``k_par`` to match sequential drafting at its best K."""
    _, seq_tps = best_k("sequential", seq_acceptance, parts, ks_seq, batch)
    return seq_tps * step_ms("parallel", k_par, parts, batch) / (1000.0 * batch)


def acceptance_needed(tokens_per_s_goal: float, step_time_ms: float) -> float:
    """The AL that reaches ``tokens_per_s_goal`` at one request and ``step_time_ms`` a step.

    >>> round(acceptance_needed(1000.0, 1.5), 2)   # 1.5 ms a step: 1.5 tokens a step for 1,000 tok/s
    1.5
    """
    return tokens_per_s_goal * step_time_ms / 1000.0


@dataclass
class Prediction:
    """Each method at its own best K, and the parallel / sequential ratio."""
    rows: list[dict]
    batch: int = 1

    def row(self, method: str) -> dict:
        return next(r for r in self.rows if r["method"] == _method(method))

    @property
    def ratio(self) -> float:
        return self.row("parallel")["tokens_per_s"] / self.row("sequential")["tokens_per_s"]

    def summary(self) -> str:
        ar = self.row("ar")["tokens_per_s"]
        parts = [f"{NAMES[r['method']]}" + (f" K={r['k']}" if r["k"] else "") +
                 f" {r['tokens_per_s']:.0f} tok/s ({r['tokens_per_s'] / ar:.2f}x AR)" for r in self.rows]
        return " | ".join(parts) + f" | P-EAGLE / EAGLE-3 {self.ratio:.2f}x"


def predict(parts: Parts, acceptance: dict, ks, batch: int = 1) -> Prediction:
    """``acceptance = {"eagle": ..., "peagle": ...}`` (per-position lists or {K: AL} tables)."""
    rows = [dict(method="ar", k=None, al=1.0, step_ms=step_ms("ar", 0, parts, batch),
                 tokens_per_s=tokens_per_s("ar", 0, None, parts, batch))]
    for name in ("eagle", "peagle"):
        k, tps = best_k(name, acceptance[name], parts, ks, batch)
        rows.append(dict(method=_method(name), k=k, al=acceptance_length(acceptance[name], k),
                         step_ms=step_ms(name, k, parts, batch), tokens_per_s=tps))
    return Prediction(rows, batch)


# ---- presets: the parts and acceptance of four settings, from recorded measurements -------------

@dataclass
class Preset:
    name: str
    parts: Parts
    acceptance: dict                     # {"eagle": ..., "peagle": ...}
    ks: list[int]
    measured: dict = field(default_factory=dict)   # the end-to-end figures to hold the prediction against
    source: str = ""

    def predict(self, batch: int = 1) -> Prediction:
        return predict(self.parts, self.acceptance, self.ks, batch)


def h200_135m() -> Preset:
    """SmolLM2-135M on an H200 at batch 1 (the fast engine: CUDA graphs, fused steps, Triton attention).
    Parts: a profiler replay of each captured step; host: the AR run; acceptance: the CPU replay of
    80 MT-Bench prompts. Measured: the end-to-end fast-engine runs (not used to build the parts)."""
    from . import recorded
    cm, gpu = recorded.load("costmodel"), recorded.load("gpu_speed")
    prof = {(r["method"], r["step"]): r["replay_ms"]
            for r in gpu["step_profile"]["rows"] if r["mode"] == "default+triton"}
    k_prof = gpu["step_profile"]["settings"]["k"]
    fast = [r for r in gpu["best"]["rows"] if r["side"] == "fast"]
    host = min(r["step_split_ms"]["host"] for r in fast if r["method"] == "ar")
    parts = Parts(verify_fixed_ms=prof[("peagle", "verify")], seq_pass_ms=prof[("eagle", "draft")] / k_prof,
                  par_pass_ms=prof[("peagle", "draft")], host_ms=host, decode_ms=prof[("ar", "verify")],
                  note=f"H200 bf16, profiler replay of each captured step (K={k_prof}); host from the AR run")
    measured = {(r["method"], r["k"]): r["tokens_per_s"] for r in fast}
    return Preset("h200-135m", parts, cm["replay_mtbench80"]["acceptance_per_position"], [1, 2, 3, 4, 5, 6, 7],
                  measured, "recorded: gpu_speed (step_profile, best), costmodel (replay_mtbench80)")


def drafter_20b() -> Preset:
    """A gpt-oss-20b-size drafter (4 layers, hidden 2880) on an H200, CUDA graphs, batch 1, with the
    blog's ALs and the blog's no-speculation speed on a B200 as the verify cost (one verify of K+1
    tokens at batch 1 costs about one decode). The same drafter drafts both ways here, so the ratio
    is an upper bound: vLLM's EAGLE-3 head for gpt-oss has one layer and cheaper passes."""
    from . import recorded
    cm = recorded.load("costmodel")
    d, blog = cm["drafter_20b"], cm["blog"]
    rows = [r for r in d["rows"] if r["B"] == 1]
    parts = Parts(verify_fixed_ms=1000.0 / blog["ar_tokens_per_s_c1"],
                  seq_pass_ms=sum(r["sequential_ms"] / r["K"] for r in rows) / len(rows),
                  par_pass_ms={r["K"]: r["parallel_ms"] for r in rows},
                  note="drafter passes: H200 microbenchmark (random bf16 weights); verify: the blog's B200 AR speed")
    acceptance = {"eagle": {int(k): v for k, v in blog["al_mtbench"]["eagle"].items()},
                  "peagle": {int(k): v for k, v in blog["al_mtbench"]["peagle"].items()}}
    return Preset("h200-20b-drafter", parts, acceptance, [3, 5, 7], {"ratio_c1": blog["ratio_mtbench"][0]},
                  "recorded: costmodel (drafter_20b, blog)")


def _median(values) -> float:
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def _vllm_calibrated(name: str, rows: list[dict], note: str, source: str) -> Preset:
    """One vLLM model runner's rows, calibrated at concurrency 1: verify is a line fitted to plain decoding's time
    per token over concurrency, drafting is what a step at concurrency 1 costs beyond that verify, and acceptance is
    vLLM's own AL. Repeated rounds of a configuration are merged by their median. A parallel drafter other than
    P-EAGLE (DSpark) fills P-EAGLE's place; ``measured`` keeps the rows' own method names."""
    def med(field, method, k, c):
        return _median([r[field] for r in rows if (r["method"], r["k"], r["concurrency"]) == (method, k, c)])

    keys = sorted({(r["method"], r["k"], r["concurrency"]) for r in rows}, key=lambda x: (x[0], x[1] or 0, x[2]))
    ar = [(c, med("mean_tpot_ms", "ar", None, c)) for m, _, c in keys if m == "ar"]
    n = len(ar)
    mx, my = sum(c for c, _ in ar) / n, sum(t for _, t in ar) / n
    slope = sum((c - mx) * (t - my) for c, t in ar) / sum((c - mx) ** 2 for c, _ in ar)
    fixed = my - slope * mx
    c1 = [(m, k) for m, k, c in keys if c == 1 and m != "ar"]
    draft = {(m, k): med("mean_tpot_ms", m, k, 1) * med("acceptance_length", m, k, 1) - (fixed + slope * (k + 1))
             for m, k in c1}
    parallel = next(m for m, _ in c1 if m != "eagle")
    parts = Parts(verify_fixed_ms=fixed, per_token_ms=slope,
                  seq_pass_ms={k: draft[(m, k)] / k for m, k in c1 if m == "eagle"},
                  par_pass_ms={k: draft[(m, k)] for m, k in c1 if m == parallel}, note=note)
    acceptance = {key: {k: med("acceptance_length", m, k, 1) for m, k in c1 if m == m_}
                  for key, m_ in (("eagle", "eagle"), ("peagle", parallel))}
    measured = {(m, k, c): med("tokens_per_s", m, k, c) for m, k, c in keys}
    return Preset(name, parts, acceptance, sorted({k for _, k in c1}), measured, source)


def vllm_concurrency() -> Preset:
    """The 135M target in CUDA vLLM on an H200 (one model runner for every method). Verify: a line
    fitted to plain decoding's time per token over concurrency 1-64; drafting: what a step at
    concurrency 1 costs beyond that verify; acceptance: vLLM's own per-position metrics at c=1.
    Everything above concurrency 1 is a prediction."""
    from . import recorded
    rows = [r for r in recorded.load("vllm_cuda_h200")["rows"] if r["runner"] == "v1" and r["prompts"] == "mt-bench"]
    return _vllm_calibrated("vllm-concurrency", rows, "vLLM 0.26 CUDA, V1 runner, bf16; drafting calibrated at "
                            "concurrency 1", "recorded: vllm_cuda_h200")


def vllm_v2_dspark() -> Preset:
    """The 135M target in CUDA vLLM's V2 model runner (CUDA graphs, an H100): plain decoding, EAGLE-3 at K=3 and
    DSpark at K=3/5/7, the parallel drafter V2 serves (P-EAGLE runs only on V1). Calibrated at concurrency 1 like
    :func:`vllm_concurrency`, from the median of three interleaved rounds."""
    from . import recorded
    vllm = recorded.load("dspark")["vllm"]
    rows = [r for r in vllm["rows"] if r["runner"] == "v2"]
    return _vllm_calibrated("vllm-v2-dspark", rows, "vLLM 0.26 CUDA, V2 runner, bf16; drafting calibrated at "
                            "concurrency 1", "recorded: dspark (vllm)")


def measured_ratio(preset: Preset, concurrency: int, parallel: str = "peagle") -> float:
    """The parallel drafter's / EAGLE-3's tokens/s in a recorded vLLM sweep, each at its best K."""
    best = {m: max(v for (mm, _, c), v in preset.measured.items() if mm == m and c == concurrency)
            for m in ("eagle", parallel)}
    return best[parallel] / best["eagle"]


PRESETS = {"h200-135m": h200_135m, "h200-20b-drafter": drafter_20b, "vllm-concurrency": vllm_concurrency,
           "vllm-v2-dspark": vllm_v2_dspark}


def preset(name: str) -> Preset:
    """A named preset (see :data:`PRESETS`); the CPU's parts are measured in notebook 02."""
    if name not in PRESETS:
        raise KeyError(f"no preset {name!r}; known: {', '.join(PRESETS)} (the CPU's parts are measured live)")
    return PRESETS[name]()


# ---- where parallel drafting pays: one answer, one figure (notebook 07) -------------------------

def break_even_ratio(draft_share: float, k: int, pass_ratio: float = 1.0) -> float:
    """The AL(parallel) / AL(sequential) at which parallel drafting matches sequential, when sequential drafting
    takes ``draft_share`` of a sequential step (K passes of cost p; the rest, V, is verify and host) and one
    parallel pass over K slots costs ``pass_ratio`` sequential passes: (q + V) / (K p + V) = 1 - f (1 - r / K).

    >>> round(break_even_ratio(0.0, 3), 3), round(break_even_ratio(0.6, 3), 3), round(break_even_ratio(0.6, 7), 3)
    (1.0, 0.6, 0.486)
    """
    return 1.0 - draft_share * (1.0 - pass_ratio / k)


def speed_ratio(draft_share: float, al_ratio: float, k: int, pass_ratio: float = 1.0) -> float:
    """Parallel / sequential tokens/s in the step :func:`break_even_ratio` assumes: the AL ratio over the break-even
    ratio, so exactly 1 on the break-even line, above it where parallel drafting pays.

    >>> round(speed_ratio(0.6, 0.6, 3), 6), round(speed_ratio(0.6, 0.9, 7), 3)
    (1.0, 1.853)
    """
    return al_ratio / break_even_ratio(draft_share, k, pass_ratio)


def speedup_vs_ar(draft_share: float, al: float, k: int, method: str = "sequential", pass_ratio: float = 1.0) -> float:
    """Tokens/s over plain decoding when EAGLE-3 at ``k`` spends ``draft_share`` (f) of its step drafting (K passes
    of cost p) and the rest, V (verify and host), is also what one step of plain decoding costs. That holds where
    verifying K+1 tokens costs about one decode (a GPU at batch 1, notebook 01); where verify grows with the tokens
    (a CPU) it over-predicts. Sequential: AL (1 - f); parallel, one pass of r p: AL / (1 + (r / K) f / (1 - f)).

    >>> round(speedup_vs_ar(0.5, 2.0, 4), 3), round(speedup_vs_ar(0.5, 2.0, 4, "parallel"), 3)
    (1.0, 1.6)
    """
    if not 0.0 <= draft_share < 1.0:
        raise ValueError("the drafting share must be in [0, 1)")
    m = _method(method)
    if m == "ar":
        return 1.0
    if m == "sequential":
        return al * (1.0 - draft_share)
    return al / (1.0 + pass_ratio / k * draft_share / (1.0 - draft_share))


ROW_KEYS = ("setting", "kind", "method", "k_parallel", "k_sequential", "draft_share", "pass_ratio", "al_ratio",
            "al_ratio_needed", "predicted_ratio", "measured_ratio", "parallel_vs_ar", "sequential_vs_ar",
            "measured_parallel_vs_ar", "measured_sequential_vs_ar", "pays", "source")


def _row(**fields) -> dict:
    row = {k: fields.get(k) for k in ROW_KEYS}
    judged = row["measured_ratio"] if row["measured_ratio"] is not None else row["predicted_ratio"]
    row["pays"] = judged > 1.0
    return row


def _r4(x):
    return None if x is None else round(x, 4)


def pays_row(setting: str, preset_: Preset, parallel: str = "peagle", measured_ratio: float | None = None,
             measured_vs_ar: tuple[float, float] | None = None, kind: str = "model") -> dict:
    """Where one setting sits: the sequential drafting share of EAGLE-3's step (each method at its best K), one
    parallel pass in sequential passes, the AL ratio parallel drafting needs there to match EAGLE-3, the AL ratio it
    has, and the predicted speed ratio and speed-ups over plain decoding; ``measured_*`` are end-to-end figures to
    hold them against (``measured_vs_ar``: the parallel method's and EAGLE-3's speed-ups over plain decoding).
    ``pays`` judges by the measured ratio where there is one, else by the prediction."""
    p = preset_.predict()
    seq, par = p.row("sequential"), p.row("parallel")
    share = draft_ms("sequential", seq["k"], preset_.parts) / seq["step_ms"]
    need = break_even_al(par["k"], preset_.acceptance["eagle"], preset_.parts, preset_.ks) / seq["al"]
    ar = p.row("ar")["tokens_per_s"]
    m_par, m_seq = measured_vs_ar or (None, None)
    return _row(setting=setting, kind=kind, method=parallel, k_parallel=par["k"], k_sequential=seq["k"],
                draft_share=round(share, 4),
                pass_ratio=round(preset_.parts.par_pass(par["k"]) / preset_.parts.seq_pass(seq["k"]), 4),
                al_ratio=round(par["al"] / seq["al"], 4), al_ratio_needed=round(need, 4),
                predicted_ratio=round(p.ratio, 4), measured_ratio=_r4(measured_ratio),
                parallel_vs_ar=round(par["tokens_per_s"] / ar, 4), sequential_vs_ar=round(seq["tokens_per_s"] / ar, 4),
                measured_parallel_vs_ar=_r4(m_par), measured_sequential_vs_ar=_r4(m_seq), source=preset_.source)


def _best_measured(measured: dict, method: str, concurrency: int) -> float:
    return max(v for (m, _, c), v in measured.items() if m == method and c == concurrency)


def teaching_cpu_row() -> dict:
    """The teaching engine on a CPU, end to end (recorded; no model): each method at its fastest K, EAGLE-3's
    drafting share from its own time split (drafting / drafting + verifying + bookkeeping, prefill left out)."""
    from . import recorded
    t = recorded.load("costmodel")["teaching_cpu"]
    best = {m: max((r for r in t["rows"] if r["method"] == m), key=lambda r: r["tokens_per_s"])
            for m in ("ar", "eagle", "peagle")}
    split = best["eagle"]["time_split_s"]
    share = split["draft"] / (split["draft"] + split["verify"] + split["bookkeeping"])
    ar, seq, par = (best[m]["tokens_per_s"] for m in ("ar", "eagle", "peagle"))
    return _row(setting="135M, CPU teaching engine", kind="measured", method="peagle",
                k_parallel=best["peagle"]["k"], k_sequential=best["eagle"]["k"], draft_share=round(share, 4),
                al_ratio=round(best["peagle"]["acceptance_length"] / best["eagle"]["acceptance_length"], 4),
                measured_ratio=round(par / seq, 4), measured_parallel_vs_ar=round(par / ar, 4),
                measured_sequential_vs_ar=round(seq / ar, 4), source="recorded: costmodel (teaching_cpu)")


def blog_row(draft_share: float) -> dict:
    """The vLLM blog's measurement (gpt-oss-20b, 4-layer heads, one B200, MT-Bench, one request): P-EAGLE / EAGLE-3
    at each's best K, and the AL ratio at K=7. The blog gives no drafting share: the row sits at ``draft_share``
    (the model's, for a gpt-oss-20b-size drafter)."""
    from . import recorded
    blog = recorded.load("costmodel")["blog"]
    al = blog["al_mtbench"]
    return _row(setting="gpt-oss-20b, B200 (blog, measured)", kind="published", method="peagle", k_parallel=7,
                draft_share=draft_share, al_ratio=round(al["peagle"]["7"] / al["eagle"]["7"], 4),
                measured_ratio=blog["ratio_mtbench"][blog["concurrency"].index(1)],
                source="recorded: costmodel (blog); x from the model")


def paper_range() -> tuple[float, float]:
    """The paper's reported speed-up over EAGLE-3 (its abstract: GPT-OSS-120B/20B, Qwen3-Coder-30B)."""
    from . import recorded
    low, high = recorded.load("costmodel")["paper"]["speedup_over_eagle3"]
    return low, high


def cost_ratios(preset_: Preset) -> dict:
    """A setting's drafting costs as two numbers: one sequential drafter pass over one verify (p / V) and one
    parallel pass over the largest K in sequential passes (r)."""
    k = max(preset_.ks)
    p = preset_.parts.seq_pass(k)
    return {"pass_vs_verify": p / preset_.parts.verify_fixed_ms, "pass_ratio": preset_.parts.par_pass(k) / p}


def what_if(accuracy: float | None = 1.0, pass_vs_verify: float | None = None,
            pass_ratio: float | None = None) -> dict:
    """The 135M pair on the H200 fast engine, changed: the parallel drafter's acceptance at every position set to
    ``accuracy`` x EAGLE-3's (1.0: as accurate as EAGLE-3; None: P-EAGLE's own), and, where given, other drafting
    costs (``pass_vs_verify``, ``pass_ratio`` as in :func:`cost_ratios`, flat in K; ``cost_ratios(drafter_20b())``
    gives a gpt-oss-20b-size drafter's). Verify, host and plain decoding stay the 135M engine's."""
    from dataclasses import replace
    base = h200_135m()
    seq = base.acceptance["eagle"]
    if accuracy is None:
        par, what = base.acceptance["peagle"], "P-EAGLE's own acceptance"
    else:
        if accuracy < 0:
            raise ValueError("accuracy must be >= 0")
        par, what = [min(1.0, accuracy * a) for a in seq], f"P-EAGLE at {accuracy:.2f}x EAGLE-3's acceptance"
    parts = base.parts
    if pass_vs_verify is not None or pass_ratio is not None:
        own = cost_ratios(base)
        pv = own["pass_vs_verify"] if pass_vs_verify is None else pass_vs_verify
        r = own["pass_ratio"] if pass_ratio is None else pass_ratio
        seq_pass = pv * parts.verify_fixed_ms
        parts = replace(parts, seq_pass_ms=seq_pass, par_pass_ms=r * seq_pass,
                        note=f"{parts.note}; drafter passes set to p/V {pv:.3f}, r {r:.2f}")
        what += f", drafting costs p/V {pv:.3f}, r {r:.2f}"
    return pays_row(f"what if: 135M, {what}", replace(base, parts=parts, acceptance={"eagle": seq, "peagle": par},
                                                       source=base.source + "; what-if"))


def where_it_pays() -> list[dict]:
    """The settings notebook 07 places against the break-even line, each a row of :data:`ROW_KEYS`: this package's
    135M pair measured on a CPU (teaching engine), modelled and measured on an H200 (fast engine), in CUDA vLLM's V1
    runner (P-EAGLE) and V2 runner (DSpark, the parallel drafter V2 serves); DSpark at 135M in the fast engine (its
    block pass taken as P-EAGLE's: an assumption); two what-ifs (P-EAGLE as accurate as EAGLE-3; the 135M pair with a
    gpt-oss-20b-size drafter's costs); a gpt-oss-20b-size drafter with the blog's acceptance (a model), and the blog's
    own measurement. ``kind`` says which: model, measured or published."""
    from dataclasses import replace

    from . import recorded
    h200, vllm, v2, big = h200_135m(), vllm_concurrency(), vllm_v2_dspark(), drafter_20b()
    ds = recorded.load("dspark")["replay"]["by_k"]["7"]["dspark"]["acceptance_per_position"]
    fast = [r for r in recorded.load("gpu_speed")["best"]["rows"] if r["side"] == "fast"]   # each call ran its own AR
    best = {m: max(r["tokens_per_s"] for r in fast if r["method"] == m) for m in ("ar", "eagle", "peagle")}
    h200_vs_ar = (best["peagle"] / best["ar"], best["eagle"] / best["ar"])
    vs_ar = {name: tuple(_best_measured(p.measured, m, 1) / _best_measured(p.measured, "ar", 1) for m in (par, "eagle"))
             for name, p, par in (("v1", vllm, "peagle"), ("v2", v2, "dspark"))}
    model_20b = pays_row("gpt-oss-20b-size drafter, blog's AL (model)", big)
    return [teaching_cpu_row(),
            pays_row("135M, H200 fast engine", h200, kind="model+measured",
                     measured_ratio=h200_vs_ar[0] / h200_vs_ar[1], measured_vs_ar=h200_vs_ar),
            pays_row("135M, CUDA vLLM V1 (c=1)", vllm, kind="model+measured", measured_ratio=measured_ratio(vllm, 1),
                     measured_vs_ar=vs_ar["v1"]),
            pays_row("135M DSpark, CUDA vLLM V2 (c=1)", v2, parallel="dspark", kind="model+measured",
                     measured_ratio=measured_ratio(v2, 1, "dspark"), measured_vs_ar=vs_ar["v2"]),
            pays_row("135M DSpark, H200 fast engine (pass cost assumed = P-EAGLE's)",
                     replace(h200, acceptance={"eagle": h200.acceptance["eagle"], "peagle": ds}), parallel="dspark"),
            {**what_if(1.0), "setting": "what if: 135M P-EAGLE as accurate as EAGLE-3"},
            {**what_if(None, **cost_ratios(big)), "setting": "what if: 135M pair, a 20B-size drafter's costs"},
            model_20b,
            blog_row(model_20b["draft_share"])]
