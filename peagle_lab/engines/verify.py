"""Verification: accept a prefix of the drafts so the output is exactly what the target would say.

Notation: ``p_i`` is the target's distribution after its last token and drafts ``x_1..x_i``;
``q_i`` the distribution draft ``x_{i+1}`` was sampled from. The target scores all K+1
positions in one forward, so ``p`` has K+1 rows.

* Greedy (T = 0): accept while ``x_{i+1} == argmax p_i``; the first mismatch is replaced by the
  target's argmax, and if all K match, ``argmax p_K`` is one token more (vLLM's *bonus* token).
  Either way the step ends with the target's own token, ``next_token``.
* Sampling (T > 0): accept ``x`` with probability ``min(1, p(x)/q(x))``; on rejection draw
  from the residual ``max(0, p - q)`` renormalised. The emitted token is distributed exactly
  as ``p`` whatever ``q`` is (Leviathan et al. 2023; Chen et al. 2023).
"""
from __future__ import annotations

import torch

from ..sampling import sample


def accepted_prefix(drafts: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """The greedy accept rule: ``drafts (..., K)``, the target's choices ``choice (..., K+1)`` -> ``n (...)``,
    the number of leading drafts equal to the target's choice at their position (on their device, no sync).
    The one copy all engines and the offline replay use.

    The target's token is then ``choice[..., n]``: its correction, or the bonus token when all K matched.
    """
    return (drafts == choice[..., :-1]).long().cumprod(-1).sum(-1)


def verify_greedy(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> tuple[int, int]:
    """``draft_tokens (K,)``, ``target_logits (K+1, V)`` -> (accepted count n, next token)."""
    choice = target_logits.argmax(-1)                                       # (K+1,)
    n = int(accepted_prefix(draft_tokens.to(choice.device), choice))
    return n, int(choice[n])


def verify_greedy_batch(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rule for R requests at once: ``draft_tokens (R, K)``, ``target_logits (R, K+1, V)`` ->
    ``(n (R,), next token (R,))`` on the CPU. The argmax runs where the logits are, so only ``(R, K+1)``
    token ids cross to the host (not ``R (K+1) V`` logits: 100 MB a step at R=64, K=7 on SmolLM2)."""
    choice = target_logits.argmax(-1).cpu()                                 # (R, K+1)
    n = accepted_prefix(draft_tokens.cpu(), choice)                         # (R,) accepted per request
    return n, choice.gather(1, n[:, None])[:, 0]


def verify_sampling(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                    generator: torch.Generator | None = None) -> tuple[int, int]:
    """Rejection sampling. ``draft_probs (K, V)`` (None when K = 0), ``target_probs (K+1, V)`` -> (n, next token)."""
    K = draft_tokens.shape[0]
    u = torch.rand(K, generator=generator)
    for i in range(K):
        x = int(draft_tokens[i])
        p, q = float(target_probs[i, x]), float(draft_probs[i, x])
        if u[i] * q <= p and q > 0:       # accept with probability min(1, p/q)
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp_min(0)
        total = residual.sum()
        residual = residual / total if total > 0 else target_probs[i]
        return i, int(sample(residual, generator))
    return K, int(sample(target_probs[K], generator))
