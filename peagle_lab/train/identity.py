"""What a training run is made from, fingerprinted: the data (a hash of every conversation's tokens) and the
target (its embedding and 1-D weights, its config), so a resumed run can refuse other data or another target."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

TARGET_KEYS = ("vocab_size", "hidden_size", "num_layers", "aux_layer_ids", "weights")   # "name" is only reported


def data_fingerprint(samples: list, chunk: int = 4096) -> str:
    """sha256 of the conversations in their order: every token id and every prompt length.

    Two runs share a fingerprint exactly when they train on the same conversations in the same order,
    wherever the files live; it reads what is already in memory (about 1 s for 30M tokens)."""
    h = hashlib.sha256(f"{len(samples)} conversations".encode())
    for start in range(0, len(samples), chunk):
        part = samples[start: start + chunk]
        h.update(torch.tensor([[s.ids.numel(), s.prompt_len] for s in part], dtype=torch.int64).numpy().tobytes())
        h.update(torch.cat([s.ids.reshape(-1) for s in part]).to(torch.int32).numpy().tobytes())
    return h.hexdigest()


def _one_d_weights(target) -> dict[str, torch.Tensor]:
    """The 1-D weights (norms, biases) by name, from a loaded target or its Hugging Face folder."""
    if hasattr(target, "model"):
        return {n: p.detach() for n, p in target.model.named_parameters() if p.dim() == 1}
    from safetensors import safe_open

    out = {}
    for f in sorted(Path(target).glob("*.safetensors")):
        with safe_open(str(f), "pt") as handle:
            for key in handle.keys():
                if len(handle.get_slice(key).get_shape()) == 1:
                    out[key] = handle.get_tensor(key)
    return out


def target_identity(target) -> dict:
    """What data and checkpoints record of their target: its name (reported, never compared: one model may be
    named by a Hub id or a folder), shape, taps, and a sha256 of its input embedding and 1-D weights (norms)
    rounded to bfloat16, so fp32 and bf16 loads of one model agree and a fine-tuned model differs.

    ``target``: a loaded :class:`~peagle_lab.target.Target`, or a Hugging Face folder (read, never built)."""
    from ..materialise import embedding_fingerprint, target_embedding
    from ..target import default_aux_layer_ids

    h = hashlib.sha256(embedding_fingerprint(target_embedding(target)).encode())
    for name, w in sorted(_one_d_weights(target).items()):
        h.update(name.encode())
        h.update(w.to(torch.bfloat16).cpu().contiguous().view(torch.int16).numpy().tobytes())
    if hasattr(target, "model"):
        shape = (target.name, target.vocab_size, target.hidden_size, target.num_layers, list(target.aux_layer_ids))
    else:
        raw = json.loads((Path(target) / "config.json").read_text())
        raw = raw.get("text_config") or raw
        layers = int(raw["num_hidden_layers"])
        shape = (os.fspath(target), int(raw["vocab_size"]), int(raw["hidden_size"]), layers,
                 list(default_aux_layer_ids(layers)))
    keys = ("name", "vocab_size", "hidden_size", "num_layers", "aux_layer_ids")
    return {**dict(zip(keys, shape)), "weights": h.hexdigest()}


def target_difference(recorded: dict, ours: dict) -> str | None:
    """How two :func:`target_identity` records differ (None: the same target)."""
    keys = [k for k in TARGET_KEYS if recorded.get(k) != ours.get(k)]
    if not keys:
        return None
    what = ", ".join("weights" if k == "weights" else f"{k} {recorded.get(k)} vs {ours.get(k)}" for k in keys)
    return f"target {recorded.get('name')} vs {ours.get('name')} ({what})"
