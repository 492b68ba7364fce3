"""The draft vocabulary: the ``Vd`` target tokens the drafter may propose.

A drafter's ``lm_head`` is the biggest part of it (``Vd x H``); restricting it to the tokens the
target actually writes costs little acceptance. vLLM reads the mapping as ``d2t`` (draft index
-> *offset* to the target id) and ``t2d`` (bool mask over the target vocabulary); see
:meth:`peagle_lab.drafter.Eagle3Drafter.set_draft_vocab`.
"""
from __future__ import annotations

import torch


def token_counts(samples, vocab_size: int) -> torch.Tensor:
    """How often each target token appears in the replies (the tokens a drafter must predict)."""
    replies = [s.ids[s.prompt_len:] for s in samples]
    if not replies:
        return torch.zeros(vocab_size, dtype=torch.long)
    # one bincount over all replies: a per-sample loop of tiny ops crawled on a busy 16-core GPU host
    return torch.bincount(torch.cat(replies).long(), minlength=vocab_size)[:vocab_size]


def build_draft_vocab(counts: torch.Tensor, size: int) -> tuple[torch.Tensor, float]:
    """The ``size`` most frequent target ids (sorted ascending) and the share of reply tokens they cover."""
    if size > counts.numel():
        raise ValueError(f"draft vocab of {size} exceeds the target vocab of {counts.numel()}: pass "
                         f"--draft-vocab-size {counts.numel()} or less, or --set share_lm_head=true for the target's "
                         "whole vocabulary")
    ids = counts.topk(size).indices.sort().values
    total = int(counts.sum())
    return ids, float(counts[ids].sum()) / total if total else 0.0

