"""Drafting over a static drafter cache: the drafter's own layers, fixed shapes, no host sync.

:class:`StaticDrafterCache` stands in for :class:`peagle_lab.drafter.DrafterCache` inside
``Eagle3Drafter.forward``: instead of growing by concatenation, ``append`` writes the new keys and
values at ``write_idx`` in preallocated buffers and hands back the whole buffer; the caller's mask
(``slot <= position``) decides what each query sees. So the drafter math is not repeated here.

One drafting step always reads ``C`` context slots, of which only the first ``ctx_len`` are real
(``ctx_len = n + 1``: the accepted drafts and the target's token, known only on the device). The
``C - ctx_len`` padding slots are written to a scratch region past ``capacity`` that no query ever
attends to, so padded and unpadded steps give the same drafts, and the shape stays fixed
(``C = K + 1``) for CUDA-graph capture. After the step the drafter keeps the ``ctx_len`` context slots
(``drafter_len += ctx_len``); draft and mask slots beyond it are stale and get overwritten next step.
"""
from __future__ import annotations

import torch

from ...drafter import Eagle3Drafter
from ...kernels.cache_attention import attend_cache


class StaticDrafterCache:
    """Per-layer K/V ``(1, nkv, capacity + scratch, hd)`` (a list), written in place at ``write_idx``.

    ``attention="triton"``: the drafter's layers attend through
    :func:`peagle_lab.kernels.cache_attention.cache_attention` (``attend``, which ``Eagle3Drafter``'s
    attention calls when its cache has one) instead of SDPA over the whole buffer with the mask."""

    def __init__(self, drafter: Eagle3Drafter, capacity: int, scratch: int, attention: str = "sdpa"):
        c = drafter.cfg
        weight = drafter.fc.weight
        shape = (1, c.num_kv_heads, capacity + scratch, c.head_dim)
        # a tensor per layer: torch.compile updates a whole tensor in place (a slice of one, by copying it all)
        self.keys = [torch.zeros(shape, dtype=weight.dtype, device=weight.device) for _ in range(c.num_layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.capacity = capacity
        self.slots = torch.arange(capacity + scratch, device=weight.device)  # (S,) slot index = position
        self.write_idx: torch.Tensor | None = None                           # (T,) set before each forward
        self.positions: torch.Tensor | None = None                           # (T,) the queries' positions, likewise
        if attention == "triton":
            self.attend = self._attend

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``q (1, nh, T, hd)`` over the whole buffers ``k, v (1, nkv, S, hd)``, query ``t`` seeing slots
        ``<= positions[t]`` (what the mask says) -> ``(1, nh, T, hd)``."""
        _, nh, T, hd = q.shape
        nkv = k.shape[1]
        rows = q.reshape(nkv, (nh // nkv) * T, hd)                           # head g*rep+r, token t -> row r*T+t
        return attend_cache(rows, k[0], v[0], self.positions).reshape(1, nh, T, hd)   # SDPA may hand back strides

    @property
    def length(self) -> int:
        # Eagle3Drafter.forward reads this only to default positions / the mask; we always pass both.
        return self.capacity

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer].index_copy_(2, self.write_idx, k)                    # k (1, nkv, T, hd)
        self.values[layer].index_copy_(2, self.write_idx, v)
        return self.keys[layer], self.values[layer]                          # (1, nkv, S, hd)


def _forward(drafter: Eagle3Drafter, cache: StaticDrafterCache, ids, hidden, positions, write_idx):
    """One drafter pass over ``T`` slots -> ``(prenorm (T, H), logits (T, Vd))``."""
    cache.write_idx, cache.positions = write_idx, positions
    mask = cache.slots[None, :] <= positions[:, None]                        # (T, S); scratch slots > any position
    prenorm, logits = drafter(ids[None], hidden[None], cache, positions=positions[None], attn_mask=mask)
    return prenorm[0], logits[0]


def _context(cache: StaticDrafterCache, ctx_tok: torch.Tensor, ctx_len: torch.Tensor, drafter_len: torch.Tensor):
    """Where the ``C`` context slots go -> ``(positions (C,), write slots (C,), last real slot (1,))``:
    the first ``ctx_len`` after the ``drafter_len`` kept ones, the padding into scratch (``C - ctx_len`` slots)."""
    C = ctx_tok.shape[0]
    j = torch.arange(C, device=ctx_tok.device)
    ctx_pos = drafter_len + j                                                      # (C,)
    ctx_write = torch.where(j < ctx_len, ctx_pos, cache.capacity + j - ctx_len)  # padding -> scratch
    return ctx_pos, ctx_write, ctx_len - 1                                     # the last real slot predicts draft 1


def draft_parallel_static(drafter: Eagle3Drafter, cache: StaticDrafterCache, ctx_tok: torch.Tensor,
                          ctx_aux: torch.Tensor, ctx_len: torch.Tensor, drafter_len: torch.Tensor,
                          k: int) -> torch.Tensor:
    """P-EAGLE: greedy drafts ``(K,)`` (target ids) from one pass over ``ctx_tok (C,)``, ``ctx_aux (C, 3H)``
    and K-1 mask slots; advances ``drafter_len``.

    ``ctx_len (1,)`` real context slots, ``drafter_len (1,)`` drafter cache length: device tensors, so this
    runs inside a CUDA graph.
    """
    C = ctx_tok.shape[0]
    ctx_pos, ctx_write, last = _context(cache, ctx_tok, ctx_len, drafter_len)
    m = torch.arange(k - 1, device=ctx_tok.device)
    mask_pos = drafter_len + ctx_len + m                                     # (K-1,) right after the real context
    ids = torch.cat([ctx_tok, torch.full_like(m, drafter.cfg.mask_token_id)])                   # (C+K-1,)
    hidden = torch.cat([drafter.project(ctx_aux), drafter.projected_mask_hidden().expand(k - 1, -1)])  # (C+K-1, H)
    _, logits = _forward(drafter, cache, ids, hidden, torch.cat([ctx_pos, mask_pos]), torch.cat([ctx_write, mask_pos]))
    drafts = drafter.to_target_ids(logits[torch.cat([last, C + m])].argmax(-1))   # (K,) last real slot + mask slots
    drafter_len.add_(ctx_len)                                                        # keep the real context slots
    return drafts


def draft_sequential_static(drafter: Eagle3Drafter, cache: StaticDrafterCache, ctx_tok: torch.Tensor,
                            ctx_aux: torch.Tensor, ctx_len: torch.Tensor, drafter_len: torch.Tensor,
                            k: int) -> torch.Tensor:
    """EAGLE-3: greedy drafts ``(K,)`` from one context pass, then K-1 one-token passes on the previous
    draft and its own prenorm; advances ``drafter_len`` (arguments as :func:`draft_parallel_static`)."""
    ctx_pos, ctx_write, last = _context(cache, ctx_tok, ctx_len, drafter_len)
    prenorm, logits = _forward(drafter, cache, ctx_tok, drafter.project(ctx_aux), ctx_pos, ctx_write)
    tok = drafter.to_target_ids(logits[last].argmax(-1))                     # (1,)
    h, out = prenorm[last], [tok]                                            # (1, H)
    for i in range(k - 1):
        pos = drafter_len + ctx_len + i                                              # (1,)
        prenorm, logits = _forward(drafter, cache, tok, h, pos, pos)
        tok, h = drafter.to_target_ids(logits.argmax(-1)), prenorm           # (1,), (1, H)
        out.append(tok)
    drafter_len.add_(ctx_len)                                                        # keep the real context slots
    return torch.cat(out)                                                    # (K,)


STATIC_DRAFTERS = {"eagle": draft_sequential_static, "peagle": draft_parallel_static}
