"""The cost model (peagle_lab.costmodel): hand-worked values, monotonic properties, and oracles:
fed parts measured apart, it reproduces recorded end-to-end figures within stated tolerances."""
import pytest

from peagle_lab import costmodel as cm
from peagle_lab.costmodel import Parts, acceptance_length, best_k, break_even_al, step_ms, tokens_per_s

PARTS = Parts(verify_fixed_ms=2.0, seq_pass_ms=0.1, par_pass_ms=0.3)
ACC = [0.6, 0.4, 0.2, 0.1]


def test_al_is_one_plus_the_acceptance_prefix():
    assert acceptance_length(ACC, 0) == 1.0
    assert acceptance_length(ACC, 3) == pytest.approx(2.2)
    assert acceptance_length({3: 2.5}, 3) == 2.5
    with pytest.raises(ValueError):
        acceptance_length(ACC, 5)             # replayed only up to K=4


def test_step_counts_k_passes_or_one_and_verify_grows_with_batch_times_k_plus_1():
    assert step_ms("eagle", 4, PARTS) == pytest.approx(4 * 0.1 + 2.0)
    assert step_ms("peagle", 4, PARTS) == pytest.approx(0.3 + 2.0)
    grow = Parts(verify_fixed_ms=1.0, seq_pass_ms=0.1, par_pass_ms=0.3, per_token_ms=0.01)
    assert step_ms("peagle", 3, grow, batch=8) == pytest.approx(0.3 + 1.0 + 0.01 * 8 * 4)
    assert step_ms("ar", 0, grow, batch=8) == pytest.approx(1.0 + 0.01 * 8)
    with pytest.raises(ValueError):
        step_ms("tree", 3, PARTS)


def test_tokens_per_s_and_best_k():
    assert tokens_per_s("eagle", 2, ACC, PARTS) == pytest.approx(1000 * 2.0 / 2.2)
    k, tps = best_k("peagle", ACC, PARTS, [1, 2, 3, 4])
    assert k == 4 and tps == pytest.approx(1000 * 2.3 / 2.3)   # one pass: every extra draft is nearly free


def test_monotonic_properties():
    # more acceptance never slows a method; a dearer verify never speeds it up; parallel drafting's
    # advantage grows with the cost of a sequential pass
    for k in (1, 3, 4):
        assert tokens_per_s("peagle", k, [a + 0.05 for a in ACC], PARTS) > tokens_per_s("peagle", k, ACC, PARTS)
        dear = Parts(verify_fixed_ms=3.0, seq_pass_ms=0.1, par_pass_ms=0.3)
        assert tokens_per_s("eagle", k, ACC, dear) < tokens_per_s("eagle", k, ACC, PARTS)
    ratios = [cm.predict(Parts(verify_fixed_ms=2.0, seq_pass_ms=s, par_pass_ms=0.3), {"eagle": ACC, "peagle": ACC},
                         [1, 2, 3, 4]).ratio for s in (0.05, 0.2, 0.8)]
    assert ratios == sorted(ratios)


def test_break_even_al_makes_the_two_methods_equal():
    need = break_even_al(4, ACC, PARTS, [1, 2, 3, 4])
    _, seq = best_k("eagle", ACC, PARTS, [1, 2, 3, 4])
    assert tokens_per_s("peagle", 4, {4: need}, PARTS) == pytest.approx(seq)


def test_best_k_fixes_what_a_fixed_al_got_wrong():
    # Held at one AL over K, parallel drafting "wins from K=5" here; with AL(K) from per-position
    # acceptance the sequential method at its own best K stays ahead (the old crossover_k's error).
    seq_acc, par_acc = [0.6, 0.35, 0.2, 0.12, 0.06, 0.04, 0.03], [0.55, 0.28, 0.15, 0.09, 0.06, 0.04, 0.03]
    parts = Parts(verify_fixed_ms=1.1, seq_pass_ms=0.05, par_pass_ms=0.16, host_ms=0.06)
    assert tokens_per_s("peagle", 5, {5: 2.4}, parts) > tokens_per_s("eagle", 5, {5: 2.4}, parts)
    assert cm.predict(parts, {"eagle": seq_acc, "peagle": par_acc}, range(1, 8)).ratio < 1


def test_h200_135m_parts_measured_apart_predict_the_end_to_end_runs():
    """Profiler-replayed step parts + replayed acceptance vs the fast engine's recorded tokens/s:
    each method's best within 15% (the replay wrote 128 tokens a reply, the runs 256), the ratio
    P-EAGLE / EAGLE-3 within 0.05 (parity: 0.97 measured)."""
    p = cm.preset("h200-135m")
    pred = p.predict()
    for method in ("eagle", "peagle"):
        measured = max(v for (m, _), v in p.measured.items() if m == method)
        assert pred.row(method)["tokens_per_s"] == pytest.approx(measured, rel=0.15)
    best = {m: max(v for (mm, _), v in p.measured.items() if mm == m) for m in ("eagle", "peagle")}
    assert pred.ratio == pytest.approx(best["peagle"] / best["eagle"], abs=0.05)
    assert 0.9 < pred.ratio < 1.05


def test_vllm_concurrency_gain_shrinks_as_predicted():
    """Calibrated at concurrency 1, the model predicts the shrinking P-EAGLE / EAGLE-3 ratio at 4-64
    within 0.15 of the recorded CUDA vLLM sweep, and predicts it falling."""
    p = cm.preset("vllm-concurrency")
    pred = [p.predict(c).ratio for c in (1, 4, 16, 64)]
    assert pred == sorted(pred, reverse=True)
    for c, r in zip((1, 4, 16, 64), pred):
        assert r == pytest.approx(cm.measured_ratio(p, c), abs=0.15), c


def test_20b_drafter_parallel_pays():
    p = cm.preset("h200-20b-drafter")
    recorded_rows = __import__("peagle_lab").recorded.load("costmodel")["drafter_20b"]["rows"]
    rows = {r["K"]: r for r in recorded_rows if r["B"] == 1}
    assert rows[7]["parallel_ms"] == pytest.approx(1.15, abs=0.01)
    assert rows[7]["sequential_ms"] == pytest.approx(6.48, abs=0.01)
    pred = p.predict()
    assert pred.ratio > p.measured["ratio_c1"] > 1     # the same 4-layer drafter both ways: an upper bound


def test_acceptance_needed_and_unknown_preset():
    assert cm.acceptance_needed(1000.0, 1.5) == pytest.approx(1.5)
    with pytest.raises(KeyError, match="measured live"):
        cm.preset("cpu")


# ---- where parallel drafting pays (notebook 07): each point against its record, the line, the what-if ------------

def _rows():
    return {r["setting"]: r for r in cm.where_it_pays()}


@pytest.fixture(scope="module")
def rows():
    return _rows()


def _median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def test_every_row_has_the_same_keys_and_says_what_it_is(rows):
    assert len(rows) == 9
    for r in rows.values():
        assert tuple(r) == cm.ROW_KEYS
        assert r["kind"] in ("model", "measured", "model+measured", "published") and r["source"]
        assert 0 < r["draft_share"] < 1 and r["al_ratio"] > 0
        judged = r["measured_ratio"] if r["measured_ratio"] is not None else r["predicted_ratio"]
        assert r["pays"] == (judged > 1)
        if r["kind"] == "measured" or r["kind"] == "published":
            assert r["predicted_ratio"] is None and r["measured_ratio"] is not None
        else:
            assert r["predicted_ratio"] is not None and r["al_ratio_needed"] is not None


def test_the_cpu_teaching_engine_point_is_its_recorded_bench(rows):
    """From the raw CPU bench (benchmarks/results/bench_cpu_mtbench.json): each method at its fastest K, EAGLE-3's
    drafting share from its own time split."""
    import json
    from pathlib import Path
    raw = json.loads((Path(__file__).resolve().parents[1] / "benchmarks/results/bench_cpu_mtbench.json").read_text())
    best = {m: max((r for r in raw["results"] if r["method"] == m), key=lambda r: r["tokens_per_s"])
            for m in ("ar", "eagle", "peagle")}
    assert (best["eagle"]["k"], best["peagle"]["k"]) == (5, 3)
    s = best["eagle"]["time_split_s"]
    row = rows["135M, CPU teaching engine"]
    assert row["draft_share"] == pytest.approx(s["draft"] / (s["draft"] + s["verify"] + s["bookkeeping"]), abs=1e-4)
    assert row["al_ratio"] == pytest.approx(best["peagle"]["acceptance_length"] / best["eagle"]["acceptance_length"],
                                            abs=1e-4)
    assert row["measured_ratio"] == pytest.approx(best["peagle"]["tokens_per_s"] / best["eagle"]["tokens_per_s"],
                                                  abs=1e-4)
    assert row["measured_ratio"] == pytest.approx(0.91, abs=0.005)        # benchmarks/RESULTS.md: P/E 0.91x
    assert row["measured_parallel_vs_ar"] == pytest.approx(best["peagle"]["tokens_per_s"] / best["ar"]["tokens_per_s"],
                                                           abs=1e-4)
    assert (row["k_sequential"], row["k_parallel"], row["pays"]) == (5, 3, False)


def test_the_gpu_and_vllm_points_are_their_recorded_runs(rows):
    from peagle_lab import recorded
    fast = [r for r in recorded.load("gpu_speed")["best"]["rows"] if r["side"] == "fast"]
    best = {m: max(r["tokens_per_s"] for r in fast if r["method"] == m) for m in ("ar", "eagle", "peagle")}
    h200 = rows["135M, H200 fast engine"]
    assert h200["measured_ratio"] == pytest.approx(best["peagle"] / best["eagle"], abs=1e-4)
    assert h200["measured_parallel_vs_ar"] == pytest.approx(best["peagle"] / best["ar"], abs=1e-4)
    assert h200["measured_sequential_vs_ar"] == pytest.approx(best["eagle"] / best["ar"], abs=1e-4)
    assert (h200["k_parallel"], h200["k_sequential"]) == (7, 4)
    acc = recorded.load("costmodel")["replay_mtbench80"]["acceptance_per_position"]
    assert h200["al_ratio"] == pytest.approx((1 + sum(acc["peagle"][:7])) / (1 + sum(acc["eagle"][:4])), abs=1e-4)
    assert h200["al_ratio"] == pytest.approx(0.94, abs=0.005)              # the ratio notebook 07's text names

    v1 = [r for r in recorded.load("vllm_cuda_h200")["rows"]
          if r["runner"] == "v1" and r["prompts"] == "mt-bench" and r["concurrency"] == 1]
    b1 = {m: max(r["tokens_per_s"] for r in v1 if r["method"] == m) for m in ("ar", "eagle", "peagle")}
    row = rows["135M, CUDA vLLM V1 (c=1)"]
    assert row["measured_ratio"] == pytest.approx(b1["peagle"] / b1["eagle"], abs=1e-4)
    assert row["measured_parallel_vs_ar"] == pytest.approx(b1["peagle"] / b1["ar"], abs=1e-4)
    assert row["predicted_ratio"] == pytest.approx(row["measured_ratio"], abs=0.1)   # calibrated at c=1

    v2 = [r for r in recorded.load("dspark")["vllm"]["rows"] if r["runner"] == "v2" and r["concurrency"] == 1]
    med = {c: _median([r["tokens_per_s"] for r in v2 if r["config"] == c]) for c in {r["config"] for r in v2}}
    assert len([r for r in v2 if r["config"] == "eagle-k3-v2"]) == 3      # three interleaved rounds
    b2 = {m: max(v for c, v in med.items() if c.startswith(m + "-")) for m in ("ar", "eagle", "dspark")}
    row = rows["135M DSpark, CUDA vLLM V2 (c=1)"]
    assert row["method"] == "dspark" and row["kind"] == "model+measured"
    assert row["measured_ratio"] == pytest.approx(b2["dspark"] / b2["eagle"], abs=1e-4)
    assert row["measured_parallel_vs_ar"] == pytest.approx(b2["dspark"] / b2["ar"], abs=1e-4)
    assert row["measured_sequential_vs_ar"] == pytest.approx(b2["eagle"] / b2["ar"], abs=1e-4)
    assert row["predicted_ratio"] == pytest.approx(row["measured_ratio"], abs=0.05)
    assert not row["pays"] and row["measured_sequential_vs_ar"] > 1        # EAGLE-3 beat plain decoding on V2


def test_the_published_points_are_the_published_figures(rows):
    """The blog (gpt-oss-20b, one B200, MT-Bench, one request) and the paper's abstract, as /work/shared's notes
    and benchmarks/make_recorded.py give them; the modelled 20B-size point stays a model, apart from the blog's."""
    blog = rows["gpt-oss-20b, B200 (blog, measured)"]
    model = rows["gpt-oss-20b-size drafter, blog's AL (model)"]
    assert blog["kind"] == "published" and blog["measured_ratio"] == 1.55
    assert blog["al_ratio"] == pytest.approx(3.70 / 3.27, abs=1e-4)
    assert blog["draft_share"] == model["draft_share"]                    # the blog gives no share: the model's x
    assert model["kind"] == "model" and model["measured_ratio"] is None
    assert model["predicted_ratio"] == pytest.approx(cm.preset("h200-20b-drafter").predict().ratio, abs=1e-4)
    assert model["predicted_ratio"] > blog["measured_ratio"]              # the model's upper bound, notebook 07
    assert cm.paper_range() == (1.10, 1.36)


def test_the_break_even_line_and_the_speed_ratio_agree():
    for k in (1, 3, 4, 7):
        for r in (0.5, 1.0, 3.0):
            for f in (0.0, 0.1, 0.35, 0.74, 0.9):
                line = cm.break_even_ratio(f, k, r)
                assert cm.speed_ratio(f, line, k, r) == pytest.approx(1.0)      # on the line: parity
                assert cm.speed_ratio(f, line * 1.05, k, r) > 1 > cm.speed_ratio(f, line * 0.95, k, r)
                # the same idealised step, seen over plain decoding: the two speed-ups divide to the speed ratio
                if f < 0.9:
                    par, seq = cm.speedup_vs_ar(f, 2.0, k, "parallel", r), cm.speedup_vs_ar(f, 2.2, k)
                    assert par / seq == pytest.approx(cm.speed_ratio(f, 2.0 / 2.2, k, r))
    assert cm.speedup_vs_ar(0.0, 2.3, 4) == cm.speedup_vs_ar(0.0, 2.3, 4, "parallel") == 2.3   # free drafting
    assert cm.speedup_vs_ar(1 - 1 / 2.0, 2.0, 4) == pytest.approx(1.0)   # EAGLE-3's break-even with plain decoding
    assert cm.speedup_vs_ar(0.5, 2.0, 4, "ar") == 1.0
    with pytest.raises(ValueError):
        cm.speedup_vs_ar(1.0, 2.0, 4)


def test_a_row_at_its_needed_al_predicts_parity(rows):
    """Each modelled row's needed AL ratio makes the parallel drafter exactly as fast as EAGLE-3 at its best K, and
    where verify is flat in the tokens (the H200 engine) the row is the closed form: need = break_even_ratio(f, K,
    r), predicted = speed_ratio(f, AL ratio, K, r)."""
    for setting, preset_ in (("135M, H200 fast engine", cm.preset("h200-135m")),
                             ("135M, CUDA vLLM V1 (c=1)", cm.preset("vllm-concurrency")),
                             ("135M DSpark, CUDA vLLM V2 (c=1)", cm.preset("vllm-v2-dspark"))):
        row = rows[setting]
        seq = preset_.predict().row("sequential")
        need_al = row["al_ratio_needed"] * seq["al"]
        par = tokens_per_s("parallel", row["k_parallel"], {row["k_parallel"]: need_al}, preset_.parts)
        assert par == pytest.approx(seq["tokens_per_s"], rel=1e-3), setting
    h = rows["135M, H200 fast engine"]
    assert h["al_ratio_needed"] == pytest.approx(cm.break_even_ratio(h["draft_share"], h["k_sequential"],
                                                                     h["pass_ratio"]), abs=1e-3)
    assert h["predicted_ratio"] == pytest.approx(cm.speed_ratio(h["draft_share"], h["al_ratio"], h["k_sequential"],
                                                                h["pass_ratio"]), abs=1e-3)


def test_break_even_moves_the_right_way():
    shares = [i / 10 for i in range(10)]
    for k in (3, 7):
        line = [cm.break_even_ratio(f, k) for f in shares]
        assert line == sorted(line, reverse=True) and line[0] == 1.0       # a larger drafting share: a lower bar
        assert cm.break_even_ratio(0.5, k, 0.5) < cm.break_even_ratio(0.5, k, 1.0) < cm.break_even_ratio(0.5, k, 2.0)
    assert cm.break_even_ratio(0.5, 7) < cm.break_even_ratio(0.5, 3)       # one pass replaces more passes at K=7
    assert cm.break_even_ratio(0.5, 3, 3.0) == 1.0                          # a pass as dear as K: no saving
    seq = [cm.speedup_vs_ar(f, 2.0, 4) for f in shares]
    par = [cm.speedup_vs_ar(f, 2.0, 4, "parallel", 3.0) for f in shares]
    assert seq == sorted(seq, reverse=True) and par == sorted(par, reverse=True)


def test_what_if_at_eagle3s_acceptance(rows):
    """At 1.0x EAGLE-3's acceptance the parallel drafter's AL at every K is EAGLE-3's; EAGLE-3's own prediction (its
    K, speed, drafting share) is the unchanged engine's; the row is notebook 07's what-if point."""
    base = cm.preset("h200-135m")
    own = rows["135M, H200 fast engine"]
    w = cm.what_if(1.0)
    eagle = base.acceptance["eagle"]
    assert w["al_ratio"] == pytest.approx(acceptance_length(eagle, w["k_parallel"]) /
                                          acceptance_length(eagle, w["k_sequential"]), abs=1e-4)
    for key in ("k_sequential", "draft_share", "sequential_vs_ar", "al_ratio_needed", "pass_ratio"):
        assert w[key] == own[key], key
    ar = base.predict().row("ar")["tokens_per_s"]
    assert w["parallel_vs_ar"] == pytest.approx(tokens_per_s("parallel", w["k_parallel"], eagle, base.parts) / ar,
                                                abs=1e-4)
    assert w["predicted_ratio"] == pytest.approx(1.10, abs=0.01) and w["pays"]
    assert {k: v for k, v in w.items() if k != "setting"} == \
        {k: v for k, v in rows["what if: 135M P-EAGLE as accurate as EAGLE-3"].items() if k != "setting"}
    # P-EAGLE's own acceptance and the engine's own costs: the engine's own prediction
    mine = cm.what_if(None, **cm.cost_ratios(base))
    for key in ("k_parallel", "k_sequential", "draft_share", "al_ratio", "al_ratio_needed", "predicted_ratio",
                "parallel_vs_ar", "sequential_vs_ar"):
        assert mine[key] == pytest.approx(own[key], abs=1e-4), key
    with pytest.raises(ValueError):
        cm.what_if(-0.1)


def test_what_if_costs_and_monotonicity(rows):
    big = cm.cost_ratios(cm.preset("h200-20b-drafter"))
    parts20 = cm.preset("h200-20b-drafter").parts
    assert big["pass_vs_verify"] == pytest.approx(parts20.seq_pass(7) / parts20.verify_fixed_ms)
    assert big["pass_ratio"] == pytest.approx(parts20.par_pass(7) / parts20.seq_pass(7))
    w = cm.what_if(None, **big)
    assert w == {**rows["what if: 135M pair, a 20B-size drafter's costs"], "setting": w["setting"]}
    base = cm.preset("h200-135m").parts
    p = big["pass_vs_verify"] * base.verify_fixed_ms
    k = w["k_sequential"]
    assert w["draft_share"] == pytest.approx(k * p / (k * p + base.verify_fixed_ms + base.host_ms), abs=1e-4)
    assert w["pass_ratio"] == pytest.approx(big["pass_ratio"], abs=1e-4)
    assert w["pays"] and w["predicted_ratio"] > rows["135M, H200 fast engine"]["predicted_ratio"]
    # more acceptance never hurts the parallel drafter; dearer passes (a pass = one sequential pass) favour it more
    by_accuracy = [cm.what_if(a)["predicted_ratio"] for a in (0.6, 0.7, 0.8, 0.9, 1.0, 1.1)]
    assert by_accuracy == sorted(by_accuracy) and len(set(by_accuracy)) == len(by_accuracy)
    by_cost = [cm.what_if(0.9, pass_vs_verify=pv, pass_ratio=1.0)["predicted_ratio"] for pv in (0.01, 0.05, 0.2, 0.5)]
    assert by_cost == sorted(by_cost)
    assert cm.what_if(1.0, pass_ratio=1.0)["predicted_ratio"] >= 1.0        # as accurate and no dearer: never worse
