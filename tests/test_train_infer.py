"""The training graph and the inference graph are the same function.

The drafter's logits for element (a, d) computed by the training loss (one pass over every anchor
with the P-EAGLE mask, target features from a batched no-cache pass) must equal the logits the
engine's drafting computes at anchor ``a`` (target features from the KV-cached forward, drafter
context in its own cache, mask slots appended). A mismatch here (a shifted tap, token, position or
mask) would make a well-trained drafter accept little in the engine and in vLLM.
"""
import pytest
import torch

from peagle_lab.checkpoint import load_drafter
from peagle_lab.drafters_registry import shipped
from peagle_lab.engines.teaching import generate
from peagle_lab.train.cod import Elements
from peagle_lab.train.data import Sample
from peagle_lab.train.features import target_batch
from peagle_lab.train.loss import element_outputs

K = 5


@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_training_logits_equal_engine_logits(target, mtbench_ids, method):
    drafter = load_drafter(shipped()[f"{method}-smollm2"], target)
    prompt = mtbench_ids[0]
    reply = generate(target, prompt, method="ar", max_new_tokens=24).tokens
    full = torch.tensor(prompt + list(reply))
    n = full.numel()
    draft_ids = (torch.arange(drafter.cfg.draft_vocab_size) + drafter.d2t).sort().values
    data = target_batch(target, [Sample(full, len(prompt))], draft_ids, 4096)
    for a in (len(prompt) - 1, n - K - 3):                   # the first reply token's anchor, and a later one
        depths = range(K) if method == "peagle" else range(1)
        anchors = torch.cat([torch.arange(n - 1), torch.full((len(depths) - 1,), a)])
        el = Elements(anchors, torch.cat([torch.zeros(n - 1, dtype=torch.long), torch.arange(1, len(depths))]))
        with torch.no_grad():
            train_logits = element_outputs(drafter, el, data, method, "dense")
        want = torch.cat([train_logits[a: a + 1], train_logits[n - 1:]])  # (a, 0), then (a, 1..K-1)

        # the engine's way: KV-cached target features, drafter context slots 0..a, then K-1 mask slots
        with torch.no_grad():
            out = target.forward(full[: a + 1], target.new_cache())
            ctx_tokens, ctx_aux = full[1: a + 2], out.aux[0]
            hidden = drafter.project(ctx_aux.clone())
            ids = ctx_tokens
            if method == "peagle":
                ids = torch.cat([ids, torch.full((K - 1,), drafter.cfg.mask_token_id)])
                hidden = torch.cat([hidden, drafter.projected_mask_hidden().expand(K - 1, -1)])
            _, logits = drafter(ids[None], hidden[None], drafter.new_cache())
        got = logits[0, a:]
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
        assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.slow                     # minutes on a 2-core CPU: `make test` runs it, `make test-fast` does not
@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_replay_gives_the_engines_steps(target, mtbench_ids, method):
    """Replaying the greedy reply through the training graph predicts every step of the engine."""
    from peagle_lab.train.replay import replay_acceptance

    drafter = load_drafter(shipped()[f"{method}-smollm2"], target)
    budget, k = 40, 4
    total = None
    eos = tuple(target.eos_token_ids)
    prompts = [mtbench_ids[0], mtbench_ids[1], target.chat_ids("Reply with one word: yes or no?")]
    ends = []
    for prompt in prompts:
        reply = generate(target, prompt, method="ar", max_new_tokens=budget + k + 1, stop_at_eos=False).tokens
        spec = generate(target, prompt, method=method, drafter=drafter, k=k, max_new_tokens=budget)
        assert spec.tokens == generate(target, prompt, method="ar", max_new_tokens=budget).tokens
        rep = replay_acceptance(target, drafter, prompt, reply, method=method, k=k, max_new_tokens=budget, eos=eos)
        assert rep.steps[0] == [s.accepted for s in spec.steps]
        assert rep.stats.accepted_per_pos == spec.acceptance.accepted_per_pos
        total = rep if total is None else total.merge(rep)
        ends.append(len(spec.tokens))
    assert total.stats.num_drafts == sum(len(s) for s in total.steps)
    assert min(ends) < budget            # the short answer ends at EOS inside the budget
    assert 0.0 < total.coverage <= 1.0 and total.reply_tokens == sum(ends)
    # position 0 over the visited anchors is exactly the engine's position-0 acceptance
    assert total.hits_visited[0].item() == total.stats.accepted_per_pos[0]
    assert total.count_visited[0].item() == total.stats.num_drafts


def test_replay_refuses_a_short_reply(target, mtbench_ids):
    from peagle_lab.train.replay import replay_acceptance

    drafter = load_drafter(shipped()["peagle-smollm2"], target)
    with pytest.raises(ValueError, match="K\\+1 tokens more"):
        replay_acceptance(target, drafter, mtbench_ids[0], [1, 2, 3, 4], method="peagle", k=5, max_new_tokens=4)
