"""The fast engine's options, checked when written down and resolved once for a device.

``FastConfig(max_len=..., capture=..., compile=..., attention=..., prompt_graphs=...)`` refuses a bad
value where it is made (one place, naming the choices); :meth:`FastConfig.resolve` turns every
"decide for me" (``attention="auto"``, ``prompt_graphs=None``, ``max_len=None``) into what will run
on this target and drafters. The resolved config is frozen and hashable: with the method, the
drafter and K it is the key of the engine cache, so nothing downstream re-checks or re-derives it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .graphs import compile_mode
from .llama import check_attention, resolve_attention

PROMPT_BUCKET = 64       # prompt lengths are padded to a multiple of this: one captured prompt graph per bucket
CACHE_ROUND = 64         # static cache sizes are rounded up to a multiple of this


def head_dim(config) -> int:
    """A model config's attention head dim (``head_dim``, else hidden / heads)."""
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


@dataclass(frozen=True)
class FastConfig:
    """``max_len``: static cache positions (prompt + max_new_tokens + K + 1 must fit; None: fit it to the
    request, see :meth:`resolve`), rounded up to a multiple of 64. ``capture``: replay CUDA graphs (False:
    the same fixed-shape steps eagerly). ``compile``: fuse each step with ``torch.compile`` first (True or
    an inductor mode, :func:`~peagle_lab.engines.fast.graphs.compile_mode`; stored as the mode or None).
    ``attention``: ``"auto"`` (``"triton"`` on CUDA, ``"sdpa"`` elsewhere), ``"sdpa"`` or ``"triton"``.
    ``prompt_graphs``: the prompt's pass padded to ``PROMPT_BUCKET``-token buckets, one captured graph per
    bucket (None: on CUDA with ``capture``)."""
    max_len: int | None = None
    capture: bool = True
    compile: bool | str | None = None
    attention: str = "auto"
    prompt_graphs: bool | None = None

    def __post_init__(self):
        object.__setattr__(self, "compile", compile_mode(self.compile))      # a bad mode fails here
        check_attention(self.attention)
        if self.max_len is not None:
            object.__setattr__(self, "max_len", -(-int(self.max_len) // CACHE_ROUND) * CACHE_ROUND)

    def resolve(self, target, drafters=(), fit: int = 2048) -> "FastConfig":
        """This config as it runs on ``target`` with ``drafters`` (None entries skipped): attention picked with
        every model's head dim, prompt graphs decided by the device, ``max_len`` defaulting to ``fit``."""
        dims = (head_dim(target.config),) + tuple(d.cfg.head_dim for d in drafters if d is not None)
        cuda = torch.device(target.device).type == "cuda"
        attention = resolve_attention(self.attention, target.device, dims)
        prompt_graphs = (self.capture and cuda) if self.prompt_graphs is None else bool(self.prompt_graphs)
        return replace(self, max_len=self.max_len or fit, attention=attention, prompt_graphs=prompt_graphs)

    def bucket(self, prompt_len: int) -> int:
        """The padded length a prompt's pass runs at (its captured graph's)."""
        return min(-(-prompt_len // PROMPT_BUCKET) * PROMPT_BUCKET, self.max_len)
