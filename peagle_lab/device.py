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
>>> half_dtype((9, 0)), half_dtype((7, 5))      # an H200; a T4 (Colab's free GPU)
('bfloat16', 'float16')
"""
from __future__ import annotations

import contextlib

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


def half_dtype(capability: tuple[int, int] | None = None) -> str:
    """The 16-bit dtype for a CUDA GPU: ``"bfloat16"`` from compute capability 8.0 (A100, L4,
    H100/H200), ``"float16"`` below it (T4, V100: no native bf16). ``capability``: the current
    GPU's by default."""
    if capability is None:
        capability = torch.cuda.get_device_capability()
    return "bfloat16" if tuple(capability) >= (8, 0) else "float16"


def sdpa_without_cudnn(device: torch.device | str, skip: bool = True):
    """A context in which scaled-dot-product attention skips its cuDNN backend on CUDA (a no-op elsewhere,
    or with ``skip=False``).

    cuDNN builds an execution plan on the host for every new shape, and the shapes that reach SDPA
    outside a captured graph change all the time: a prompt's length, a training step's packing, a
    batched step's cache length. On an H200 that plan building cost ~90 ms for a prompt's pass
    (against ~20 ms for the whole pass without it), 56-81% of a training step's host time, and ~2 ms
    per attention call in a batched decode step. Flash and memory-efficient attention have no per-shape
    set-up; math is the fallback for what neither takes.
    """
    if torch.device(device).type != "cuda" or not skip:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
