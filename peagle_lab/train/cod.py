"""Which (anchor, depth) elements a sequence trains on, who sees whom, and how to split them.

Notation: the data sequence is ``x_0 .. x_{N-1}``; the target's features at position ``t`` are
``h_t`` and its next-token distribution there is ``p_t`` (it predicts ``x_{t+1}``).

An *element* ``(a, d)`` is the drafter slot that, standing at anchor ``a`` (the last position
whose target features are known), predicts the token ``d+2`` steps after ``a`` from the
distribution ``p_{a+1+d}``. Its position id is ``a + d``. Depth 0 reads the real token
``x_{a+1}`` and ``fc(h_a)``; deeper elements read the mask token and ``fc(mask_hidden)``
(P-EAGLE) or the true token ``x_{a+1+d}`` and the drafter's own output at ``(a, d-1)``
(EAGLE-3's training-time test).

**COD sampling** (from PARD): depth 0 keeps every anchor; depth ``d`` keeps about ``r^d`` of
them, drawn from the anchors kept at depth ``d-1`` -- so every kept element has its parent.

**The P-EAGLE mask**: key ``k`` is visible to query ``q`` iff both are in the same document and
``(depth_k == 0 and anchor_k <= anchor_q) or (anchor_k == anchor_q and depth_k <= depth_q)``.

**Sequence partitioning** (P-EAGLE's Algorithm 1): positions are cut into S segments. Depth 0
and 1 elements belong to the segment of their position, deeper ones to their parent's; each
segment is run with every earlier depth-0 element prepended as context (recomputed, so gradients
flow through it), and only its own elements are supervised. Summing the segments' losses, each
divided by the global count, gives exactly the single-pass loss and gradient.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Elements:
    anchor: torch.Tensor     # (E,) long
    depth: torch.Tensor      # (E,) long
    doc: torch.Tensor | None = None   # (E,) long document id when several conversations are packed

    def __post_init__(self):
        if self.doc is None:
            self.doc = torch.zeros_like(self.anchor)

    def __len__(self) -> int:
        return self.anchor.numel()

    @property
    def position(self) -> torch.Tensor:
        return self.anchor + self.depth

    def select(self, index: torch.Tensor) -> "Elements":
        return Elements(self.anchor[index], self.depth[index], self.doc[index])

    def concat(self, other: "Elements") -> "Elements":
        return Elements(torch.cat([self.anchor, other.anchor]), torch.cat([self.depth, other.depth]),
                        torch.cat([self.doc, other.doc]))


def _same_doc(doc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ok = b < doc.numel()
    ok[ok.clone()] = doc[a[ok]] == doc[b[ok]]
    return ok


def cod_sample(seq_len: int, max_depth: int, keep_ratio: float = 0.7, supervised: torch.Tensor | None = None,
               generator: torch.Generator | None = None, doc: torch.Tensor | None = None) -> Elements:
    """Elements for a sequence of ``seq_len`` tokens, depths ``0 .. max_depth-1``, depth-major order.

    ``supervised[t]`` says whether token ``x_t`` may be a training target (e.g. response tokens
    only); deeper elements are drawn only where their target token is supervised. ``doc[t]``
    (packed conversations) keeps every element inside one conversation.
    """
    if seq_len < 2:
        raise ValueError("a training sequence needs at least 2 tokens")
    if supervised is None:
        supervised = torch.ones(seq_len, dtype=torch.bool)
    if doc is None:
        doc = torch.zeros(seq_len, dtype=torch.long)
    first = torch.arange(seq_len - 1)                     # anchors need x_{a+1} of the same conversation
    anchors = [first[_same_doc(doc, first, first + 1)]]
    for d in range(1, max_depth):
        parents = anchors[-1]
        target_pos = parents + 2 + d                      # element (a, d) predicts x_{a+2+d}
        ok = _same_doc(doc, parents, target_pos)
        ok[ok.clone()] = supervised[target_pos[ok]]
        pool = parents[ok]
        keep = int(round(len(pool) * keep_ratio)) if d > 0 else len(pool)
        if keep == 0:
            break
        choice = torch.randperm(len(pool), generator=generator)[:keep]
        anchors.append(pool[choice].sort().values)
    cat = torch.cat(anchors)
    return Elements(cat, torch.cat([torch.full_like(a, d) for d, a in enumerate(anchors)]), doc[cat])


def peagle_mask(q: Elements, k: Elements) -> torch.Tensor:
    """(Eq, Ek) bool: True where query may attend to key (see module docstring).

    Batched elements (tensors of shape (B, E)) give one mask per row, (B, Eq, Ek)."""
    qa, qd = q.anchor[..., :, None], q.depth[..., :, None]
    ka, kd = k.anchor[..., None, :], k.depth[..., None, :]
    same_doc = q.doc[..., :, None] == k.doc[..., None, :]
    return same_doc & (((kd == 0) & (ka <= qa)) | ((ka == qa) & (kd <= qd)))


def _padded(t: torch.Tensor, length: int, fill: int) -> torch.Tensor:
    out = torch.full((length,), fill, dtype=t.dtype, device=t.device)
    out[: t.numel()] = t
    return out


def peagle_block_mask(q: Elements, k: Elements, block: int = 128):
    """The same mask as a flex-attention ``BlockMask``: never materialised as (Eq, Ek).

    Only the (block x block) tiles that hold a visible pair are kept, so with elements ordered by
    conversation the cost follows sum(E_i^2) over conversations and the depth structure, not
    (sum E_i)^2. Lookup tensors are padded past the last tile with document ids that never match.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    nq, nk = len(q), len(k)
    lq, lk = -(-nq // block) * block + block, -(-nk // block) * block + block
    qa, qd, qdoc = _padded(q.anchor, lq, 0), _padded(q.depth, lq, 0), _padded(q.doc, lq, -1)
    ka, kd, kdoc = _padded(k.anchor, lk, 0), _padded(k.depth, lk, 0), _padded(k.doc, lk, -2)

    def mask_mod(b, h, qi, ki):
        same = qdoc[qi] == kdoc[ki]
        return same & (((kd[ki] == 0) & (ka[ki] <= qa[qi])) | ((ka[ki] == qa[qi]) & (kd[ki] <= qd[qi])))

    dev = q.anchor.device
    return create_block_mask(mask_mod, None, None, nq, nk, device=dev, BLOCK_SIZE=block, _compile=dev.type == "cuda")


ATTENTION_BACKENDS = ("auto", "dense", "flex")


def attention_mask(q: Elements, k: Elements, backend: str = "dense"):
    """The P-EAGLE mask for ``backend``: "dense" (bool tensor), "flex" (BlockMask), "auto" (flex on
    CUDA, dense elsewhere: PyTorch's flex attention has no backward on CPU)."""
    if backend not in ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; use one of {', '.join(ATTENTION_BACKENDS)}")
    if backend == "auto":
        backend = "flex" if q.anchor.device.type == "cuda" else "dense"
    return peagle_block_mask(q, k) if backend == "flex" else peagle_mask(q, k)


def peagle_mask_bruteforce(q: Elements, k: Elements) -> torch.Tensor:
    """The same mask, written as the definition reads (for tests)."""
    out = torch.zeros(len(q), len(k), dtype=torch.bool)
    for i in range(len(q)):
        for j in range(len(k)):
            a_q, d_q = int(q.anchor[i]), int(q.depth[i])
            a_k, d_k = int(k.anchor[j]), int(k.depth[j])
            same_doc = int(q.doc[i]) == int(k.doc[j])
            out[i, j] = same_doc and ((d_k == 0 and a_k <= a_q) or (a_k == a_q and d_k <= d_q))
    return out


@dataclass
class Segment:
    own: torch.Tensor        # indices (into the full element list) supervised in this segment
    context: torch.Tensor    # indices of earlier depth-0 elements prepended as keys/values


def partition(el: Elements, seq_len: int, num_segments: int) -> list[Segment]:
    """Split elements into ``num_segments`` segments by position (Algorithm 1)."""
    if num_segments < 1:
        raise ValueError("num_segments must be >= 1")
    bounds = torch.linspace(0, seq_len, num_segments + 1).round().long().to(el.anchor.device)
    home_pos = torch.where(el.depth == 0, el.anchor, el.anchor + 1)   # depth >= 1 follow (a, 1)
    seg = torch.bucketize(home_pos, bounds[1:-1], right=True)        # (E,)
    segments = []
    for s in range(num_segments):
        own = (seg == s).nonzero().squeeze(-1)
        context = ((seg < s) & (el.depth == 0)).nonzero().squeeze(-1)
        if own.numel():
            segments.append(Segment(own, context))
    return segments
