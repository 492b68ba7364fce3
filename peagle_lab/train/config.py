"""The training config: one dataclass, built once and never changed while training, with named presets.

Its defaults are the command line's (``peagle-lab train`` reads them from here); the presets are the
shipped recipe. This module imports no torch, so the command line can read the defaults cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass
class TrainConfig:
    method: str = "peagle"              # "peagle" (parallel, mask slots) or "eagle" (sequential, TTT)
    num_layers: int = 2
    intermediate_size: int | None = None
    draft_vocab_size: int = 4096
    max_depth: int = 8                  # depths 0..max_depth-1: valid for K <= max_depth
    cod_ratio: float = 0.7
    steps: int = 200
    batch_size: int = 8                 # conversations per optimiser step
    max_len: int = 768                  # tokens per conversation (longer ones are cut)
    num_segments: int = 1
    lr: float = 1e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    checkpoint_every: int = 50
    seed: int = 0
    amp_bf16: bool = True               # bf16 autocast on CUDA (the drafter)
    target_bf16: bool = True            # the target's feature pass under bf16 autocast on CUDA (fp32 ran ~8x slower)
    layout: str = "padded"              # "padded" (the shipped drafters') | "packed" (applies num_segments): same gradient
    group_by_length: bool = False       # batches of similar lengths (less padding; still a random order of batches)
    val_k: int = 7                      # K of the validation AL replayed at each checkpoint (when replies are given)
    share_lm_head: bool = False         # no lm_head of its own: the target's (frozen), full vocabulary (Vd = V)
    mask_token_id: int | None = None    # P-EAGLE's mask token; None: an id real text never produces (unused_token_id)
    learn_mask_embedding: bool = True   # P-EAGLE: the mask token's embedding row is trained (the paper's Table 5)
    hidden_noise: float = 0.0           # uniform noise in [-a, a] on the target's features while training (never at eval)

    @classmethod
    def preset(cls, name: str, **overrides) -> "TrainConfig":
        """The shipped recipe for ``name`` ("peagle" or "eagle"), with ``overrides`` on top.

        Both presets share the target's lm_head, so ``draft_vocab_size`` must be the target's vocabulary
        (the command line sets it; here pass it as an override).

        >>> TrainConfig.preset("peagle", draft_vocab_size=49152).num_layers
        4
        >>> TrainConfig.preset("eagle").intermediate_size
        1536
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; use one of {', '.join(PRESETS)}")
        return replace(cls(**PRESETS[name]), **overrides)


# The recipe of the shipped drafters (see README's GPU recipe and docs/).
PRESETS: dict[str, dict] = {
    "peagle": dict(method="peagle", num_layers=4, intermediate_size=384, share_lm_head=True, max_depth=8,
                   cod_ratio=0.8, hidden_noise=0.05, learn_mask_embedding=True),
    "eagle": dict(method="eagle", num_layers=1, intermediate_size=1536, share_lm_head=True),
}
