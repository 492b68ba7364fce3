"""Drafters shipped as package data under ``peagle_lab/drafters/<name>/``.

Each folder is a vLLM-loadable EAGLE-3 checkpoint (``config.json`` + ``model.safetensors``).
Shipping them inside the package means non-editable and Colab installs have them too.
"""
from __future__ import annotations

import json
from pathlib import Path

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
        rows.append({"name": name, "path": str(path), "parallel_drafting": "ptd_token_id" in cfg,
                     "num_layers": cfg.get("num_hidden_layers"),
                     "trained_depth": cfg.get("peagle_trained_depth"),
                     "size_bytes": sum(f.stat().st_size for f in path.iterdir())})
    return rows


def find(name: str) -> Path:
    """Folder of a shipped drafter by name, or a clear error listing the ones that exist."""
    table = shipped()
    if name not in table:
        have = ", ".join(table) or "none yet"
        raise FileNotFoundError(f"no shipped drafter named {name!r} (shipped: {have}); pass a checkpoint folder instead")
    return table[name]
