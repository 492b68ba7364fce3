"""The drafter's training loss on one sequence: single pass, or partitioned into segments.

``SeqData`` holds what the target said about one sequence (computed online, no gradient):
tokens ``x (N,)``, features ``aux (N, 3H)``, target logits restricted to the draft vocabulary
``target_logits (N, Vd)``, and which tokens may be targets (``supervised (N,)``).

Loss per supervised element ``(a, d)``: cross-entropy of the drafter's distribution ``q`` against
the target's ``p_{a+1+d}`` renormalised over the draft vocabulary, i.e. KL(p || q) up to the
(constant) entropy of p. Everything is *summed*; the trainer divides by the global count of
supervised elements, so a partitioned run's gradient equals the single-pass one exactly.

Two layouts of a batch of packed conversations, same loss and gradient (tests/test_partition.py):
one packed pass (:func:`sequence_loss`, optionally partitioned into segments: notebook 03), or a
padded batch with one row per conversation (:func:`padded_loss`: :func:`padded_parallel_loss` for
P-EAGLE, :func:`padded_sequential_loss` for EAGLE-3), which the shipped drafters trained with.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..drafter import DrafterCache, Eagle3Drafter
from .cod import Elements, attention_mask, partition, peagle_mask
from .seqdata import LossParts, SeqData, supervised_mask   # noqa: F401 (also imported from here)


def _forward_parallel(drafter: Eagle3Drafter, el: Elements, data: SeqData, attention: str = "dense",
                      logits: bool = True) -> torch.Tensor:
    """P-EAGLE: every element in one pass under the P-EAGLE mask -> logits (E, Vd), or normed states (E, H)."""
    d0 = el.depth == 0
    mask_id = drafter.cfg.mask_token_id
    ids = torch.where(d0, data.tokens[(el.anchor + 1).clamp(max=data.tokens.numel() - 1)], mask_id)
    real = drafter.project(data.aux[el.anchor])                            # (E, H)
    hidden = torch.where(d0[:, None], real, drafter.projected_mask_hidden().to(real.dtype))
    _, out = drafter(ids[None], hidden[None], None, positions=el.position[None],
                     attn_mask=attention_mask(el, el, attention), logits=logits)
    return out[0]


def _forward_sequential(drafter: Eagle3Drafter, el: Elements, data: SeqData, attention: str = "dense",
                        logits: bool = True) -> torch.Tensor:
    """EAGLE-3 training-time test: depth by depth, each reading the previous depth's own output.

    Returns logits ``(E, Vd)``, or with ``logits=False`` the final-normed states ``(E, H)``.

    "auto" attention means dense here: each depth has its own (queries, keys) shape, and compiling
    flex attention for all of them stalled the first step for over 7 minutes on an H200
    (2026-12-01); the per-depth masks are also far smaller than P-EAGLE's single one.
    """
    if attention == "auto":
        attention = "dense"
    cache = DrafterCache(drafter.cfg.num_layers)
    seen: Elements | None = None
    prev_anchor = prev_out = None
    out_logits = []
    order = []
    for d in range(int(el.depth.max()) + 1):
        idx = (el.depth == d).nonzero().squeeze(-1)
        if idx.numel() == 0:
            break
        cur = el.select(idx)
        ids = data.tokens[cur.anchor + 1 + d]
        if d == 0:
            hidden = drafter.project(data.aux[cur.anchor])
        else:  # parent (a, d-1) is present by COD construction; anchors are sorted within a depth
            parent = torch.searchsorted(prev_anchor, cur.anchor)
            hidden = prev_out[parent]
        keys = cur if seen is None else seen.concat(cur)
        prenorm, lg = drafter(ids[None], hidden[None], cache, positions=cur.position[None],
                              attn_mask=attention_mask(cur, keys, attention), logits=logits)
        out_logits.append(lg[0])
        order.append(idx)
        seen, prev_anchor, prev_out = keys, cur.anchor, prenorm[0]
    logits = torch.empty(len(el), out_logits[0].shape[-1], dtype=out_logits[0].dtype, device=out_logits[0].device)
    logits[torch.cat(order)] = torch.cat(out_logits)
    return logits


def element_outputs(drafter: Eagle3Drafter, el: Elements, data: SeqData, method: str, attention: str = "dense",
                    logits: bool = True) -> torch.Tensor:
    """The drafter's outputs for the elements ``el``, as training computes them: logits ``(E, Vd)``, or
    with ``logits=False`` the final-normed states ``(E, H)``.

    ``method="peagle"``: every element in one pass under the P-EAGLE mask; ``"eagle"``: EAGLE-3's
    training-time test, depth by depth. Evaluation reads the same logits (:mod:`peagle_lab.train.replay`).
    """
    if method == "peagle":
        return _forward_parallel(drafter, el, data, attention, logits=logits)
    if method == "eagle":
        return _forward_sequential(drafter, el, data, attention, logits=logits)
    if method == "dspark" and logits:
        from .blocks import element_logits
        return element_logits(drafter, el, data)
    raise ValueError(f"unknown training method {method!r}; use 'peagle', 'eagle' or 'dspark'")


def element_losses(drafter: Eagle3Drafter, el: Elements, data: SeqData, method: str,
                   max_depth: int, counted: torch.Tensor, attention: str = "dense") -> LossParts:
    """Loss summed over elements where ``counted`` is True (context elements are not counted).

    ``attention``: "dense" builds the (E, E) mask; "flex" a flex-attention BlockMask (CUDA for
    training); "auto" picks flex on CUDA. All give the same loss."""
    normed = element_outputs(drafter, el, data, method, attention, logits=False)
    return _loss_from_normed(drafter, normed, el, data, max_depth, counted)


HEAD_CHUNK_ELEMENTS = 1 << 27      # logits held at once by the loss: 2^27 floats = 512 MiB in float32


class _HeadKL(torch.autograd.Function):
    """Summed KL(target || drafter) through the output layer, a chunk of rows at a time.

    ``normed (U, H)`` final-normed drafter states, ``weight (Vd, H)``, ``target (N, Vd)`` target logits,
    ``rows (U,)`` which target row each state is scored against. The gradients (``(q - p) W`` for the
    states, ``(q - p)^T h`` for a trainable weight) are made in the same pass, so no ``(U, Vd)`` tensor
    ever exists: with the target's whole vocabulary (49,152 for SmolLM2) a batch's logits alone would
    be tens of GB. Under autocast the matmuls run in its dtype, the softmaxes in float32 (as before).
    """

    @staticmethod
    def forward(ctx, normed, weight, target, rows, want_grad: bool):
        dt = torch.promote_types(normed.dtype, torch.float32)              # float32, or float64 in tests
        want_h = want_grad and ctx.needs_input_grad[0]
        want_w = want_grad and ctx.needs_input_grad[1]
        w = weight if weight.dtype == normed.dtype else weight.to(normed.dtype)
        grad_h = torch.empty(normed.shape, dtype=dt, device=normed.device) if want_h else None
        grad_w = torch.zeros(weight.shape, dtype=dt, device=weight.device) if want_w else None
        loss = torch.zeros((), dtype=dt, device=normed.device)
        hits = torch.empty(normed.shape[0], dtype=torch.bool, device=normed.device)
        chunk = max(1, HEAD_CHUNK_ELEMENTS // max(1, weight.shape[0]))
        for s in range(0, normed.shape[0], chunk):
            h = normed[s: s + chunk]
            z = F.linear(h, w)
            t = target[rows[s: s + chunk]].to(dt)
            logq = F.log_softmax(z.to(dt), dim=-1)
            logp = F.log_softmax(t, dim=-1)
            p = logp.exp()
            loss += (p * (logp - logq)).sum()
            hits[s: s + chunk] = z.argmax(-1) == t.argmax(-1)
            if want_h or want_w:
                g = logq.exp_().sub_(p)                                       # dloss/dz = q - p per row
                if want_h:
                    grad_h[s: s + chunk] = g.to(w.dtype) @ w
                if want_w:
                    grad_w += (g.to(h.dtype).t() @ h).to(dt)
        ctx.mark_non_differentiable(hits)
        ctx.save_for_backward(grad_h, grad_w)
        ctx.dtypes = (normed.dtype, weight.dtype)
        return loss, hits

    @staticmethod
    def backward(ctx, grad_loss, _grad_hits):
        grad_h, grad_w = ctx.saved_tensors
        h_dt, w_dt = ctx.dtypes
        gh = None if grad_h is None else (grad_h * grad_loss).to(h_dt)
        gw = None if grad_w is None else (grad_w * grad_loss).to(w_dt)
        return gh, gw, None, None, None


def head_kl(normed: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
            rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``sum_i KL(softmax(target[rows[i]]) || softmax(weight @ normed[i]))`` and the per-row top-1 hits,
    holding at most :data:`HEAD_CHUNK_ELEMENTS` logits at a time (see :class:`_HeadKL`).

    KL matches the target's whole distribution, which serves sampling too. (Cross-entropy on the target's
    top token alone, what T=0 acceptance rewards, was an option until a fine-tune with each gave the same
    AL: docs/drafter-levers.md#the-objective.)"""
    want = torch.is_grad_enabled() and (normed.requires_grad or weight.requires_grad)
    return _HeadKL.apply(normed, weight, target, rows, want)


def _loss_from_normed(drafter: Eagle3Drafter, normed: torch.Tensor, el: Elements, data: SeqData,
                      max_depth: int, counted: torch.Tensor) -> LossParts:
    """KL(target || drafter) summed over counted, supervised elements, plus top-1 agreement per depth.

    ``normed (E, H)``: the drafter's final-normed states; the head is applied inside :func:`head_kl`."""
    use = counted & supervised_mask(el, data)
    loss_sum, hit = head_kl(normed[use], drafter.head_weight(), data.target_logits, (el.anchor + 1 + el.depth)[use])
    depth = el.depth[use]
    hit = hit.long()
    correct = torch.zeros(max_depth, dtype=torch.long).index_add_(0, depth.cpu(), hit.cpu())
    total = torch.zeros(max_depth, dtype=torch.long).index_add_(0, depth.cpu(), torch.ones_like(hit).cpu())
    return LossParts(loss_sum, int(use.sum()), correct, total)


def padded_parallel_loss(drafter: Eagle3Drafter, el: Elements, data: SeqData, *, max_depth: int,
                         normalizer: float | None = None, backward: bool = False, **_) -> LossParts:
    """P-EAGLE loss of packed conversations as one padded batch ``(B, E_max)``.

    Same loss and gradient as one packed pass (the mask keeps conversations apart), but attention
    costs B * E_max^2 instead of (sum E_i)^2, in a single launch sequence.
    """
    docs = el.doc.unique()
    groups = [(el.doc == d).nonzero().squeeze(-1) for d in docs.tolist()]
    B, E = len(groups), max(g.numel() for g in groups)
    dev = el.anchor.device
    index = torch.full((B, E), -1, dtype=torch.long, device=dev)            # element index or -1 (padding)
    for b, g in enumerate(groups):
        index[b, : g.numel()] = g
    real = index >= 0
    flat = index.clamp_min(0)
    sub = el.select(flat.reshape(-1))
    anchor, depth = sub.anchor.view(B, E), sub.depth.view(B, E)
    d0 = depth == 0
    n = data.tokens.numel()
    ids = torch.where(d0, data.tokens[(anchor + 1).clamp(max=n - 1)], drafter.cfg.mask_token_id)
    real_hidden = drafter.project(data.aux[anchor])                          # (B, E, H)
    hidden = torch.where(d0[..., None], real_hidden, drafter.projected_mask_hidden().to(real_hidden.dtype))
    row = Elements(anchor, depth, sub.doc.view(B, E))
    mask = peagle_mask(row, row) & real[:, :, None] & real[:, None, :]       # (B, E, E), one batched build
    mask |= torch.eye(E, dtype=torch.bool, device=dev)                       # padding rows see themselves
    _, normed = drafter(ids, hidden, None, positions=anchor + depth, attn_mask=mask[:, None], logits=False)
    parts = _loss_from_normed(drafter, normed[real], el.select(index[real]), data, max_depth,
                              torch.ones(int(real.sum()), dtype=torch.bool, device=dev))
    if backward:
        (parts.loss_sum / (normalizer or 1.0)).backward()
        parts = LossParts(parts.loss_sum.detach(), parts.count, parts.correct, parts.total)
    return parts


def _padded_rows(idx: torch.Tensor, row: torch.Tensor, num_rows: int) -> torch.Tensor:
    """(num_rows, W) table of element indices ``idx`` grouped by batch row ``row``, -1 marking padding.

    Each row keeps the elements in the order of ``idx``; W is the largest row."""
    counts = torch.bincount(row, minlength=num_rows)
    order = torch.sort(row, stable=True).indices
    r = row[order]
    slot = torch.arange(idx.numel(), device=idx.device) - (counts.cumsum(0) - counts)[r]
    table = torch.full((num_rows, max(int(counts.max()), 1)), -1, dtype=torch.long, device=idx.device)
    table[r, slot] = idx[order]
    return table


def padded_sequential_loss(drafter: Eagle3Drafter, el: Elements, data: SeqData, *, max_depth: int,
                           normalizer: float | None = None, backward: bool = False, **_) -> LossParts:
    """EAGLE-3 training-time test of packed conversations as a padded batch: one row per conversation.

    Depth by depth, as :func:`_forward_sequential`, but depth d runs as ``(B, Eq_d)`` (B conversations,
    Eq_d the most elements one of them has at depth d) with a per-row cache of the earlier depths, so
    attention costs about B * Eq_d * sum(Eq_0..Eq_d) instead of (sum over conversations)^2. Padding
    slots see only themselves and are never seen by real ones; their outputs are dropped. Same loss
    and gradient as one packed pass (tests/test_partition.py).
    """
    dev = el.anchor.device
    _, row_of = el.doc.unique(return_inverse=True)                           # conversation -> batch row
    B, n = int(row_of.max()) + 1, data.tokens.numel()
    cache = DrafterCache(drafter.cfg.num_layers)
    keys: Elements | None = None                                             # the cache's slots, (B, S)
    keys_real = prev_anchor = prev_out = None
    outs, order = [], []
    for d in range(int(el.depth.max()) + 1):
        idx = (el.depth == d).nonzero().squeeze(-1)
        if idx.numel() == 0:
            break
        index = _padded_rows(idx, row_of[idx], B)                            # (B, W) element index or -1
        real = index >= 0
        cur = el.select(index.clamp_min(0))                                  # padding borrows element 0's fields
        W = index.shape[1]
        ids = torch.where(real, data.tokens[(cur.anchor + 1 + d).clamp(max=n - 1)], 0)
        if d == 0:
            hidden = drafter.project(data.aux[cur.anchor])                   # (B, W, H)
        else:  # parent (a, d-1): same conversation, so same row; found by anchor within the row
            sorted_anchor, perm = prev_anchor.sort(dim=1)
            pos = torch.searchsorted(sorted_anchor, cur.anchor.contiguous()).clamp(max=sorted_anchor.shape[1] - 1)
            parent = perm.gather(1, pos)
            hidden = prev_out.gather(1, parent[..., None].expand(-1, -1, prev_out.shape[-1]))
        start = 0 if keys is None else keys.anchor.shape[1]
        if keys is None:
            keys, keys_real = cur, real
        else:
            keys = Elements(torch.cat([keys.anchor, cur.anchor], 1), torch.cat([keys.depth, cur.depth], 1),
                            torch.cat([keys.doc, cur.doc], 1))
            keys_real = torch.cat([keys_real, real], 1)
        mask = peagle_mask(cur, keys) & real[..., None] & keys_real[:, None, :]   # (B, W, S)
        mask[:, :, start:] |= torch.eye(W, dtype=torch.bool, device=dev) & ~real[..., None]  # padding sees itself
        positions = torch.where(real, cur.anchor + d, 0)
        prenorm, normed = drafter(ids, hidden, cache, positions=positions, attn_mask=mask[:, None], logits=False)
        outs.append(normed[real])
        order.append(index[real])
        prev_out = prenorm
        prev_anchor = torch.where(real, cur.anchor, n)                       # padding sorts last, never a parent
    normed_all = torch.empty(len(el), outs[0].shape[-1], dtype=outs[0].dtype, device=dev)
    normed_all[torch.cat(order)] = torch.cat(outs)
    every = torch.ones(len(el), dtype=torch.bool, device=dev)
    parts = _loss_from_normed(drafter, normed_all, el, data, max_depth, every)
    if backward:
        (parts.loss_sum / (normalizer or 1.0)).backward()
        parts = LossParts(parts.loss_sum.detach(), parts.count, parts.correct, parts.total)
    return parts


def padded_loss(drafter: Eagle3Drafter, el: Elements, data: SeqData, *, method: str, **kwargs) -> LossParts:
    """Packed conversations as a padded batch: :func:`padded_parallel_loss` (P-EAGLE) or
    :func:`padded_sequential_loss` (EAGLE-3)."""
    if method == "peagle":
        return padded_parallel_loss(drafter, el, data, **kwargs)
    if method == "eagle":
        return padded_sequential_loss(drafter, el, data, **kwargs)
    if method == "dspark":
        from .blocks import block_loss
        return block_loss(drafter, el, data, **kwargs)
    raise ValueError(f"unknown training method {method!r}; use 'peagle', 'eagle' or 'dspark'")


def sequence_loss(drafter: Eagle3Drafter, el: Elements, data: SeqData, *, method: str, max_depth: int,
                  num_segments: int = 1, normalizer: float | None = None, backward: bool = False,
                  attention: str = "dense") -> LossParts:
    """Loss of one sequence. With ``backward``, calls ``(loss / normalizer).backward()`` per segment.

    ``num_segments > 1`` runs P-EAGLE's sequence partitioning: peak memory follows the largest
    segment plus its depth-0 context instead of the whole expanded sequence.
    """
    n_el = len(el)
    if method == "dspark":                               # blocks: one layout, no partitioning
        return padded_loss(drafter, el, data, method=method, max_depth=max_depth, normalizer=normalizer,
                           backward=backward)
    if num_segments <= 1:
        every = torch.ones(n_el, dtype=torch.bool, device=el.anchor.device)
        parts = element_losses(drafter, el, data, method, max_depth, every, attention)
        if backward:
            (parts.loss_sum / (normalizer or 1.0)).backward()
        return parts if not backward else LossParts(parts.loss_sum.detach(), parts.count, parts.correct, parts.total)
    total = None
    for seg in partition(el, data.tokens.numel(), num_segments):
        idx = torch.cat([seg.context, seg.own]).sort().values            # keeps depth-major order
        counted = torch.isin(idx, seg.own)
        parts = element_losses(drafter, el.select(idx), data, method, max_depth, counted, attention)
        if backward:
            (parts.loss_sum / (normalizer or 1.0)).backward()
            parts = LossParts(parts.loss_sum.detach(), parts.count, parts.correct, parts.total)
        total = parts if total is None else total + parts
    return total
