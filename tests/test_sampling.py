"""Rejection sampling is lossless: speculative samples follow the target's distribution exactly.

On a tiny random target (vocabulary 8) the exact distribution of a 3-token continuation is
computed by enumeration; thousands of seeded speculative generations must match it (chi-square),
for both drafting methods. The same test must catch a verifier that skips rejection.
"""
import itertools

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from helpers import random_drafter, tiny_target
from peagle_lab.engines import teaching, verify
from peagle_lab.engines.teaching import generate
from peagle_lab.sampling import probs_from_logits, sample

PROMPT = [1, 5, 2]
N_NEW = 3
TEMPERATURE = 1.0


@pytest.fixture(scope="module")
def tiny():
    return tiny_target(vocab=8, seed=0, logit_scale=0.6)


def exact_distribution(target) -> dict[tuple, float]:
    out = {}
    for seq in itertools.product(range(target.vocab_size), repeat=N_NEW):
        ids = torch.tensor(PROMPT + list(seq[:-1]))
        logits = target.forward(ids, target.new_cache(), aux=False).logits[0, len(PROMPT) - 1:]
        p = probs_from_logits(logits, TEMPERATURE)
        out[seq] = float(np.prod([p[i, t] for i, t in enumerate(seq)]))
    return out


def chi2_pvalue(target, drafter, method, n=3000, k=3):
    exact = exact_distribution(target)
    counts = dict.fromkeys(exact, 0)
    accepted = drafts = 0
    for seed in range(n):
        out = generate(target, PROMPT, method=method, drafter=drafter, k=k, max_new_tokens=N_NEW,
                       temperature=TEMPERATURE, seed=seed, stop_at_eos=False)
        counts[tuple(out.tokens)] += 1
        accepted += out.acceptance.num_accepted_tokens
        drafts += out.acceptance.num_drafts
    # merge rare outcomes into one bin so every expected count is >= 5
    obs, exp, rest_o, rest_e = [], [], 0, 0.0
    for seq, p in exact.items():
        if p * n >= 5:
            obs.append(counts[seq]); exp.append(p * n)
        else:
            rest_o += counts[seq]; rest_e += p * n
    obs.append(rest_o); exp.append(rest_e)
    return chisquare(obs, np.array(exp) * sum(obs) / sum(exp)).pvalue, accepted / drafts


@pytest.mark.slow                     # minutes on a 2-core CPU: `make test` runs it, `make test-fast` does not
@pytest.mark.parametrize("method", ["eagle", "peagle"])
def test_speculative_sampling_matches_target(tiny, method):
    drafter = random_drafter(tiny, parallel=method == "peagle", num_layers=2, seed=5, scale=60.0)
    pvalue, accepted_per_step = chi2_pvalue(tiny, drafter, method)
    assert pvalue > 1e-3
    # drafts are accepted and rejected often enough for both branches of the verifier to matter
    assert 0.1 < accepted_per_step < 2.5, accepted_per_step


def test_wrong_verifier_is_caught(tiny, monkeypatch):
    """A verifier that accepts every draft emits the drafter's distribution, not the target's."""
    def accept_all(draft_tokens, draft_probs, target_probs, generator=None):
        k = draft_tokens.shape[0]
        return k, int(torch.multinomial(target_probs[k], 1, generator=generator))

    monkeypatch.setattr(teaching, "verify_sampling", accept_all)
    drafter = random_drafter(tiny, parallel=True, num_layers=2, seed=5, scale=60.0)
    assert chi2_pvalue(tiny, drafter, "peagle", n=1500)[0] < 1e-6


def test_residual_resampling_on_a_known_case():
    """p = (0.5, 0.5), q puts all mass on token 0: accept 0 half the time, else emit 1."""
    p = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    q = torch.tensor([[1.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    firsts = [verify.verify_sampling(torch.tensor([0]), q, p, g) for _ in range(4000)]
    accepted = sum(n == 1 for n, _ in firsts)
    assert abs(accepted / 4000 - 0.5) < 0.03
    assert all(tok == 1 for n, tok in firsts if n == 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run with PEAGLE_TEST_DEVICE=cuda on one)")
def test_a_seeded_cpu_generator_draws_the_same_tokens_for_gpu_probabilities():
    """The engines seed a CPU generator; probabilities on a GPU are drawn on the CPU and come back."""
    probs = torch.softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(0)), -1)
    on_cpu = sample(probs, torch.Generator().manual_seed(7))
    on_gpu = sample(probs.cuda(), torch.Generator().manual_seed(7))
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)
