"""What one training sequence holds, and the parts of a loss over it.

Its own module so that every loss (:mod:`.loss` for EAGLE-3 and P-EAGLE, :mod:`.blocks` for DSpark)
reads these without importing another loss: ``loss -> blocks`` stays one-way. :mod:`.loss` re-exports
all three names.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cod import Elements


@dataclass
class SeqData:
    tokens: torch.Tensor          # (N,) long
    aux: torch.Tensor             # (N, 3H)
    target_logits: torch.Tensor   # (N, Vd) target logits at the draft-vocab ids
    supervised: torch.Tensor      # (N,) bool: x_t may be a training target
    doc: torch.Tensor | None = None   # (N,) conversation id when several are packed


@dataclass
class LossParts:
    loss_sum: torch.Tensor        # sum of per-element losses (scalar)
    count: int                    # supervised elements
    correct: torch.Tensor         # (max_depth,) top-1 agreements with the target per depth
    total: torch.Tensor           # (max_depth,) supervised elements per depth

    def __add__(self, other: "LossParts") -> "LossParts":
        return LossParts(self.loss_sum + other.loss_sum, self.count + other.count,
                         self.correct + other.correct, self.total + other.total)


def supervised_mask(el: Elements, data: SeqData) -> torch.Tensor:
    """(E,) bool: the element's target token x_{a+2+d} exists and is supervised."""
    n = data.tokens.numel()
    tgt = el.anchor + 2 + el.depth
    ok = tgt < n
    ok[ok.clone()] = data.supervised[tgt[ok]]
    return ok
