"""Batched speculative decoding: a batch decodes exactly what each request decodes alone (= AR).

Requests in a batch accept different numbers of drafts per step and finish at different times,
so these tests also pin the ragged target cache (one forward, per-row cache lengths) and the
drafter's pooled cache against per-request runs.
"""
import json

import pytest
import torch

from helpers import random_drafter
from peagle_lab.engines import batched as batch_engine
from peagle_lab.engines.batch_cache import RaggedCache
from peagle_lab.engines.batched import generate_batch
from peagle_lab.engines.teaching import generate
from peagle_lab.engines.verify import verify_greedy, verify_greedy_batch

BUDGETS = [10, 4, 7]                      # different max_new_tokens: requests leave the batch at different steps


def _prompts(mtbench_ids):
    ids = list(mtbench_ids[:3])
    assert len({len(x) for x in ids}) == 3, "prompts of different lengths"
    return ids


@pytest.fixture(scope="module")
def ar_refs(target, mtbench_ids):
    return [target.generate(ids, max(BUDGETS)).tokens for ids in _prompts(mtbench_ids)]


@pytest.fixture(scope="module")
def drafters(target):
    from peagle_lab.drafters_registry import drafter_for

    return {("eagle", "random"): random_drafter(target, parallel=False, num_layers=1, draft_vocab_size=8192, seed=1),
            ("peagle", "random"): random_drafter(target, parallel=True, num_layers=2, draft_vocab_size=8192, seed=2),
            ("eagle", "shipped"): drafter_for(target, "eagle")[0],
            ("peagle", "shipped"): drafter_for(target, "peagle")[0]}


def test_batched_verify_forward_equals_per_request_forwards(target, mtbench_ids):
    """One forward over rows with different cache lengths == each row's own forward (logits and taps)."""
    prompts = _prompts(mtbench_ids)
    g = torch.Generator().manual_seed(0)
    rows = RaggedCache(target, len(prompts))
    alone = [target.new_cache() for _ in prompts]
    lens = torch.tensor([len(p) for p in prompts])
    width = int(lens.max())
    padded = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    feed, keeps = [padded], [lens]
    for keep in ([1, 4, 2], [3, 1, 4]):                   # then two verify passes of 4 tokens, ragged accepts
        feed.append(torch.randint(0, target.vocab_size, (len(prompts), 4), generator=g))
        keeps.append(torch.tensor(keep))
    for step, (ids, keep) in enumerate(zip(feed, keeps)):
        out = rows.forward(ids)
        for r in range(len(prompts)):
            n_real = int(lens[r]) if step == 0 else ids.shape[1]
            ref = target.forward(ids[r, :n_real], alone[r])
            torch.testing.assert_close(out.logits[r, :n_real], ref.logits[0], atol=2e-4, rtol=1e-4)
            torch.testing.assert_close(out.aux[r, :n_real], ref.aux[0], atol=2e-4, rtol=1e-4)
            target.rollback(alone[r], target.cache_length(alone[r]) - n_real + int(keep[r]))
        rows.commit(keep)
        assert rows.lengths.tolist() == [target.cache_length(c) for c in alone]
    assert rows.physical == int(rows.lengths.max())       # stale tail beyond the longest row is cut


@pytest.mark.parametrize("which", ["random", "shipped"])
@pytest.mark.parametrize("k", [pytest.param(1, marks=pytest.mark.slow), 3,     # K 1 and 5: make test
                               pytest.param(5, marks=pytest.mark.slow)])
@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_batch_equals_each_request_alone_and_ar(target, mtbench_ids, ar_refs, drafters, method, k, which):
    prompts, drafter = _prompts(mtbench_ids), drafters[(method, which)]
    batch = generate_batch(target, prompts, method=method, drafter=drafter, k=k, max_new_tokens=BUDGETS)
    for r, (ids, n) in enumerate(zip(prompts, BUDGETS)):
        got = batch.results[r]
        alone = generate(target, ids, method=method, drafter=drafter, k=k, max_new_tokens=n)
        assert got.tokens == ar_refs[r][:n] == alone.tokens, r
        # same drafts and acceptance at every step: the pooled, packed drafter == the request alone
        assert [(s.drafts, s.accepted) for s in got.steps] == [(s.drafts, s.accepted) for s in alone.steps], r
        assert got.acceptance.to_dict() == alone.acceptance.to_dict()
    assert len(batch.accepted[0]) == 3 and len(batch.accepted[-1]) < 3     # requests left the batch early
    assert batch.new_tokens == sum(BUDGETS)


def test_batched_ar_equals_ar(target, mtbench_ids, ar_refs):
    out = generate_batch(target, _prompts(mtbench_ids), method="ar", max_new_tokens=BUDGETS)
    assert [r.tokens for r in out.results] == [ref[:n] for ref, n in zip(ar_refs, BUDGETS)]


@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_batch_with_ragged_acceptance(target, mtbench_ids, ar_refs, drafters, method, monkeypatch):
    """An oracle-assisted drafter makes rows accept different counts (0..K) in the same step."""
    prompts, k = _prompts(mtbench_ids), 4
    real = batch_engine.POOLED_DRAFTERS[method]
    rng = torch.Generator().manual_seed(0)

    def assisted(drafter, pool, ctx, k):
        real(drafter, pool, ctx, k)                                     # the real pool changes happen
        qsl = ctx.query_start_loc.long()
        length = ctx.positions[qsl[:-1]] + (ctx.query_end_loc.long() - qsl[:-1]) + 1   # target cache length per row
        rows = []
        for r, L in zip(ctx.req.tolist(), length.tolist()):
            g = L - len(prompts[r]) + 1                                 # tokens generated so far
            truth = (ar_refs[r] + [0] * 16)[g: g + k]
            cut = int(torch.randint(0, k + 1, (1,), generator=rng))
            rows.append(truth[:cut] + [(t + 1) % target.vocab_size for t in truth[cut:]])
        return torch.tensor(rows)

    monkeypatch.setitem(batch_engine.POOLED_DRAFTERS, method, assisted)
    out = generate_batch(target, prompts, method=method, drafter=drafters[(method, "random")], k=k,
                         max_new_tokens=max(BUDGETS))
    assert [r.tokens for r in out.results] == ar_refs
    assert any(len(set(step.values())) > 1 for step in out.accepted), out.accepted   # ragged steps happened
    assert max(max(s.values()) for s in out.accepted) >= 3


def test_eos_ends_one_request_early(target, mtbench_ids, ar_refs, drafters, monkeypatch):
    """Treat a token of request 1's reply as EOS: that request stops there, the others go on."""
    prompts = _prompts(mtbench_ids)
    stop = ar_refs[1][2]
    cut = [ref[: ref.index(stop) + 1] if stop in ref[:max(BUDGETS)] else ref for ref in ar_refs]
    assert len(cut[1]) == 3 and max(len(c) for c in cut) > 3
    monkeypatch.setattr(target, "eos_token_ids", (stop,))
    out = generate_batch(target, prompts, method="peagle", drafter=drafters[("peagle", "shipped")], k=3,
                         max_new_tokens=max(BUDGETS))
    assert [r.tokens for r in out.results] == cut


def test_batch_errors(target, mtbench_ids, drafters):
    prompts = _prompts(mtbench_ids)
    with pytest.raises(ValueError, match="use batch size 1"):
        generate_batch(target, prompts, method="peagle", drafter=drafters[("peagle", "random")], temperature=0.7)
    with pytest.raises(ValueError, match="one such int per prompt"):
        generate_batch(target, prompts, method="ar", max_new_tokens=[4, 4])
    with pytest.raises(ValueError, match="P-EAGLE drafter"):
        generate_batch(target, prompts, method="peagle", drafter=drafters[("eagle", "random")], max_new_tokens=2)
    with pytest.raises(ValueError, match="needs a drafter"):
        generate_batch(target, prompts, method="eagle")


def test_bench_batch_size_rows(target):
    """`bench --batch-size 1,2`: one row per (method, K, batch size), all outputs identical to AR."""
    from peagle_lab.bench import BenchSpec, run_bench

    out = run_bench(BenchSpec(methods=["ar", "peagle"], ks=[2], prompts="mt-bench", num_prompts=3, max_new_tokens=3,
                              batch_sizes=[1, 2]),
                    target=target, progress=False)
    rows = {(x["method"], x["k"], x["batch_size"]): x for x in out["results"]}
    assert set(rows) == {("ar", None, 1), ("peagle", 2, 1), ("ar", None, 2), ("peagle", 2, 2)}
    assert rows[("ar", None, 1)]["identical_to_ar"] is None                  # the reference itself
    assert all(x["identical_to_ar"] is True for key, x in rows.items() if key != ("ar", None, 1))
    assert {x["new_tokens"] for x in rows.values()} == {9} and out["settings"]["batch_size"] == [1, 2]
    single = "fast" if target.device.type == "cuda" else "teaching"        # --engine auto: fast on CUDA only
    assert {key: x["engine"] for key, x in rows.items()} == {
        ("ar", None, 1): single, ("peagle", 2, 1): single,
        ("ar", None, 2): "teaching-batched", ("peagle", 2, 2): "teaching-batched"}
    with pytest.raises(ValueError, match="--batch-size 1"):
        run_bench(BenchSpec(methods=["hf"], ks=[2], prompts="mt-bench", num_prompts=2, max_new_tokens=2,
                            batch_sizes=[2]),
                  target=target)
    with pytest.raises(ValueError, match="greedy only"):
        run_bench(BenchSpec(methods=["ar"], ks=[2], prompts="mt-bench", num_prompts=2, max_new_tokens=2,
                            batch_sizes=[1, 2], temperature=0.5),
                  target=target)


def test_bench_cli_batch_rows_beside_the_fast_engine(target, tmp_path, capsys, monkeypatch):
    """`bench --engine fast --batch-size 1,3` (what --engine auto does on CUDA), small, on the CPU: batch-1 rows
    run the fast engine, larger batches the batched teaching engine, and the rows say which (on the GPU too, with
    PEAGLE_TEST_DEVICE=cuda)."""
    from peagle_lab.cli import main
    from peagle_lab.target import Target

    asked = []
    monkeypatch.setattr(Target, "load", classmethod(lambda cls, name=None, **kw: asked.append(kw) or target))
    out = tmp_path / "bench.json"
    assert main(["bench", "--methods", "ar,peagle", "--k", "2", "--num-prompts", "2", "--spread",
                 "--max-new-tokens", "3", "--batch-size", "1,3", "--engine", "fast", "--device", target.device.type,
                 "--json", str(out)]) == 0
    assert asked == [{"dtype": torch.float32, "device": target.device.type}]
    assert "decodes 2 at once" in capsys.readouterr().err                  # batch 3 > 2 prompts: said, not hidden
    result = json.loads(out.read_text())
    rows = {(x["method"], x["batch_size"]): x for x in result["results"]}
    assert set(rows) == {(m, b) for m in ("ar", "peagle") for b in (1, 3)}
    for (method, b), row in rows.items():
        assert row["engine"] == ("fast" if b == 1 else "teaching-batched"), (method, b)
        assert row["new_tokens"] == 6 and row["num_prompts"] == 2
        if (method, b) != ("ar", 1):
            assert row["identical_to_ar"] is True, (method, b)
        if method == "peagle":
            assert 1 <= row["acceptance_length"] <= 3 and len(row["acceptance_per_position"]) == 2
    assert result["settings"]["device"] == str(target.device) and result["settings"]["batch_size"] == [1, 3]


def test_verify_greedy_batch_equals_verify_greedy_per_row():
    """The batched engine's vectorised rule == verify_greedy row by row (ragged acceptance, K = 0 for AR)."""
    g = torch.Generator().manual_seed(0)
    for k in (0, 1, 3, 6):
        logits = torch.randn(9, k + 1, 11, generator=g)                              # (R, K+1, V)
        drafts = logits[:, :k].argmax(-1)                                            # all accepted ...
        for r in range(9):                                                           # ... until row r's cut
            cut = r % (k + 1)
            if cut < k:
                drafts[r, cut] = (drafts[r, cut] + 1 + int(torch.randint(0, 9, (1,), generator=g))) % 11
        n, nxt = verify_greedy_batch(drafts, logits)
        assert [(int(a), int(b)) for a, b in zip(n, nxt)] == [verify_greedy(drafts[r], logits[r]) for r in range(9)]


cuda_only = pytest.mark.skipif(not torch.cuda.is_available(),
                               reason="needs a CUDA device: the compiled Triton kernel (on the CPU the kernel runs in "
                                      "Triton's interpreter, tests/test_kernels.py)")


@pytest.fixture(scope="module")
def cuda_target(target):
    """The session's target when PEAGLE_TEST_DEVICE=cuda put it there, else a float32 copy loaded on CUDA."""
    from peagle_lab.target import Target

    return target if target.device.type == "cuda" else Target.load(device="cuda")


@cuda_only
@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_cuda_batch_runs_the_compiled_kernel_and_equals_each_request_alone(cuda_target, mtbench_ids, method,
                                                                           monkeypatch):
    """On CUDA the batched engine lays out the drafter's input with the compiled kernel (never the interpreter),
    and every request's greedy output, drafts and acceptance equal what it gets alone (= AR)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from peagle_lab.drafters_registry import drafter_for
    from peagle_lab.kernels import triton_kernel

    launched = []
    real = triton_kernel.compiled

    def spy(interpret):
        fn = real(interpret)
        launched.append((interpret, fn))
        return fn

    monkeypatch.setattr(triton_kernel, "compiled", spy)
    target, prompts, k = cuda_target, _prompts(mtbench_ids), 3
    drafter = drafter_for(target, method)[0]
    assert drafter.fc.weight.is_cuda
    batch = generate_batch(target, prompts, method=method, drafter=drafter, k=k, max_new_tokens=BUDGETS)
    assert launched, "the batched engine never launched the Triton kernel on CUDA"
    assert all(interpret is False and isinstance(fn, JITFunction) and not isinstance(fn, InterpretedFunction)
               for interpret, fn in launched)
    for r, (ids, n) in enumerate(zip(prompts, BUDGETS)):
        alone = generate(target, ids, method=method, drafter=drafter, k=k, max_new_tokens=n)
        ar = target.generate(ids, n).tokens
        got = batch.results[r]
        assert got.tokens == alone.tokens == ar, r
        assert [(s.drafts, s.accepted) for s in got.steps] == [(s.drafts, s.accepted) for s in alone.steps], r
        assert got.acceptance.to_dict() == alone.acceptance.to_dict()


@cuda_only
def test_cuda_bench_batch_rows(cuda_target):
    """`bench --device cuda --batch-size 1,2,3`: batch 1 on the fast engine, batches on the batched teaching engine."""
    from peagle_lab.bench import BenchSpec, run_bench

    out = run_bench(BenchSpec(methods=["ar", "eagle", "peagle"], ks=[3], prompts="mt-bench", num_prompts=3,
                              spread=True, max_new_tokens=16, batch_sizes=[1, 2, 3]),
                    target=cuda_target, progress=False)
    for row in out["results"]:
        assert row["engine"] == ("fast" if row["batch_size"] == 1 else "teaching-batched"), row
        assert row["new_tokens"] > 0 and row["tokens_per_s"] > 0
        if (row["method"], row["batch_size"]) != ("ar", 1):
            assert row["identical_to_ar"] is True, row
    assert out["settings"]["device"].startswith("cuda") and out["settings"]["engine"] == "fast"


def test_batched_decoding_runs_sdpa_without_cudnn(target, mtbench_ids, drafters, monkeypatch):
    """Every target pass of generate_batch (prefill and each verify) runs inside sdpa_without_cudnn(target's
    device): on CUDA a batched step's attention shapes change every step, and cuDNN's per-shape plan building
    made a step 2-4x slower on an H200. The output stays AR's."""
    import contextlib

    entered, inside, passes = [], [False], []

    @contextlib.contextmanager
    def recording(device, skip=True):
        entered.append(str(device))
        inside[0] = True
        try:
            yield
        finally:
            inside[0] = False

    forward = target.forward

    def checked_forward(*args, **kwargs):
        passes.append(inside[0])
        return forward(*args, **kwargs)

    monkeypatch.setattr(batch_engine, "sdpa_without_cudnn", recording)
    monkeypatch.setattr(target, "forward", checked_forward)
    prompts = _prompts(mtbench_ids)
    out = generate_batch(target, prompts, method="peagle", drafter=drafters[("peagle", "random")], k=2,
                         max_new_tokens=4)
    assert entered == [str(target.device)] and len(passes) >= 2 and all(passes)
    monkeypatch.undo()
    assert [r.tokens for r in out.results] == [target.generate(p, 4).tokens for p in prompts]
