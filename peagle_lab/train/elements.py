"""What one training step supervises, drawn per conversation: COD's (anchor, depth) elements, or DSpark's blocks.

Each conversation's elements come from a generator seeded by ``(seed, step, its index in the global batch)``, so
they do not depend on which process, or which micro-batch, packs it: a step under torchrun, or split in
micro-batches, supervises exactly what the single-process step does.
"""
from __future__ import annotations

import torch

from .blocks import block_elements
from .cod import Elements, cod_sample
from .config import TrainConfig
from .loss import SeqData


def _cod(n: int, supervised: torch.Tensor, cfg: TrainConfig, g: torch.Generator) -> Elements:
    return cod_sample(n, cfg.max_depth, cfg.cod_ratio, supervised=supervised, generator=g)


def _blocks(n: int, supervised: torch.Tensor, cfg: TrainConfig, g: torch.Generator) -> Elements:
    return block_elements(n, cfg.max_depth, cfg.blocks, supervised, g)


# How each method draws a conversation's elements: COD sampling, or DSpark's ``cfg.blocks`` anchors of
# ``max_depth`` slots each.
SAMPLERS = {"eagle": _cod, "peagle": _cod, "dspark": _blocks}


def elements_for_conversations(data: SeqData, cfg: TrainConfig, step: int, global_ids: list[int]) -> Elements:
    """The elements of the packed conversations in ``data`` (``global_ids``: their indices in the global batch,
    in ``data.doc`` order), by ``cfg.method``'s sampler, each conversation from its own seeded generator."""
    sample = SAMPLERS[cfg.method]
    parts, offset = [], 0
    doc = data.doc.cpu()
    for local, gid in enumerate(global_ids):
        n = int((doc == local).sum())
        g = torch.Generator().manual_seed((cfg.seed * 1_000_003 + step) * 4099 + gid)
        el = sample(n, data.supervised[offset: offset + n].cpu(), cfg, g)
        parts.append(Elements(el.anchor + offset, el.depth, torch.full_like(el.anchor, local)))
        offset += n
    out = parts[0]
    for p in parts[1:]:
        out = out.concat(p)
    return out


cod_for_conversations = elements_for_conversations     # the name benchmarks/eval_generalization.py imports
