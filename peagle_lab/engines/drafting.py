"""Drafting: K proposals from the drafter, sequentially (EAGLE-3) or in one pass (P-EAGLE).

Both functions take the *new context slots* since the drafter last ran: ``ctx_tokens (T,)`` and
``ctx_aux (T, 3H)``, aligned so that slot ``j`` pairs the target's features at position ``p_j``
with the token at ``p_j + 1`` (the token those features predicted). The last slot therefore
holds the freshest token (the target's last one) and predicts the first draft.

They append to the drafter cache; the engine crops the speculative slots away after verification.

One naming scheme for every drafting function in the package, ``draft_<how>[_<cache>]``: ``how`` is
``sequential`` (EAGLE-3) or ``parallel`` (P-EAGLE), ``cache`` the drafter cache it runs against --
none here (the teaching engine's growing :class:`~peagle_lab.drafter.DrafterCache`), ``pooled``
(:mod:`peagle_lab.engines.batched`, one flat pool for a batch), ``static``
(:mod:`peagle_lab.engines.fast.draft`, preallocated, CUDA-graph safe) and ``batched``
(:mod:`peagle_lab.kernels.batched`, a cache-less ragged batch of prefills). Each engine keeps its
functions in a ``{method: function}`` table.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..drafter import DrafterCache, Eagle3Drafter
from ..sampling import probs_from_logits, sample
from .request import require_parallel


@dataclass
class Draft:
    tokens: torch.Tensor              # (K,) target token ids
    probs: torch.Tensor | None        # (K, V) draft distribution over the target vocab (T > 0)


def _pick(drafter: Eagle3Drafter, logits: torch.Tensor, temperature: float,
          gen) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draft-vocab logits (n, Vd) -> target ids (n,) and target-vocab probs (n, V) or None."""
    if temperature <= 0:
        return drafter.to_target_ids(logits.argmax(-1)), None
    q = probs_from_logits(logits, temperature)                             # (n, Vd)
    return drafter.to_target_ids(sample(q, gen)), drafter.full_vocab(q, 0.0)


@torch.inference_mode()
def draft_sequential(drafter: Eagle3Drafter, cache: DrafterCache, ctx_tokens: torch.Tensor,
                     ctx_aux: torch.Tensor, k: int, temperature: float = 0.0,
                     generator: torch.Generator | None = None) -> Draft:
    """EAGLE-3 chain drafting: K drafter passes, each on the previous draft and own hidden state."""
    ids = ctx_tokens[None]                                                  # (1, T)
    hidden = drafter.project(ctx_aux)[None]                                # (1, T, H)
    tokens, probs = [], []
    for _ in range(k):
        prenorm, logits = drafter(ids, hidden, cache)                       # (1, t, H), (1, t, Vd)
        tok, q = _pick(drafter, logits[:, -1], temperature, generator)      # (1,), (1, V)
        tokens.append(tok)
        probs.append(q)
        ids, hidden = tok[None], prenorm[:, -1:]                            # next slot: draft + own prenorm
    return Draft(torch.cat(tokens), None if temperature <= 0 else torch.cat(probs))


@torch.inference_mode()
def draft_parallel(drafter: Eagle3Drafter, cache: DrafterCache, ctx_tokens: torch.Tensor,
                   ctx_aux: torch.Tensor, k: int, temperature: float = 0.0,
                   generator: torch.Generator | None = None) -> Draft:
    """P-EAGLE: one pass over [context slots, K-1 mask slots]; the last K outputs are the drafts."""
    require_parallel(drafter)
    T = ctx_tokens.shape[0]
    mask_ids = torch.full((k - 1,), drafter.cfg.mask_token_id, dtype=ctx_tokens.dtype, device=ctx_tokens.device)
    ids = torch.cat([ctx_tokens, mask_ids])[None]                           # (1, T+K-1)
    hidden = torch.cat([drafter.project(ctx_aux),
                        drafter.projected_mask_hidden().expand(k - 1, -1)])[None]  # (1, T+K-1, H)
    _, logits = drafter(ids, hidden, cache)                                 # (1, T+K-1, Vd)
    tokens, probs = _pick(drafter, logits[0, T - 1:], temperature, generator)  # (K,), (K, V)
    return Draft(tokens, probs)


DRAFTERS = {"eagle": draft_sequential, "peagle": draft_parallel}
