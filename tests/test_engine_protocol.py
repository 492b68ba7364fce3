"""peagle_lab.engines.protocol and .request: every engine behind one ``generate``, on one request state.

Oracle: greedy output is AR's token for token whatever the engine and method, and the acceptance each engine
records for a request is the same (the same drafts are accepted in the same steps).
"""
import pytest
import torch

from helpers import random_drafter, tiny_target
from peagle_lab.engines.protocol import ENGINES, make_engine
from peagle_lab.engines.request import Request


@pytest.fixture(scope="module")
def setup():
    target = tiny_target(vocab=50, head_dim=16, logit_scale=4.0)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 50, (n,), generator=g).tolist() for n in (5, 9, 3)]
    drafters = {"eagle": random_drafter(target, parallel=False, draft_vocab_size=20, seed=1),
                "peagle": random_drafter(target, parallel=True, num_layers=2, draft_vocab_size=20, seed=2)}
    return target, prompts, drafters


@pytest.mark.parametrize("method", ["ar", "eagle", "peagle"])
def test_every_engine_gives_ar_output_and_the_same_acceptance(setup, method):
    target, prompts, drafters = setup
    ar = make_engine("teaching", target, "ar").generate(prompts, 12)
    runs = {name: make_engine(name, target, method, drafters.get(method), k=3).generate(prompts, 12)
            for name in ENGINES}
    for name, out in runs.items():
        assert [r.tokens for r in out.results] == [r.tokens for r in ar.results], name
        assert out.new_tokens == sum(len(r.tokens) for r in out.results) and out.seconds > 0
    per_engine = [[(r.acceptance.num_drafts, r.acceptance.accepted_per_pos) if r.acceptance else None
                   for r in out.results] for out in runs.values()]
    assert all(p == per_engine[0] for p in per_engine), "the same steps accepted the same drafts"
    steps = [[[(s.drafts, s.accepted, s.next_token) for s in r.steps] for r in out.results] for out in runs.values()]
    assert all(s == steps[0] for s in steps)


def test_an_unknown_engine_names_the_choices(setup):
    with pytest.raises(ValueError, match="choose from teaching, batched, fast"):
        make_engine("turbo", setup[0], "ar")


def test_a_request_cuts_at_its_budget_and_after_eos():
    req = Request(prompt=[1], budget=5, eos=(9,), k=2)
    assert not req.append([], 0, 4)                                   # the prefill's token
    assert not req.append([3, 9], 1, 7) and req.tokens == [4, 3, 7]   # draft 9 rejected: the target said 7
    assert req.append([9, 5], 2, 6) and req.tokens == [4, 3, 7, 9]    # EOS accepted: done, nothing after it
    assert req.stats.num_drafts == 2 and req.stats.accepted_per_pos == [2, 1] and req.seconds > 0
    ar = Request(prompt=[1], budget=2)
    assert not ar.append([], 0, 4) and ar.append([], 0, 5) and ar.stats is None and ar.steps == []
