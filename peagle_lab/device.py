"""Where the models run, decided in one place.

``device="auto"`` means CUDA when torch sees a GPU and the CPU otherwise. It is the default of the
command line's ``--device`` (``bench``, ``eval``, ``regenerate``, ``train``), and
:meth:`peagle_lab.target.Target.load` accepts it too (its own default stays ``"cpu"``: a library call
says where it wants the model). The engines, batched or not, run wherever the target is.

>>> resolve_device("cpu")
'cpu'
>>> resolve_device("auto") in ("cpu", "cuda")
True
>>> DTYPES["bfloat16"]
torch.bfloat16
"""
from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str | torch.device | None = "auto") -> str:
    """``auto`` (or None) = ``cuda`` when torch sees a GPU, else ``cpu``; anything else passes through, checked."""
    if device is None or str(device) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    device = str(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: no CUDA device here; use --device cpu (or auto)")
    return device
