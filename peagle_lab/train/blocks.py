"""DSpark's training graph: many blocks of one conversation in one pass, and their loss.

Notation as in :mod:`peagle_lab.train.loss`: element ``(a, d)`` stands at anchor ``a`` (the target's
features are known up to position ``a``), its block starts with the token ``x_{a+1}`` at position
``a+1``, and slot ``d`` predicts ``x_{a+2+d}`` against the target's distribution ``p_{a+1+d}``.

A block is K slots ``[x_{a+1}, mask, ..., mask]`` at positions ``a+1 .. a+K``. Each slot sees the
context rows ``<= a`` of its own conversation and the slots ``<= d`` of its own block, exactly what the
engine's block sees at that step (tests/test_dspark.py checks the two graphs agree), so every anchor of
a padded batch of conversations trains at once. The Markov head is teacher-forced: slot ``d``'s
previous token is the real ``x_{a+1+d}``. At inference it is the slot's own earlier draft, which equals
the real token whenever the step could still accept slot ``d``; so the replayed acceptance is exact.
"""
from __future__ import annotations

import torch

from .cod import Elements
from .seqdata import LossParts, SeqData, supervised_mask


def block_elements(doc_len: int, block_size: int, blocks: int, supervised: torch.Tensor | None = None,
                   generator: torch.Generator | None = None) -> Elements:
    """``blocks`` random anchors of one conversation (those whose first draft is a supervised token), each with
    all its slots ``d < block_size`` whose target lies inside the conversation."""
    cand = torch.arange(max(doc_len - 2, 0))
    if supervised is not None and cand.numel():
        cand = cand[supervised[cand + 2]]
    pick = cand[torch.randperm(cand.numel(), generator=generator)[:blocks]].sort().values
    depth = torch.arange(block_size)
    anchor, depth = pick[:, None].expand(-1, block_size), depth.expand(pick.numel(), -1)
    keep = anchor + 2 + depth < doc_len
    return Elements(anchor[keep].contiguous(), depth[keep].contiguous())


def _by_doc(index: torch.Tensor, doc: torch.Tensor, num_docs: int) -> torch.Tensor:
    """(num_docs, W) table of ``index`` grouped by ``doc`` (input order kept), -1 marking padding."""
    counts = torch.bincount(doc, minlength=num_docs)
    order = torch.sort(doc, stable=True).indices
    slot = torch.arange(index.numel(), device=index.device) - (counts.cumsum(0) - counts)[doc[order]]
    table = torch.full((num_docs, max(int(counts.max()), 1)), -1, dtype=torch.long, device=index.device)
    table[doc[order], slot] = index[order]
    return table


def block_states(drafter, data: SeqData, anchors: torch.Tensor, k: int) -> torch.Tensor:
    """Final-normed states ``(A, k, H)`` of the blocks at ``anchors`` (sorted, unique, global indices)."""
    dev = anchors.device
    n = data.tokens.numel()
    doc_all = data.doc if data.doc is not None else torch.zeros(n, dtype=torch.long, device=dev)
    _, doc_all = doc_all.unique(return_inverse=True)
    B = int(doc_all.max()) + 1
    ctx = _by_doc(torch.arange(n, device=dev), doc_all, B)                  # (B, L) context rows per doc
    ctx_real = ctx >= 0
    blocks = _by_doc(anchors, doc_all[anchors], B)                           # (B, W) anchors per doc
    real = blocks >= 0
    a = blocks.clamp_min(0)
    W = a.shape[1]
    d = torch.arange(k, device=dev)
    a_slot = a[:, :, None].expand(-1, -1, k).reshape(B, W * k)              # (B, Q) anchor of each slot
    d_slot = d.repeat(W)[None].expand(B, -1)                                 # (B, Q) depth of each slot
    ids = torch.where(d_slot == 0, data.tokens[(a_slot + 1).clamp(max=n - 1)], drafter.cfg.mask_token_id)
    positions = a_slot + 1 + d_slot
    ctx_kv = drafter.context_kv(data.aux[ctx.clamp_min(0)], ctx.clamp_min(0))
    q_real = real[:, :, None].expand(-1, -1, k).reshape(B, W * k)
    sees_ctx = ctx_real[:, None, :] & (ctx[:, None, :] <= a_slot[:, :, None])               # (B, Q, L)
    blk = torch.arange(W, device=dev).repeat_interleave(k)
    sees_blk = (blk[:, None] == blk[None, :]) & (d.repeat(W)[None, :] <= d.repeat(W)[:, None])  # (Q, Q)
    mask = torch.cat([sees_ctx & q_real[..., None], sees_blk[None].expand(B, -1, -1).clone()], dim=-1)
    normed = drafter.block(ids, positions, ctx_kv, mask[:, None])            # (B, Q, H)
    normed = normed.view(B, W, k, -1)
    out = torch.empty(anchors.numel(), k, normed.shape[-1], dtype=normed.dtype, device=dev)
    rank = torch.searchsorted(anchors, blocks[real])
    out[rank] = normed[real]
    return out


def element_logits(drafter, el: Elements, data: SeqData) -> torch.Tensor:
    """Draft-vocab logits (E, Vd) of elements ``(a, d)``, the Markov head fed the real previous token."""
    anchors, where = el.anchor.unique(return_inverse=True)
    k = int(el.depth.max()) + 1
    states = block_states(drafter, data, anchors, k)                         # (A, k, H)
    prev = data.tokens[(el.anchor + 1 + el.depth).clamp(max=data.tokens.numel() - 1)]
    return drafter.logits(states[where, el.depth], prev)


def block_loss(drafter, el: Elements, data: SeqData, *, max_depth: int, normalizer: float | None = None,
               backward: bool = False, **_) -> LossParts:
    """KL(target || drafter) summed over supervised elements, and top-1 agreement per depth (as the other methods)."""
    use = supervised_mask(el, data)
    if data.doc is not None:
        use &= (el.anchor + 2 + el.depth < data.tokens.numel()) & \
            (data.doc[(el.anchor + 2 + el.depth).clamp(max=data.tokens.numel() - 1)] == data.doc[el.anchor])
    logits = element_logits(drafter, el, data)[use].float()                 # (E', Vd)
    target = data.target_logits[(el.anchor + 1 + el.depth)[use]].float()
    loss_sum = -(target.softmax(-1) * logits.log_softmax(-1)).sum()
    hit = (logits.argmax(-1) == target.argmax(-1)).long().cpu()
    depth = el.depth[use].cpu()
    correct = torch.zeros(max_depth, dtype=torch.long).index_add_(0, depth, hit)
    total = torch.zeros(max_depth, dtype=torch.long).index_add_(0, depth, torch.ones_like(hit))
    if backward:
        (loss_sum / (normalizer or 1.0)).backward()
        loss_sum = loss_sum.detach()
    return LossParts(loss_sum, int(use.sum()), correct, total)
