"""Drafting: K proposals from the drafter, sequentially (EAGLE-3) or in one pass (P-EAGLE).

Both functions take the *new context slots* since the drafter last ran: ``ctx_tokens (T,)`` and
``ctx_aux (T, 3H)``, aligned so that slot ``j`` pairs the target's features at position ``p_j``
with the token at ``p_j + 1`` (the token those features predicted). The last slot therefore
holds the freshest token (the bonus token) and predicts the first draft.

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
from .frame import require_parallel


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


@torch.inference_mode()
def draft_markov(drafter, cache: DrafterCache, ctx_tokens: torch.Tensor, ctx_aux: torch.Tensor, k: int,
                 temperature: float = 0.0, generator: torch.Generator | None = None) -> Draft:
    """DSpark: the new context rows into the cache, one pass over the block [x_P, K-1 masks], then the
    Markov head left to right, each slot told which token the slot before it chose."""
    T, start = ctx_tokens.shape[0], cache.length
    dev = ctx_tokens.device
    for i, (key, value) in enumerate(drafter.context_kv(ctx_aux[None], torch.arange(start, start + T, device=dev)[None])):
        cache.append(i, key, value)                                         # context K/V, kept for later steps
    P = cache.length                                                        # the position of x_P, the newest token
    ids = torch.cat([ctx_tokens[-1:], ctx_tokens.new_full((k - 1,), drafter.cfg.mask_token_id)])[None]   # (1, K)
    mask = torch.ones(k, P + k, dtype=torch.bool, device=dev)
    mask[:, P:] = torch.ones(k, k, dtype=torch.bool, device=dev).tril()    # causal inside the block
    ctx_kv = list(zip(cache.keys, cache.values))
    base = drafter.lm_head(drafter.block(ids, torch.arange(P, P + k, device=dev)[None], ctx_kv, mask[None, None])[0])
    prev, tokens, probs = ctx_tokens[-1:], [], []                           # base: (K, Vd)
    for i in range(k):
        tok, q = _pick(drafter, base[i:i + 1] + drafter.markov_head(prev).to(base.dtype), temperature, generator)
        tokens.append(tok)
        probs.append(q)
        prev = tok
    return Draft(torch.cat(tokens), None if temperature <= 0 else torch.cat(probs))


DRAFTERS = {"eagle": draft_sequential, "peagle": draft_parallel, "dspark": draft_markov}
