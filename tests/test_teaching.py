"""Lossless-ness oracles (peagle_lab.engines.teaching): speculative greedy output equals AR output token for token."""
import pytest
import torch

from helpers import random_drafter
from peagle_lab.engines import drafting, teaching
from peagle_lab.engines.teaching import generate


def _first_divergence(target, prompt, a, b):
    """Logit gap of the AR target at the first token where two outputs differ (for the message)."""
    i = next(i for i, (x, y) in enumerate(zip(a + [None], b + [None])) if x != y)
    ctx = torch.tensor(prompt + a[:i])
    logits = target.forward(ctx, target.new_cache(), aux=False).logits[0, -1]
    top = logits.topk(2)
    gap = float(top.values[0] - top.values[1])
    return f"diverged at token {i}: AR {a[i:i+1]} vs spec {b[i:i+1]}; AR top-2 logit gap {gap:.3g}"


@pytest.fixture(scope="module")
def drafters(target):
    return {"eagle": random_drafter(target, parallel=False, num_layers=1, draft_vocab_size=8192, seed=1),
            "peagle": random_drafter(target, parallel=True, num_layers=2, draft_vocab_size=8192, seed=2)}


@pytest.fixture(scope="module")
def references(target, mtbench_ids):
    return [target.generate(ids, 40).tokens for ids in mtbench_ids[:2]]


@pytest.mark.parametrize("method", ["eagle", "peagle"])
@pytest.mark.parametrize("k", [k if k in (1, 5) else pytest.param(k, marks=pytest.mark.slow)   # the rest: make test
                               for k in range(1, 9)])
def test_greedy_speculative_equals_ar(target, mtbench_ids, references, drafters, method, k):
    for ids, ref in zip(mtbench_ids[:2], references):
        out = generate(target, ids, method=method, drafter=drafters[method], k=k, max_new_tokens=40)
        assert out.tokens == ref, _first_divergence(target, ids, ref, out.tokens)
        st = out.acceptance
        assert st.num_drafts == len(out.steps) and len(st.per_position) == k


@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_greedy_equal_with_partial_acceptance(target, mtbench_ids, references, drafters, method, monkeypatch):
    """Random drafters accept ~nothing; an oracle-assisted drafter makes every accept count 0..K occur."""
    ids, ref = mtbench_ids[0], references[0]
    real = drafting.DRAFTERS[method]
    rng = torch.Generator().manual_seed(0)

    def assisted(drafter, cache, ctx_tokens, ctx_aux, k, temperature, gen):
        known = cache.length + ctx_tokens.shape[0] + 1         # prompt + generated so far
        real(drafter, cache, ctx_tokens, ctx_aux, k, temperature, gen)          # real drafter state changes
        g = known - len(ids)
        truth = (ref + [0] * 64)[g: g + k]
        cut = int(torch.randint(0, k + 1, (1,), generator=rng))
        tokens = torch.tensor(truth[:cut] + [(t + 1) % target.vocab_size for t in truth[cut:]], device=target.device)
        return drafting.Draft(tokens, None)

    monkeypatch.setitem(teaching.DRAFTERS, method, assisted)
    out = generate(target, ids, method=method, drafter=drafters[method], k=5, max_new_tokens=40)
    assert out.tokens == ref, _first_divergence(target, ids, ref, out.tokens)
    counts = {s.accepted for s in out.steps}
    assert len(counts) >= 3 and max(counts) >= 3, counts
    assert out.acceptance.acceptance_length > 2.0


def test_stats_definitions():
    from peagle_lab.stats import AcceptanceStats

    s = AcceptanceStats(3)
    for n in (3, 1, 0, 2):
        s.record(n)
    assert s.num_drafts == 4 and s.num_draft_tokens == 12 and s.num_accepted_tokens == 6
    assert s.per_position == [0.75, 0.5, 0.25]
    assert s.acceptance_length == 1 + 6 / 4
    assert s.conditional == [0.75, 2 / 3, 0.5]
    with pytest.raises(ValueError):
        s.record(4)


def test_drafter_cache_rollback_equals_never_seen(target, drafters):
    d = drafters["peagle"]
    H3 = 3 * target.hidden_size
    torch.manual_seed(0)
    ids, aux = torch.randint(0, 1000, (1, 12)), torch.randn(1, 12, H3)
    new_ids, new_aux = torch.randint(0, 1000, (1, 3)), torch.randn(1, 3, H3)
    ids, aux, new_ids, new_aux = (t.to(target.device) for t in (ids, aux, new_ids, new_aux))
    with torch.inference_mode():
        c1 = d.new_cache()
        d(ids[:, :8], d.project(aux[:, :8]), c1)
        d(ids[:, 8:], d.project(aux[:, 8:]), c1)          # speculative slots ...
        c1.crop(8)                                         # ... rolled back
        a, la = d(new_ids, d.project(new_aux), c1)
        c2 = d.new_cache()
        d(ids[:, :8], d.project(aux[:, :8]), c2)
        b, lb = d(new_ids, d.project(new_aux), c2)
        full, lf = d(torch.cat([ids[:, :8], new_ids], 1), d.project(torch.cat([aux[:, :8], new_aux], 1)), None)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert torch.allclose(lf[:, 8:], la, atol=1e-5)       # cached == recomputed from scratch


def test_method_errors(target, mtbench_ids, drafters):
    with pytest.raises(ValueError, match="unknown method"):
        generate(target, mtbench_ids[0], method="medusa")
    with pytest.raises(ValueError, match="needs a drafter"):
        generate(target, mtbench_ids[0], method="eagle")
    with pytest.raises(ValueError, match="P-EAGLE drafter"):
        generate(target, mtbench_ids[0], method="peagle", drafter=drafters["eagle"], max_new_tokens=4)


@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_shipped_drafters_are_lossless_and_accepted(target, mtbench_ids, references, method):
    from peagle_lab.drafters_registry import drafter_for, shipped

    assert f"{method}-smollm2" in shipped()
    drafter, where = drafter_for(target, method)
    assert where.startswith("shipped")
    assert drafter.embed_tokens is None                       # shares the target's embedding (small checkpoint)
    out = generate(target, mtbench_ids[0], method=method, drafter=drafter, k=7, max_new_tokens=40)
    assert out.tokens == references[0], _first_divergence(target, mtbench_ids[0], references[0], out.tokens)
    assert out.acceptance.num_accepted_tokens > 0             # a trained drafter is accepted sometimes


@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_generate_command_drafts_with_the_shipped_drafter_by_default(method, capsys):
    """`peagle-lab generate PROMPT --method peagle` with the embedded target and no --drafter: the shipped drafter
    drafts (the stderr line names it and an AL), and the reply is plain decoding's, word for word."""
    from peagle_lab.cli import main

    argv = ["generate", "Name three primary colours.", "--max-new-tokens", "16", "--device", "cpu"]
    assert main([*argv, "--method", "ar"]) == 0
    plain = capsys.readouterr().out
    assert main([*argv, "--method", method, "--k", "3"]) == 0
    spoken = capsys.readouterr()
    assert spoken.out == plain and plain.strip()
    assert f"{method}-smollm2" in spoken.err and "AL " in spoken.err
