"""Batched speculative decoding: a batch decodes exactly what each request decodes alone (= AR).

Requests in a batch accept different numbers of drafts per step and finish at different times,
so these tests also pin the ragged target cache (one forward, per-row cache lengths) and the
drafter's pooled cache against per-request runs.
"""
import pytest
import torch

from helpers import random_drafter
from peagle_lab import batch_engine
from peagle_lab.batch_cache import RaggedCache
from peagle_lab.batch_engine import generate_batch
from peagle_lab.engine import generate

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
@pytest.mark.parametrize("k", [1, 3, 5])
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
    from peagle_lab.bench import run_bench

    out = run_bench(methods=["ar", "peagle"], ks=[2], prompts="mt-bench", num_prompts=3, max_new_tokens=3,
                    target=target, batch_sizes=[1, 2], progress=False)
    rows = {(x["method"], x["k"], x["batch_size"]): x for x in out["results"]}
    assert set(rows) == {("ar", None, 1), ("peagle", 2, 1), ("ar", None, 2), ("peagle", 2, 2)}
    assert rows[("ar", None, 1)]["identical_to_ar"] is None                  # the reference itself
    assert all(x["identical_to_ar"] is True for key, x in rows.items() if key != ("ar", None, 1))
    assert {x["new_tokens"] for x in rows.values()} == {9} and out["settings"]["batch_size"] == [1, 2]
    with pytest.raises(SystemExit, match="--batch-size 1"):
        run_bench(methods=["hf"], ks=[2], prompts="mt-bench", num_prompts=2, max_new_tokens=2, target=target,
                  batch_sizes=[2])
    with pytest.raises(SystemExit, match="greedy only"):
        run_bench(methods=["ar"], ks=[2], prompts="mt-bench", num_prompts=2, max_new_tokens=2, target=target,
                  batch_sizes=[1, 2], temperature=0.5)
