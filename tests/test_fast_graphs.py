"""Oracles for the fused fast engine: ``generate_fast(..., compile=True)`` (torch.compile, then capture).

* the compiled target forward equals the eager one (logits and the KV slots it writes) through a
  verify, a rollback and a verify over the stale slots;
* greedy output with compiled steps equals plain AR token for token, and the speculative runs take
  the same steps (drafts, accepted counts) as the uncompiled fast engine, for AR, EAGLE-3 and P-EAGLE;
* on CUDA the compiled steps are also captured as graphs (off CUDA they run compiled, uncaptured).

A tiny Llama (3 layers, hidden 32, vocab 8) keeps inductor's compile to seconds on a CPU; the drafter
seeds were picked so that drafts get accepted (EAGLE-3: 0 or all K=3; P-EAGLE: 0 or 1), so the
accepted path runs through the compiled acceptance arithmetic, not only the all-rejected one.
Tolerance (float32): logits and keys max abs diff <= 1e-5 x their max magnitude: inductor reorders the
RMSNorm and softmax sums, so the last bits may differ (measured <= 2e-7 relative on a CPU).
"""
import os

import pytest
import torch

from helpers import random_drafter, tiny_target
from peagle_lab.engines.teaching import generate
from peagle_lab.engines.fast import FastConfig, StaticTarget, generate_fast
from peagle_lab.engines.fast.graphs import compile_step

pytestmark = pytest.mark.slow           # torch.compile: `make test` runs these, `make test-fast` does not

DEVICE = torch.device(os.environ.get("PEAGLE_TEST_DEVICE", "cpu"))
PROMPT = [1, 5, 2, 7, 3]
NEW, K, MAX_LEN = 24, 3, 64
DRAFTER_SEEDS = {"eagle": 3, "peagle": 2}      # seeds whose drafts the tiny target accepts now and then


@pytest.fixture(autouse=True)
def quick_cpu_codegen():
    """Scalar C++ compiles about twice as fast as vectorised C++ on a CPU; the tests check the fused
    math, not how fast the CPU runs it (CUDA codegen is untouched by this setting)."""
    with torch._inductor.config.patch({"cpp.vec_isa_ok": False}):
        yield


@pytest.fixture(scope="module")
def inductor_works():
    """Skip (with the reason) where inductor cannot build anything, e.g. no C++ compiler on a CPU."""
    x = torch.ones(3, device=DEVICE)
    _, _, reason = compile_step(lambda: x.mul_(2).add_(1))
    if reason is not None:
        pytest.skip(f"torch.compile does not work on this machine: {reason}")


@pytest.fixture(scope="module")
def tiny():
    target = tiny_target(vocab=8, head_dim=8, layers=3, seed=1)
    target.model.to(DEVICE)
    return target


@torch.inference_mode()
def test_compiled_forward_equals_eager(tiny, inductor_works):
    """Prefill (eager on both), a verify of 4 at 5..8, roll back 2, a verify of 4 at 7..10 (over stale slots)."""
    eager, fused = StaticTarget(tiny, MAX_LEN), StaticTarget(tiny, MAX_LEN)
    prompt = torch.tensor(PROMPT, device=DEVICE)
    for st in (eager, fused):
        st.forward(prompt, torch.arange(len(PROMPT), device=DEVICE))
    ids = torch.tensor([4, 0, 6, 2], device=DEVICE)
    pos = torch.arange(len(PROMPT), len(PROMPT) + 4, device=DEVICE)
    out = {}

    def verify():
        out["logits"], out["aux"] = fused.forward(ids, pos)

    step, _, reason = compile_step(verify)                 # compiles and runs the first verify
    assert reason is None, reason
    for i in range(2):
        if i:                                              # second verify: rolled back 2, new ids
            pos.add_(2)
            ids.copy_(torch.tensor([3, 3, 7, 1], device=DEVICE))
            step()
        logits, aux = eager.forward(ids, pos)
        for got, want in ((out["logits"], logits), (out["aux"], aux), *zip(fused.keys, eager.keys),
                          *zip(fused.values, eager.values)):
            assert (got - want).abs().max() <= 1e-5 * want.abs().max(), f"verify {i}"


@pytest.fixture(scope="module")
def ar_ref(tiny):
    return generate(tiny, PROMPT, method="ar", max_new_tokens=NEW, stop_at_eos=False).tokens


@pytest.mark.parametrize("method", ["ar", "eagle", "peagle"])
def test_compiled_generate_equals_ar(tiny, ar_ref, inductor_works, method):
    drafter = None if method == "ar" else random_drafter(tiny, parallel=method == "peagle", seed=DRAFTER_SEEDS[method])
    kw = dict(method=method, drafter=drafter, k=K, max_new_tokens=NEW, stop_at_eos=False, max_len=MAX_LEN)
    fused = generate_fast(tiny, PROMPT, compile=True, **kw)
    assert fused.stats["compiled"] is True, fused.stats["graph_note"]
    assert fused.stats["compile_s"] > 0
    assert fused.stats["graphs"] is (DEVICE.type == "cuda"), fused.stats["graph_note"]
    assert fused.tokens == ar_ref
    if method != "ar":
        plain = generate_fast(tiny, PROMPT, **kw)
        assert [(s.drafts, s.accepted) for s in fused.steps] == [(s.drafts, s.accepted) for s in plain.steps]
        assert max(s.accepted for s in fused.steps) > 0       # the accepted path ran, not only rejections
    again = generate_fast(tiny, PROMPT[1:], compile=True, **kw)   # the same compiled engine, another prompt
    assert again.tokens == generate(tiny, PROMPT[1:], method="ar", max_new_tokens=NEW, stop_at_eos=False).tokens


def test_compile_failure_falls_back_with_reason():
    """A step inductor cannot trace whole (a host sync inside) runs uncompiled and says why."""
    x = torch.zeros(2, device=DEVICE)

    def step():
        x.add_(1)
        if x.sum().item() > 100:                           # data-dependent Python branch: fullgraph refuses it
            x.zero_()

    fn, _, reason = compile_step(step)
    assert fn is step and "torch.compile failed" in reason
    fn()
    assert x.tolist() == [1.0, 1.0]                        # the failed attempt did not run the step


def test_bench_passes_compile_through(target, monkeypatch):
    """`bench --engine fast --compile`: every fast generation gets compile=True, the settings say so and rows
    carry their warm-up time; with the teaching engine --compile is refused, naming the fix. (The real
    target compiles for minutes on a CPU, so the compile itself is recorded, not run, here.)"""
    from dataclasses import replace

    from peagle_lab import bench
    from peagle_lab.bench import BenchSpec
    from peagle_lab.engines import protocol

    seen = []

    def recording(target, ids, *, config, **kw):
        seen.append(config.compile)
        return generate_fast(target, ids, config=replace(config, compile=None), **kw)

    monkeypatch.setattr(protocol, "generate_fast", recording)      # where the bench's engines are called
    out = bench.run_bench(BenchSpec(methods=["ar"], ks=[2], prompts="mt-bench", num_prompts=1, max_new_tokens=2,
                                    engine="fast"),
                          FastConfig(compile=True),
                          target=target, progress=False)
    assert seen and all(seen) and out["settings"]["compile"] == "default"
    assert out["results"][0]["warmup_s"] > 0
    with pytest.raises(ValueError, match="--engine fast"):
        bench.run_bench(BenchSpec(methods=["ar"], ks=[2], prompts="mt-bench", num_prompts=1, max_new_tokens=2,
                                  engine="teaching"),
                        FastConfig(compile=True),
                        target=target, progress=False)
    seen.clear()
    out = bench.run_bench(BenchSpec(methods=["ar"], ks=[2], prompts="mt-bench", num_prompts=1, max_new_tokens=2,
                                    engine="fast"),
                          FastConfig(compile="max-autotune-no-cudagraphs"),
                          target=target, progress=False)
    assert set(seen) == {"max-autotune-no-cudagraphs"} and out["settings"]["compile"] == "max-autotune-no-cudagraphs"
    with pytest.raises(ValueError, match="max-autotune-no-cudagraphs"):      # inductor's own graphs: refused, fix named
        FastConfig(compile="reduce-overhead")


def test_compile_modes_keep_the_math(inductor_works, monkeypatch):
    """A step compiled in each accepted mode computes what the plain step computes, and the mode reaches
    torch.compile; a mode with inductor's own CUDA graphs is refused before anything compiles."""
    from peagle_lab.engines.fast import graphs

    modes = []
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: modes.append(kw.get("mode")) or real(fn, **kw))
    w = torch.randn(8, 8, device=DEVICE)
    for mode in graphs.COMPILE_MODES:
        x, y = torch.randn(4, 8, device=DEVICE), torch.zeros(4, 8, device=DEVICE)
        fn, _, reason = compile_step(lambda: y.copy_(torch.relu(x @ w) * 2 + 1), mode)
        assert reason is None, reason
        y.zero_()
        fn()
        torch.testing.assert_close(y, torch.relu(x @ w) * 2 + 1)
    assert modes == [None, "max-autotune-no-cudagraphs"]
    with pytest.raises(ValueError, match="choose True/False or one of"):
        graphs.compile_mode("reduce-overhead")
    with pytest.raises(ValueError, match="choose True/False or one of"):
        generate_fast(None, [1], method="ar", compile="max-autotune")
