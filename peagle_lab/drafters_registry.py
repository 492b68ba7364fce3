"""Drafters shipped as package data under ``peagle_lab/drafters/<name>/``.

Each folder is a vLLM-loadable EAGLE-3 checkpoint (``config.json`` + ``model.safetensors``).
Shipping them inside the package means non-editable and Colab installs have them too.
"""
from __future__ import annotations

import json
from pathlib import Path

from .compat import read_mask_token_id

SHIPPED_DIR = Path(__file__).parent / "drafters"


def shipped() -> dict[str, Path]:
    """``{name: folder}`` of every shipped drafter."""
    if not SHIPPED_DIR.exists():
        return {}
    return {p.name: p for p in sorted(SHIPPED_DIR.iterdir()) if (p / "config.json").exists()}


def describe() -> list[dict]:
    rows = []
    for name, path in shipped().items():
        cfg = json.loads((path / "config.json").read_text())
        rows.append({"name": name, "path": str(path), "parallel_drafting": read_mask_token_id(cfg) is not None,
                     "num_layers": cfg.get("num_hidden_layers"),
                     "trained_depth": cfg.get("peagle_trained_depth") or cfg.get("block_size"),
                     "method": "dspark" if "markov_rank" in cfg else
                     ("peagle" if read_mask_token_id(cfg) is not None else "eagle"),
                     "size_bytes": sum(f.stat().st_size for f in path.iterdir())})
    return rows


def drafter_for(target, method: str, seed: int = 0):
    """The shipped drafter for ``method`` ("eagle" / "peagle" / "dspark") if the target is the embedded one,
    else a randomly initialised drafter of the same anatomy, with a sentence saying which.

    Random drafters keep every oracle intact (output stays identical to AR) but accept almost
    nothing; they let the notebooks run before any drafter is trained.
    """
    import torch

    from .checkpoint import load_drafter
    from .drafter import DrafterConfig, init_drafter

    name = f"{method}-smollm2"
    table = shipped()
    if name in table and target.vocab_size == 49152:
        return load_drafter(table[name], target), f"shipped drafter {name} ({table[name]})"
    if method == "dspark":
        from .dspark import DSparkConfig, init_dspark
        cfg = DSparkConfig.for_target(target, num_layers=2, draft_vocab_size=min(4096, target.vocab_size))
        d = init_dspark(cfg, target, seed=seed)
        d.set_draft_vocab(torch.arange(cfg.draft_vocab_size))
        return d.to(target.device).eval(), (
            "randomly initialised dspark drafter (no trained drafter shipped for this target): "
            "outputs stay lossless, acceptance is near zero")
    parallel = method == "peagle"
    cfg = DrafterConfig.for_target(target, num_layers=2 if parallel else 1, parallel_drafting=parallel,
                                   draft_vocab_size=min(8192, target.vocab_size), trained_depth=8 if parallel else None)
    return init_drafter(cfg, target, seed=seed).to(target.device).eval(), (
        f"randomly initialised {method} drafter (no trained drafter shipped for this target): "
        "outputs stay lossless, acceptance is near zero")
