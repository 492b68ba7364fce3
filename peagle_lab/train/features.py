"""What the target says about a batch of conversations: the drafter's training (and replay) input.

The target is frozen, so its features and logits are computed online, without gradient, for each
batch: conversations are padded into one target pass and packed back into a single sequence
(:class:`~peagle_lab.train.loss.SeqData`, conversation ids in ``.doc``). In training,
:func:`with_feature_noise` blurs those features a little.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from .data import Sample
from .loss import SeqData


@torch.no_grad()
def packed_layout(samples: list[Sample], max_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens, supervised, doc)`` of ``samples`` packed into one sequence, each cut at ``max_len``: what
    :func:`target_batch` returns besides the target's features, known without running the target."""
    rows = [s.ids[:max_len] for s in samples]
    return (torch.cat(rows), torch.cat([s.supervised[:max_len] for s in samples]),
            torch.cat([torch.full((r.numel(),), i, dtype=torch.long) for i, r in enumerate(rows)]))


def target_batch(target, samples: list[Sample], draft_ids: torch.Tensor, max_len: int, bf16: bool = False) -> SeqData:
    """Run the target over ``samples`` and pack them into one sequence (doc ids in ``.doc``).

    ``bf16``: the target's pass under bf16 autocast (CUDA only); logits and features come back in float32."""
    rows = [s.ids[:max_len] for s in samples]
    width = max(r.numel() for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : r.numel()] = r
        attn[i, : r.numel()] = 1
    amp = bf16 and target.device.type == "cuda"
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        hidden, aux = target.features(ids, attn)                            # (B, N, H), (B, N, 3H)
        w = target.model.get_output_embeddings().weight[draft_ids.to(target.device)]  # (Vd, H)
        logits = hidden @ w.T                                               # (B, N, Vd)
    aux, logits = aux.float(), logits.float()
    keep = attn.bool().to(target.device)
    tokens, sup, doc = packed_layout(samples, max_len)
    return SeqData(tokens.to(target.device), aux[keep], logits[keep], sup.to(target.device), doc.to(target.device))


def with_feature_noise(data: SeqData, amplitude: float, seed: int, global_ids: list[int] | None = None) -> SeqData:
    """``data`` with uniform noise in ``[-amplitude, amplitude]`` added to the target's features (training only:
    the drafter learns not to lean on exact feature values, which differ a little at inference -- another
    dtype, a batched kernel, or its own earlier drafts). Seeded per step, so a resumed run repeats it.

    With ``global_ids`` (the packed conversations' indices in the global batch, in ``data.doc`` order),
    each conversation's noise comes from a generator of its own, seeded by ``(seed, its index)``: the
    noise a conversation gets does not depend on which process packs it (a step under torchrun equals
    the single-process step)."""
    device = data.aux.device
    if global_ids is None:
        g = torch.Generator(device=device).manual_seed(seed)
        noise = torch.rand(data.aux.shape, generator=g, device=device, dtype=data.aux.dtype)  # (N, 3H)
    else:
        sizes = torch.bincount(data.doc.cpu(), minlength=len(global_ids)).tolist()
        parts = []
        for gid, n in zip(global_ids, sizes):
            g = torch.Generator(device=device).manual_seed(seed * 4099 + gid)
            parts.append(torch.rand((n, data.aux.shape[1]), generator=g, device=device, dtype=data.aux.dtype))
        noise = torch.cat(parts)
    return replace(data, aux=data.aux + (2 * noise - 1) * amplitude)
