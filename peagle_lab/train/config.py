"""The training config: one dataclass, built once and never changed while training, with named presets.

Its defaults are the command line's (``peagle-lab train`` reads them from here); ``PRESETS`` are the
recipe of README's GPU section (``train --preset peagle|eagle``), and ``BOUNDS``/``CHOICES`` say what
each setting accepts (``train --set KEY=VALUE`` and the flags check against them). This module imports
no torch, so the command line can read it cheaply.
"""
from __future__ import annotations

import math
import typing
from dataclasses import dataclass, fields, replace


@dataclass
class TrainConfig:
    method: str = "peagle"              # "peagle" (parallel, mask slots), "eagle" (sequential, TTT) or "dspark"
    num_layers: int = 2
    intermediate_size: int | None = None
    draft_vocab_size: int = 4096
    max_depth: int = 8                  # depths 0..max_depth-1: valid for K <= max_depth
    cod_ratio: float = 0.7
    steps: int = 200
    batch_size: int = 8                 # conversations per optimiser step
    micro_batches: int = 1              # run forward+backward on the step's conversations in this many slices
                                        # (less peak memory, the same gradient)
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
    layout: str = "padded"              # "padded" (the shipped drafters') | "packed" (num_segments): same gradient
    group_by_length: bool = False       # batches of similar lengths (less padding; still a random order of batches)
    val_k: int = 7                      # K of the validation AL replayed at each checkpoint (when replies are given)
    share_lm_head: bool = False         # no lm_head of its own: the target's (frozen), full vocabulary (Vd = V)
    mask_token_id: int | None = None    # P-EAGLE's mask token; None: an id real text never produces (unused_token_id)
    learn_mask_embedding: bool = True   # P-EAGLE: the mask token's embedding row is trained (the paper's Table 5)
    hidden_noise: float = 0.0           # uniform noise in [-a, a] on the target's features in training (not eval)
    markov_rank: int = 32               # DSpark: rank r of the Markov head (markov_w1 is V x r)
    blocks: int = 64                    # DSpark: blocks (anchors) drawn per conversation a step, max_depth slots each
    markov_head: bool = True            # DSpark: false trains the parallel backbone alone (DFlash's, causal blocks)

    @classmethod
    def preset(cls, name: str, **overrides) -> "TrainConfig":
        """The recipe ``name`` ("peagle" or "eagle") of README's GPU section, with ``overrides`` on top.

        >>> TrainConfig.preset("peagle").num_layers, TrainConfig.preset("peagle", steps=10).steps
        (4, 10)
        >>> TrainConfig.preset("eagle").method
        'eagle'
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; use one of {', '.join(PRESETS)}")
        return replace(cls(**PRESETS[name]), **overrides)


# The GPU recipe (README): P-EAGLE with 4 layers, COD to depth 8 keeping 80% a depth, feature noise 0.05 and a
# learned mask row; the EAGLE-3 baseline with one layer. Both: batches of 32 similar-length conversations and a
# draft vocabulary of 8,192 tokens, 20,000 steps. Everything else is TrainConfig's default.
_BOTH = dict(group_by_length=True, batch_size=32, draft_vocab_size=8192, steps=20000)
PRESETS: dict[str, dict] = {
    "peagle": dict(method="peagle", num_layers=4, cod_ratio=0.8, hidden_noise=0.05, **_BOTH),
    "eagle": dict(method="eagle", num_layers=1, **_BOTH),
    # DSpark at the shipped pair's scale (docs/dspark.md): 2 layers, MLP 256, Markov rank 32, draft vocabulary
    # 4,096, blocks of 8 (15 MB in bf16, beside the pair's 13 and 16)
    "dspark": dict(method="dspark", num_layers=2, intermediate_size=256, markov_rank=32, draft_vocab_size=4096,
                   warmup_steps=100, group_by_length=True, batch_size=32, steps=5000),
}

K_MAX = 128                             # the deepest draft a setting accepts (the shipped drafters train depth 8)

# What each numeric setting accepts: (low, high, low end open); None: no bound on that side.
BOUNDS: dict[str, tuple] = {
    "num_layers": (1, None, False), "intermediate_size": (1, None, False), "draft_vocab_size": (1, None, False),
    "max_depth": (1, K_MAX, False), "cod_ratio": (0, 1, False), "steps": (1, None, False),
    "batch_size": (1, None, False), "micro_batches": (1, None, False), "max_len": (2, None, False),
    "num_segments": (1, None, False),
    "lr": (0, None, True), "warmup_steps": (0, None, False), "weight_decay": (0, None, False),
    "grad_clip": (0, None, True), "checkpoint_every": (1, None, False), "seed": (0, None, False),
    "val_k": (1, K_MAX, False), "mask_token_id": (0, None, False), "hidden_noise": (0, None, False),
    "markov_rank": (1, None, False), "blocks": (1, None, False),
}
CHOICES: dict[str, tuple[str, ...]] = {"method": ("peagle", "eagle", "dspark"), "layout": ("padded", "packed")}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def allowed(key: str, kind: type) -> str:
    """What ``key`` accepts, in words: "a whole number in [1, 128]", "true or false", "peagle or eagle"."""
    if key in CHOICES:
        return " or ".join(CHOICES[key])
    if kind is bool:
        return "true or false"
    if key in BOUNDS:
        lo, hi, lo_open = BOUNDS[key]
        word = "a whole number" if kind is int else "a number"
        return f"{word} {'>' if lo_open else '>='} {lo}" if hi is None else \
            f"{word} in {'(' if lo_open else '['}{lo}, {hi}]"
    return "a word"


def field_types(cls: type) -> dict[str, tuple[type, bool]]:
    """``{field: (type, may be None)}`` of a dataclass with annotations like ``int | None``."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        args = [a for a in typing.get_args(hints[f.name]) or (hints[f.name],)]
        out[f.name] = (next(a for a in args if a is not type(None)), type(None) in args)
    return out


def parse_value(key: str, text: str, kind: type, optional: bool = False):
    """``text`` as the value of setting ``key`` of type ``kind``; ValueError naming what it accepts.

    >>> parse_value("cod_ratio", "0.8", float), parse_value("group_by_length", "yes", bool)
    (0.8, True)
    >>> parse_value("max_depth", "0", int)
    Traceback (most recent call last):
    ...
    ValueError: max_depth=0: expected a whole number in [1, 128]
    """
    want = allowed(key, kind) + (" (or none)" if optional else "")
    if optional and text.lower() == "none":
        return None
    try:
        if kind is bool:
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError
            value = text.lower() in _TRUE
        else:
            value = kind(text)
    except ValueError:
        raise ValueError(f"{key}={text}: expected {want}") from None
    bad = key in CHOICES and value not in CHOICES[key]
    if key in BOUNDS and not bad:
        lo, hi, lo_open = BOUNDS[key]
        bad = not math.isfinite(value) or value < lo or (lo_open and value == lo) or (hi is not None and value > hi)
    if bad:
        raise ValueError(f"{key}={text}: expected {want}")
    return value
