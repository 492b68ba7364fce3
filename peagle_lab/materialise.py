"""A P-EAGLE drafter with a learned mask row, turned into the folder vLLM loads.

A drafter trained with a learned mask embedding stores only that row (``mask_embedding``, shape
``(1, H)``): the rest of its input embedding is the target's, unchanged. That keeps the shipped
package small (one row of 576 numbers instead of a 49,152 x 576 table). vLLM, however, reads a
drafter's own ``embed_tokens.weight`` when the checkpoint has one and the target's otherwise; it
has no notion of "the target's table with one row replaced". So on first use we write, once,
a folder whose ``embed_tokens.weight`` is the target's embedding with the learned row in place
and everything else copied unchanged (``method: eagle3``, ``parallel_drafting: true`` load it as
any other P-EAGLE drafter).

The folder lives in the cache beside the converted target (``$PEAGLE_CACHE/drafters/``), is
named by a hash of the drafter's files and of the target's embedding, and is written atomically
(a temp folder renamed into place), so a crash never leaves a half-written drafter behind; it only
ever writes into its own cache folder (a folder there that peagle-lab did not write is refused, never
deleted), and the drafter folder it reads is left as it is. A
target whose embedding differs from the one the drafter was trained with is refused: the
drafter's other weights were fitted to that table.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .assets import _locked, cache_dir
from .atomic import MARKER, atomic_dir

FINGERPRINT_KEY = "peagle_target_embedding_sha256"


def embedding_fingerprint(weight: torch.Tensor) -> str:
    """sha256 of the embedding table rounded to bfloat16 (so fp32 and bf16 loads of one target agree)."""
    raw = weight.detach().to(torch.bfloat16).cpu().contiguous().view(torch.int16).numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()


def needs_materialising(path: str | os.PathLike) -> bool:
    """True when the drafter folder stores a learned mask row instead of a full ``embed_tokens``."""
    from safetensors import safe_open

    for f in sorted(Path(path).glob("*.safetensors")):
        try:
            with safe_open(str(f), "pt") as handle:
                if "mask_embedding" in handle.keys():
                    return True
        except Exception as err:                    # safetensors' own error type: a truncated or damaged file
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
            raise ValueError(f"{f} is truncated or damaged ({first}); export or copy the drafter again") from None
    return False


def target_embedding(target) -> torch.Tensor:
    """The target's input embedding ``(V, H)`` on the CPU, from a loaded target or its HF folder."""
    if hasattr(target, "model"):
        return target.model.get_input_embeddings().weight.detach().cpu()
    from safetensors import safe_open

    folder = Path(target)
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as handle:
            for key in handle.keys():
                if key.endswith("embed_tokens.weight"):
                    return handle.get_tensor(key)
    raise FileNotFoundError(f"no embed_tokens.weight in {folder}'s safetensors; pass the loaded target instead")


def _digest(path: Path, fingerprint: str) -> str:
    h = hashlib.sha256(fingerprint.encode())
    for f in sorted(path.iterdir()):
        if f.suffix in (".json", ".safetensors") and f.name != MARKER:   # the marker's time is no part of it
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def materialise_for_vllm(path: str | os.PathLike, target) -> Path:
    """The vLLM-loadable folder for drafter ``path`` (``path`` itself when nothing needs writing).

    ``target`` is a :class:`peagle_lab.target.Target` (its input embedding is copied) or the target's
    Hugging Face folder (the embedding is read from its safetensors, no model is built)."""
    path = Path(path)
    if not needs_materialising(path):
        return path
    from .checkpoint import read_config

    config = read_config(path)
    from .compat import read_mask_token_id

    for key in ("vocab_size", "hidden_size"):
        if not isinstance(config.get(key), int):
            raise ValueError(f"{path / 'config.json'} has no whole-number {key!r}, which a drafter with a learned mask "
                             "row needs; export the drafter again")
    if read_mask_token_id(config) is None:
        raise ValueError(f"{path / 'config.json'} names no mask token (ptd_token_id) but the weights hold a learned "
                         "mask row; export the drafter again")
    embedding = target_embedding(target)
    fingerprint = embedding_fingerprint(embedding)
    wanted = config.get(FINGERPRINT_KEY)
    if wanted is not None and wanted != fingerprint:
        raise ValueError(f"{path} was trained with another target's input embedding (fingerprint {wanted[:12]}..., "
                         f"this target {fingerprint[:12]}...); serve it with the target it was trained for")
    if tuple(embedding.shape) != (config["vocab_size"], config["hidden_size"]):
        raise ValueError(f"{path}: the target's embedding is {tuple(embedding.shape)}, the drafter expects "
                         f"({config['vocab_size']}, {config['hidden_size']}); serve it with its own target")
    dest = cache_dir() / "drafters" / f"{path.name}-{_digest(path, fingerprint)}"
    if (dest / "config.json").exists():
        return dest
    with _locked(dest.with_name(dest.name + ".lock")):       # with_suffix would cut a name holding a dot
        if not (dest / "config.json").exists():
            _write(path, dest, config, embedding)
    return dest


def _write(src: Path, dest: Path, config: dict, embedding: torch.Tensor) -> None:
    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    row = tensors.pop("mask_embedding").reshape(-1)                         # (H,)
    from .compat import read_mask_token_id

    mask_id = int(read_mask_token_id(config))
    table = embedding.clone()                                              # (V, H), the target's own dtype
    table[mask_id] = row.to(table.dtype)                                   # exact: bf16 -> fp32 loses nothing
    tensors["embed_tokens.weight"] = table.contiguous()
    dest.parent.mkdir(parents=True, exist_ok=True)
    # only into a new, empty or peagle-lab-written folder: a cache folder holding anything else is refused
    with atomic_dir(dest, flag=None, note=f"materialised from {src}") as tmp:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for extra in src.iterdir():                                          # training.json and the like
            if extra.is_file() and extra.name not in ("config.json", MARKER) and extra.suffix != ".safetensors":
                shutil.copy2(extra, tmp / extra.name)
