"""What the target says about a batch of conversations: the drafter's training (and replay) input.

The target is frozen, so its features and logits are computed online, without gradient, for each
batch: conversations are padded into one target pass and packed back into a single sequence
(:class:`~peagle_lab.train.loss.SeqData`, conversation ids in ``.doc``).
"""
from __future__ import annotations

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
