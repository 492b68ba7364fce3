"""The one place that touches transformers' KV-cache API.

transformers 5.x reshaped its cache classes several times (``DynamicCache`` gained a ``config``
argument and per-layer objects; older releases kept ``key_cache`` / ``value_cache`` lists). The
engine needs only three things from a cache, so they live here and nowhere else:

* :func:`new_cache` -- an empty cache for a model;
* :func:`cache_length` -- how many positions it holds;
* :func:`crop` -- roll it back to its first ``n`` positions (speculative decoding throws away
  the KV entries of rejected draft tokens).
"""
from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


def new_cache(model: torch.nn.Module) -> DynamicCache:
    """An empty dynamic cache for ``model`` (passing its config where this transformers takes it)."""
    if "config" in inspect.signature(DynamicCache.__init__).parameters:
        return DynamicCache(config=model.config)
    return DynamicCache()


def cache_length(cache: DynamicCache) -> int:
    """Number of positions stored in ``cache``."""
    return int(cache.get_seq_length())


def crop(cache: DynamicCache, length: int) -> None:
    """Keep only the first ``length`` positions of every layer, in place."""
    current = cache_length(cache)
    if length > current or length < 0:
        raise ValueError(f"cannot crop a cache of {current} positions to {length}")
    if length == current:
        return
    if hasattr(cache, "crop") and getattr(cache, "is_croppable", True):
        # A negative argument means "drop that many positions" in every 4.x/5.x release; a
        # positive one (keep that many) is deprecated from 5.18.
        cache.crop(length - current)
        return
    # Older layout: parallel lists of (B, heads, T, head_dim) tensors.
    for i in range(len(cache.key_cache)):
        cache.key_cache[i] = cache.key_cache[i][..., :length, :]
        cache.value_cache[i] = cache.value_cache[i][..., :length, :]
    cache._seen_tokens = length
