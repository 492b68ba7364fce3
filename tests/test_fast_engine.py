"""Oracles for the fast engine (static caches, CUDA graphs): peagle_lab.engines.fast.

* the hand-written target forward equals transformers' logits (and Target.forward's taps) through
  prefill, decode, verify and rollback;
* generate_fast at T = 0 equals plain AR token for token, and its acceptance stats equal the
  teaching engine's (same drafts), for AR, EAGLE-3 and P-EAGLE with the shipped drafters;
* on CUDA: captured-graph replay gives the same tokens and stats as the same steps run eagerly.

Tolerances (float32): logits max abs diff <= 1e-4; taps (the residual stream, magnitudes up to
~1e2) max abs diff <= 1e-5 x their max magnitude. float64 (tiny model): logits 1e-5, taps 1e-6 x max --
both paths return logits as float32 and transformers' RMSNorm rounds through float32, so float64
cannot agree more closely than float32's resolution.
"""
import pytest
import torch

from helpers import random_drafter, tiny_target
from peagle_lab.compat import IncompatibleDrafter
from peagle_lab.checkpoint import load_drafter
from peagle_lab.drafters_registry import shipped
from peagle_lab.engines.teaching import generate
from peagle_lab.engines.fast import FastConfig, StaticTarget, generate_fast, memory_floor_ms
from peagle_lab.engines.fast import engine as fast_engine_mod

MAX_LEN = 512
NEW = 32
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def _steps_oracle(target, st: StaticTarget, prompt, chunks, rollbacks, tol_logits, tol_aux_rel):
    """Feed prompt then chunks through both; after chunk i roll back rollbacks[i] positions."""
    dev = target.device
    cache = target.new_cache()
    pos = 0
    for i, chunk in enumerate([prompt] + chunks):
        ids = torch.tensor(chunk, device=dev)
        ref = target.forward(ids, cache)
        logits, aux = st.forward(ids, torch.arange(pos, pos + len(chunk), device=dev))
        assert (logits - ref.logits[0]).abs().max() <= tol_logits, f"step {i}"
        assert (aux - ref.aux[0]).abs().max() <= tol_aux_rel * ref.aux.abs().max(), f"step {i}"
        pos += len(chunk)
        back = ([0] + rollbacks)[i]
        if back:
            pos -= back
            target.rollback(cache, pos)


@torch.inference_mode()
def test_static_forward_equals_transformers(target, mtbench_ids):
    st = StaticTarget(target, MAX_LEN)
    # prefill, 2 decodes, a verify of 4 (roll back 3 = K=3 drafts all rejected), a verify of 8 (keep 5), a decode
    # fp32 logits of size ~10-30: 1e-4 on the CPU (measured 6e-5); CUDA picks other matmul kernels (other summation
    # orders), and the H200 measured 1.0001e-4 at the prefill, so the GPU bound is 2e-4
    tol = 2e-4 if target.device.type == "cuda" else 1e-4
    _steps_oracle(target, st, mtbench_ids[0], [[17], [923], [5, 77, 900, 12], [1, 2, 3, 4, 5, 6, 7, 8], [42]],
                  [0, 0, 3, 3, 0], tol_logits=tol, tol_aux_rel=1e-5)


@torch.inference_mode()
def test_static_forward_float64_odd_shapes():
    """A tiny Llama (head_dim 8, 4 query heads on 2 KV heads) in float64."""
    tiny = tiny_target(vocab=50, head_dim=8)
    tiny.model.double()
    st = StaticTarget(tiny, 64)
    assert st.keys[0].dtype == torch.float64 and st.rep == 2
    _steps_oracle(tiny, st, [1, 5, 9, 2, 7], [[3], [4, 8, 1], [6, 6]], [0, 0, 2], tol_logits=1e-5, tol_aux_rel=1e-6)


@pytest.fixture(scope="module")
def shipped_drafters(target):
    return {m: load_drafter(shipped()[f"{m}-smollm2"], target) for m in ("eagle", "peagle")}


@pytest.fixture(scope="module")
def ar_refs(target, mtbench_ids):
    return [generate(target, ids, method="ar", max_new_tokens=NEW).tokens for ids in mtbench_ids[:2]]


def test_fast_ar_equals_ar(target, mtbench_ids, ar_refs):
    for ids, ref in zip(mtbench_ids[:2], ar_refs):
        out = generate_fast(target, ids, method="ar", max_new_tokens=NEW, max_len=MAX_LEN)
        assert out.tokens == ref
        assert out.acceptance is None and out.stats["engine"] == "fast"


@pytest.mark.parametrize("method", ["eagle", "peagle"])
@pytest.mark.parametrize("k", [pytest.param(1, marks=pytest.mark.slow), 3,     # K 1 and 7: make test
                               pytest.param(7, marks=pytest.mark.slow)])
def test_fast_speculative_equals_ar_and_teaching_stats(target, mtbench_ids, ar_refs, shipped_drafters, method, k):
    ids, drafter = mtbench_ids[0], shipped_drafters[method]
    fast = generate_fast(target, ids, method=method, drafter=drafter, k=k, max_new_tokens=NEW, max_len=MAX_LEN)
    assert fast.tokens == ar_refs[0]
    teach = generate(target, ids, method=method, drafter=drafter, k=k, max_new_tokens=NEW)
    assert fast.acceptance.to_dict() == teach.acceptance.to_dict()
    assert [(s.drafts, s.accepted, s.next_token) for s in fast.steps] == \
           [(s.drafts, s.accepted, s.next_token) for s in teach.steps]


@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_fast_speculative_second_prompt(target, mtbench_ids, ar_refs, shipped_drafters, method):
    out = generate_fast(target, mtbench_ids[1], method=method, drafter=shipped_drafters[method], k=3,
                        max_new_tokens=NEW, max_len=MAX_LEN)
    assert out.tokens == ar_refs[1]
    assert out.acceptance.num_drafts == len(out.steps)


def test_fast_every_accept_count(target, mtbench_ids, ar_refs, shipped_drafters, monkeypatch):
    """An oracle-assisted drafter makes every accepted count 0..K occur, all-accepted included."""
    ids, ref, k = mtbench_ids[0], ar_refs[0], 4
    real = fast_engine_mod.STATIC_DRAFTERS["peagle"]
    rng = torch.Generator().manual_seed(0)

    def assisted(drafter, cache, ctx_tok, ctx_aux, ctx_n, d_len, k):
        real(drafter, cache, ctx_tok, ctx_aux, ctx_n, d_len, k)             # the drafter's state moves as usual
        g = int(d_len) - len(ids) + 1                                        # tokens generated so far
        truth = (ref + [0] * 64)[g: g + k]
        cut = int(torch.randint(0, k + 1, (1,), generator=rng))
        return torch.tensor(truth[:cut] + [(t + 1) % target.vocab_size for t in truth[cut:]], device=target.device)

    monkeypatch.setitem(fast_engine_mod.STATIC_DRAFTERS, "peagle", assisted)
    monkeypatch.setattr(fast_engine_mod, "_ENGINES", fast_engine_mod.weakref.WeakKeyDictionary())
    out = generate_fast(target, ids, method="peagle", drafter=shipped_drafters["peagle"], k=k, max_new_tokens=NEW,
                        max_len=MAX_LEN, capture=False)
    assert out.tokens == ref
    counts = {s.accepted for s in out.steps}
    assert k in counts and 0 in counts and len(counts) >= 3, counts


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_capture_skipped_off_cuda_with_reason(target, mtbench_ids):
    out = generate_fast(target, mtbench_ids[0], method="ar", max_new_tokens=2, max_len=MAX_LEN)
    assert out.stats["graphs"] is False and "CUDA" in out.stats["graph_note"]


def test_clear_errors(target, mtbench_ids, shipped_drafters):
    ids = mtbench_ids[0]
    with pytest.raises(ValueError, match="max_len >="):
        generate_fast(target, ids, method="ar", max_new_tokens=MAX_LEN, max_len=MAX_LEN)
    with pytest.raises(ValueError, match="P-EAGLE drafter"):
        generate_fast(target, ids, method="peagle", drafter=shipped_drafters["eagle"], k=3, max_len=MAX_LEN)
    with pytest.raises(IncompatibleDrafter, match="trained for"):
        generate_fast(target, ids, method="peagle", drafter=shipped_drafters["peagle"], k=9, max_len=MAX_LEN)
    with pytest.raises(ValueError, match="needs a drafter"):
        generate_fast(target, ids, method="eagle", max_len=MAX_LEN)
    with pytest.raises(ValueError, match="empty"):
        generate_fast(target, [], method="ar", max_len=MAX_LEN)


def test_fast_random_drafters_float64():
    """Odd shapes, float64, random drafters (accept ~nothing): still AR token for token."""
    tiny = tiny_target(vocab=50, head_dim=8)
    tiny.model.double()
    prompt = [1, 5, 9, 2, 7, 3]
    ref = generate(tiny, prompt, method="ar", max_new_tokens=20, stop_at_eos=False).tokens
    for method, parallel, layers in (("eagle", False, 1), ("peagle", True, 2)):
        d = random_drafter(tiny, parallel=parallel, num_layers=layers, draft_vocab_size=20, seed=3).double()
        for k in (1, 2, 5):
            out = generate_fast(tiny, prompt, method=method, drafter=d, k=k, max_new_tokens=20, stop_at_eos=False,
                                max_len=64)
            assert out.tokens == ref, (method, k)
            teach = generate(tiny, prompt, method=method, drafter=d, k=k, max_new_tokens=20, stop_at_eos=False)
            assert out.acceptance.to_dict() == teach.acceptance.to_dict(), (method, k)


@pytest.mark.slow                     # minutes on a 2-core CPU: `make test` runs it, `make test-fast` does not
@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_bucketed_prompt_pass_equals_ar(target, mtbench_ids, ar_refs, shipped_drafters, method):
    """The prompt's pass padded to its bucket (what CUDA captures per bucket; eager here): the same tokens as AR and
    the teaching engine's acceptance, for a second prompt whose bucket still holds the first one's padding."""
    from peagle_lab.engines.fast.config import PROMPT_BUCKET
    for ids, ref in zip(mtbench_ids[:2], ar_refs):
        assert len(ids) % PROMPT_BUCKET                                     # a padded tail to ignore
        out = generate_fast(target, ids, method=method, drafter=shipped_drafters[method], k=3, max_new_tokens=NEW,
                            max_len=MAX_LEN, prompt_graphs=True)
        assert out.tokens == ref
        teach = generate(target, ids, method=method, drafter=shipped_drafters[method], k=3, max_new_tokens=NEW)
        assert out.acceptance.to_dict() == teach.acceptance.to_dict()
    out = generate_fast(target, mtbench_ids[0], method="ar", max_new_tokens=NEW, max_len=MAX_LEN, prompt_graphs=True)
    assert out.tokens == ar_refs[0]


def test_bucketed_prompt_pass_at_bucket_edges():
    """Prompts of 1, 63, 64 and 65 tokens (a bucket's edges), float64, random drafters: AR token for token, the
    teaching engine's acceptance, each bucket's step built once and reused."""
    from peagle_lab.engines.fast import engine as fe
    tiny = tiny_target(vocab=50, head_dim=8)
    tiny.model.double()
    g = torch.Generator().manual_seed(1)
    drafters = {"eagle": random_drafter(tiny, parallel=False, num_layers=1, draft_vocab_size=20, seed=3).double(),
                "peagle": random_drafter(tiny, parallel=True, num_layers=2, draft_vocab_size=20, seed=3).double()}
    for n in (65, 1, 63, 64):
        prompt = torch.randint(1, 50, (n,), generator=g).tolist()
        ref = generate(tiny, prompt, method="ar", max_new_tokens=12, stop_at_eos=False).tokens
        for method in ("ar", "eagle", "peagle"):
            out = generate_fast(tiny, prompt, method=method, drafter=drafters.get(method), k=3, max_new_tokens=12,
                                stop_at_eos=False, max_len=192, prompt_graphs=True)
            assert out.tokens == ref, (n, method)
            if method != "ar":
                teach = generate(tiny, prompt, method=method, drafter=drafters[method], k=3, max_new_tokens=12,
                                 stop_at_eos=False)
                assert out.acceptance.to_dict() == teach.acceptance.to_dict(), (n, method)
                assert [s.drafts for s in out.steps] == [s.drafts for s in teach.steps], (n, method)   # same drafts
    engines = [e for key, e in fe._ENGINES[tiny].items() if e.prompt_graphs]
    assert len(engines) == 3 and all(sorted(e._prompt_steps) == [64, 128] for e in engines)
    # K past a bucket: the drafter's scratch holds a step's padding too
    out = generate_fast(tiny, prompt, method="peagle", drafter=drafters["peagle"], k=70, max_new_tokens=12,
                        stop_at_eos=False, max_len=192, prompt_graphs=True)
    assert out.tokens == ref


def test_memory_floor():
    assert memory_floor_ms(4.8e9) == pytest.approx(1.0)                    # 4.8 GB at 4.8 TB/s = 1 ms


@cuda_only
@pytest.mark.parametrize("method,k", [("ar", 0), ("eagle", 3), ("peagle", 5)])
def test_graph_replay_equals_eager(target, mtbench_ids, shipped_drafters, method, k):
    kw = dict(method=method, drafter=shipped_drafters.get(method), k=max(k, 1), max_new_tokens=NEW, max_len=MAX_LEN)
    graphed = generate_fast(target, mtbench_ids[0], **kw)
    eager = generate_fast(target, mtbench_ids[0], capture=False, **kw)
    assert graphed.stats["graphs"] is True, graphed.stats["graph_note"]
    assert graphed.tokens == eager.tokens                   # eager: capture=False, so the prompt's pass unpadded too
    from peagle_lab.engines.fast import engine as fe
    bucketed = [e for e in fe._ENGINES[target].values() if e.prompt_graphs and e.method == method]
    assert bucketed and all(g.captured for e in bucketed for g in e._prompt_steps.values())
    if method != "ar":
        assert graphed.acceptance.to_dict() == eager.acceptance.to_dict()


@cuda_only
def test_prompt_buckets_share_one_pool(target, mtbench_ids, shipped_drafters):
    """Every bucket's graph of an engine is captured into one memory pool; a bucket replayed after a larger bucket's
    capture (which may reuse the same memory for its temporaries) still gives the eager engine's tokens."""
    from peagle_lab.engines.fast import engine as fe
    ids = [tok for p in mtbench_ids for tok in p]
    short, long = ids[:40], ids[:150]                                       # buckets of 64 and 192 tokens
    kw = dict(method="peagle", drafter=shipped_drafters["peagle"], k=4, max_new_tokens=NEW, max_len=MAX_LEN)
    for prompt in (short, long, short):                                     # eager over the same padded buckets
        eager = generate_fast(target, prompt, capture=False, prompt_graphs=True, **kw)
        assert generate_fast(target, prompt, **kw).tokens == eager.tokens
    # the engine generate_fast used
    engine = fe.fast_engine(target, "peagle", shipped_drafters["peagle"], 4, FastConfig(max_len=MAX_LEN))
    assert engine.prompt_graphs and sorted(engine._prompt_steps) == [64, 192]
    assert all(g.captured for g in engine._prompt_steps.values())
    assert len({g.graph.pool() for g in engine._prompt_steps.values()}) == 1


@cuda_only
def test_launch_floor_measured():
    from peagle_lab.engines.fast import launch_floor_us
    assert 0 < launch_floor_us(reps=200) < 1000


def test_bench_fast_engine_rows(target, monkeypatch):
    """`bench --engine fast`: rows say which engine ran, carry a per-step split, and stay identical to AR;
    with keep_going a failing configuration records its error and the others run on."""
    from peagle_lab import bench
    from peagle_lab.bench import BenchSpec

    assert bench.resolve_engine("auto", "cpu") == "teaching" and bench.resolve_engine("auto", "cuda:0") == "fast"
    if not torch.cuda.is_available():
        assert bench.resolve_device("auto") == "cpu"
    from peagle_lab.engines import protocol         # where every engine of the bench is called

    real = protocol.generate_fast

    def flaky(target, ids, *, method, **kw):
        if method == "eagle":
            raise RuntimeError("boom")
        return real(target, ids, method=method, **kw)

    monkeypatch.setattr(protocol, "generate_fast", flaky)
    out = bench.run_bench(BenchSpec(methods=["ar", "eagle", "peagle"], ks=[2], prompts="mt-bench", num_prompts=2,
                                    max_new_tokens=4, engine="fast", keep_going=True),
                          target=target, progress=False)
    rows = {r["method"]: r for r in out["results"]}
    assert {r["engine"] for r in rows.values()} == {"fast"} and out["settings"]["engine"] == "fast"
    assert rows["peagle"]["identical_to_ar"] is True and rows["peagle"]["new_tokens"] == 8
    assert rows["eagle"]["error"] == "RuntimeError: boom" and rows["eagle"]["new_tokens"] == 0
    split = rows["peagle"]["step_split_ms"]
    assert split["steps"] >= 2
    assert all(split[key] >= 0 for key in ("verify", "draft", "host"))
    assert rows["ar"]["step_split_ms"]["steps"] == 8 and rows["ar"]["step_split_ms"]["verify"] > 0
    assert rows["ar"]["num_prompts"] == 2
    short = bench.run_bench(BenchSpec(methods=["ar"], ks=[2], prompts="mt-bench", num_prompts=2, max_new_tokens=2,
                                      engine="fast", time_budget_s=0),
                            target=target, progress=False)
    assert short["results"][0]["num_prompts"] == 1                         # the first round always runs
    with pytest.raises(RuntimeError, match="boom"):
        bench.run_bench(BenchSpec(methods=["eagle"], ks=[2], prompts="mt-bench", num_prompts=1, max_new_tokens=2,
                                  engine="fast"),
                        target=target, progress=False)
