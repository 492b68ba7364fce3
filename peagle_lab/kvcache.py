"""The one place that touches transformers' KV-cache API.

transformers' cache classes keep changing shape (``DynamicCache`` takes the model's ``config`` and
holds one object per layer, with ``keys`` / ``values`` tensors, since the 5.0 this package requires).
The engine needs only three things from a cache, so they live here and nowhere else:

* :func:`new_cache` -- an empty cache for a model;
* :func:`cache_length` -- how many positions it holds;
* :func:`crop` -- roll it back to its first ``n`` positions (speculative decoding throws away
  the KV entries of rejected draft tokens).

The batched engine (:mod:`peagle_lab.engines.batch_cache`) needs two more, both plain tensor surgery on
every layer's ``(B, heads, T, head_dim)`` keys and values:

* :func:`rewrite_tail` -- per row, move chosen slots to the end of that row's valid prefix;
* :func:`select_rows` -- keep only some rows (finished requests leave the batch).
"""
from __future__ import annotations

import torch
from transformers import DynamicCache


def new_cache(model: torch.nn.Module) -> DynamicCache:
    """An empty dynamic cache for ``model``."""
    return DynamicCache(config=model.config)


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
    if not getattr(cache, "is_croppable", True):
        raise ValueError(f"this {type(cache).__name__} cannot be cropped; speculative decoding needs a DynamicCache")
    # A negative argument means "drop that many positions" in every 5.x release; a positive one
    # (keep that many) is deprecated from 5.18.
    cache.crop(length - current)


def _layers(cache: DynamicCache):
    """Yield ``(get, set)`` access to every filled layer's (keys, values)."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            def put(k, v, layer=layer):
                layer.keys, layer.values = k, v
            yield (layer.keys, layer.values), put


def rewrite_tail(cache: DynamicCache, start: int, index: torch.Tensor) -> None:
    """Slots ``start .. start+n-1`` of row ``b`` become the old slots ``index[b]`` (``index (B, n)``).

    The cache then holds ``start + n`` positions. Only the tail is copied; the prefix is untouched.
    """
    B, n = index.shape
    for (k, v), put in _layers(cache):
        idx = index.to(k.device)[:, None, :, None].expand(B, k.shape[1], n, k.shape[3])   # (B, heads, n, hd)
        k_tail, v_tail = k.gather(2, idx), v.gather(2, idx)                                # copies first
        k, v = k[:, :, : start + n], v[:, :, : start + n]
        if k.shape[2] < start + n:
            raise ValueError(f"cannot grow a cache of {k.shape[2]} positions to {start + n} by rewriting")
        k[:, :, start:], v[:, :, start:] = k_tail, v_tail
        put(k, v)


def select_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keep only batch rows ``rows`` (a 1-D index tensor), in that order."""
    for (k, v), put in _layers(cache):
        r = rows.to(k.device)
        put(k.index_select(0, r), v.index_select(0, r))
