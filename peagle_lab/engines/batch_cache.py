"""KV caches for a batch of requests that accept different numbers of tokens per step.

Speculative decoding keeps ``1 + n_r`` of the ``K + 1`` verified positions of request ``r``, and
``n_r`` differs from row to row. transformers' ``DynamicCache`` stores one ``(B, heads, T, hd)``
tensor per layer and can only crop every row to the same length, so the batched engine keeps
its own bookkeeping around it. Two layouts, one per model:

**Target: right-padded rows with per-row valid lengths** (:class:`RaggedCache`). Row ``r``'s
valid entries are physical slots ``0 .. lengths[r]-1``; anything after them is stale. A forward
appends ``T`` new slots after the longest row (physical ``P .. P+T-1``) and is told, per row:

* position ids ``lengths[r] + i`` (RoPE sees each request's true positions, gaps or not);
* a 4D additive mask ``(B, 1, T, P+T)``: query ``i`` of row ``r`` sees its valid prefix and the
  new slots ``P .. P+i``; stale slots get a large negative number, so their softmax weight is
  exactly 0 and the result is what the request would get alone (attention is a weighted sum
  over keys: where a key sits in the buffer does not matter, only whether it is visible).

After verification :meth:`RaggedCache.commit` moves each row's ``keep[r]`` accepted slots
from ``P ..`` down to ``lengths[r] ..`` (one gather over the tail, no per-row loop) and cuts the
buffer at the new longest row. Rejected and stale slots stay behind as masked garbage until a
later step overwrites them -- the same thing vLLM's slot mapping does in its paged KV blocks.
A prefill is the same operation with ``lengths = 0``: prompts of different lengths are
right-padded and each row keeps its own length.

**Drafter: one flat pool, like vLLM's KV blocks** (:class:`DraftPool`). The drafter runs on
vLLM's packed ragged layout (all requests' slots in ONE row, built by
:func:`peagle_lab.kernels.copy_and_expand_eagle_inputs`), so its cache is one row too: every
committed slot records the request that owns it (``slot_req``) and its position. A query sees
the pool slots of its own request, plus the causal part of its request's new slots; mask slots
and padding for rejected tokens are dropped from the pool after the pass
(:meth:`DraftPool.commit`), finished requests' slots when they leave (:meth:`DraftPool.keep_requests`).
DSpark's drafter never runs its layers over context tokens: its context K/V come from the target's
features (``fc(aux)`` per layer) and go into the pool as they are (:meth:`DraftPool.extend`); its
block slots are never stored.
The price of a dense mask over the whole pool is attention work over every request's context
(vLLM's varlen kernels skip it); at this scale the drafter's MLP and head dominate anyway.

Both keep the drafter and target caches incremental: nothing is recomputed per step.
"""
from __future__ import annotations

import torch

from .. import kvcache


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool "may attend" mask -> additive float mask (0 or the dtype's most negative value).

    transformers passes a 4D mask to the attention as it is; an additive one works with its eager
    and SDPA attention alike. Every query sees at least itself, so no softmax row is empty.
    """
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


class RaggedCache:
    """The target's right-padded per-row KV cache (see the module docstring)."""

    def __init__(self, target, batch_size: int):
        self.target = target
        self.cache = target.new_cache()
        self.lengths = torch.zeros(batch_size, dtype=torch.long)      # (B,) valid slots per row
        self._new = 0

    @property
    def physical(self) -> int:
        """Slots in the buffer (the longest row, plus stale slots of a pass not yet committed)."""
        return kvcache.cache_length(self.cache)

    def layout(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Position ids ``(B, T)`` and the bool mask ``(B, 1, T, P+T)`` for ``T`` new slots per row."""
        P = self.physical
        i = torch.arange(T)
        positions = self.lengths[:, None] + i                          # (B, T)
        key = torch.arange(P + T)
        old = key[None, :] < self.lengths[:, None]                     # (B, P+T): the valid prefix
        new = (key[None, :] >= P) & (key[None, :] <= P + i[:, None])   # (T, P+T): causal among the new slots
        mask = old[:, None, :] | new[None]                             # (B, T, P+T)
        return positions, mask[:, None]

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, *, aux: bool = True):
        """One target forward over ``input_ids (B, T)`` (right-padded rows are fine; see commit)."""
        positions, mask = self.layout(input_ids.shape[1])
        self._new = input_ids.shape[1]                                 # slots awaiting commit
        dtype = next(self.target.model.parameters()).dtype
        return self.target.forward(input_ids, self.cache, aux=aux, positions=positions,
                                   attention_mask=additive(mask, dtype))

    @torch.inference_mode()
    def commit(self, keep: torch.Tensor) -> None:
        """Row ``r`` keeps the first ``keep[r]`` slots of the last forward; the rest become stale."""
        P_new_end = self.physical                                      # P + T
        P = P_new_end - self._new
        if bool((keep > self._new).any()):
            raise ValueError(f"cannot keep {keep.tolist()} of {self._new} new slots")
        keep = keep.long()
        new_lengths = self.lengths + keep
        start = int(self.lengths.min())                                # nothing below changes
        end = int(new_lengths.max())
        j = torch.arange(start, end)[None, :]                          # (1, n) destination slots
        src = torch.where(j < self.lengths[:, None], j,                # own valid prefix stays
                          torch.where(j < new_lengths[:, None], P + j - self.lengths[:, None], j))  # (B, n)
        kvcache.rewrite_tail(self.cache, start, src)
        self.lengths, self._new = new_lengths, 0

    @torch.inference_mode()
    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop every row not in ``rows`` (finished requests) and cut the buffer to the longest left."""
        kvcache.select_rows(self.cache, rows)
        self.lengths = self.lengths[rows]
        kvcache.crop(self.cache, int(self.lengths.max()))


class DraftPool:
    """The drafter's KV cache as one flat row of slots shared by all requests (see the module docstring)."""

    def __init__(self, drafter, device=None):
        self.device = torch.device(device or "cpu")
        self.cache = drafter.new_cache()                               # per layer (1, kv_heads, S, hd)
        self.slot_req = torch.zeros(0, dtype=torch.long, device=self.device)   # (S,) owning request
        self.slot_pos = torch.zeros(0, dtype=torch.long, device=self.device)   # (S,) position of the slot

    @property
    def length(self) -> int:
        return int(self.slot_req.numel())

    def visible(self, query_req: torch.Tensor) -> torch.Tensor:
        """(T, S) bool: each query sees the committed slots of its own request."""
        return self.slot_req[None, :] == query_req[:, None]

    def append(self, req: torch.Tensor, pos: torch.Tensor) -> None:
        """Record the owners of the slots the last drafter pass appended (its cache grew already)."""
        self.slot_req = torch.cat([self.slot_req, req.long()])
        self.slot_pos = torch.cat([self.slot_pos, pos.long()])

    @torch.inference_mode()
    def extend(self, req: torch.Tensor, pos: torch.Tensor, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Append K/V made outside a drafter pass, ``(1, kv_heads, n, hd)`` per layer (DSpark's context rows:
        ``fc(aux)`` through each layer's k/v projections), owned by ``req (n,)`` at ``pos (n,)``."""
        for layer, (key, value) in enumerate(kv):
            self.cache.append(layer, key, value)
        self.append(req, pos)

    @torch.inference_mode()
    def commit(self, start: int, keep: torch.Tensor) -> None:
        """Of the slots appended since ``start``, keep those where ``keep`` is True (context slots)."""
        idx = start + torch.nonzero(keep, as_tuple=False).flatten()
        self._select(torch.cat([torch.arange(start, device=idx.device), idx]), tail_from=start)

    @torch.inference_mode()
    def truncate(self, length: int) -> None:
        """Forget every slot from ``length`` on (the speculative slots of sequential drafting)."""
        self.cache.crop(length)
        self.slot_req, self.slot_pos = self.slot_req[:length], self.slot_pos[:length]

    @torch.inference_mode()
    def keep_requests(self, reqs: torch.Tensor) -> None:
        """Remove the slots of every request not in ``reqs`` (finished ones)."""
        idx = torch.nonzero(torch.isin(self.slot_req, reqs), as_tuple=False).flatten()
        self._select(idx, tail_from=0)

    @torch.inference_mode()
    def _select(self, idx: torch.Tensor, tail_from: int) -> None:
        c = self.cache
        for layer in range(len(c.keys)):
            if c.keys[layer] is None:
                continue
            k, v = c.keys[layer], c.values[layer]
            tail = idx[tail_from:].to(k.device)
            k_tail, v_tail = k.index_select(2, tail), v.index_select(2, tail)   # copies first
            n = tail_from + tail.numel()
            k, v = k[:, :, :n], v[:, :, :n]
            k[:, :, tail_from:], v[:, :, tail_from:] = k_tail, v_tail
            c.keys[layer], c.values[layer] = k, v
        self.slot_req, self.slot_pos = self.slot_req[idx], self.slot_pos[idx]
