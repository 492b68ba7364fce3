"""Where the models run, decided in one place.

``device="auto"`` means CUDA when torch sees a GPU and the CPU otherwise. It is the default of the
command line's ``--device`` (``bench``, ``eval``, ``regenerate``, ``train``), and
:meth:`peagle_lab.target.Target.load` accepts it too (its own default stays ``"cpu"``: a library call
says where it wants the model). The engines, batched or not, run wherever the target is.

>>> resolve_device("cpu")
'cpu'
>>> resolve_device("auto") in ("cpu", "cuda")
True
>>> from peagle_lab.device import DTYPES      # torch loads here, not when the module does
>>> DTYPES["bfloat16"]
torch.bfloat16
>>> half_dtype((9, 0)), half_dtype((7, 5))      # an H200; a T4 (Colab's free GPU)
('bfloat16', 'float16')
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path


def __getattr__(name: str):
    """``DTYPES`` imports torch when first asked for: :func:`device_problem` answers before torch loads."""
    if name == "DTYPES":
        import torch

        globals()["DTYPES"] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        return globals()["DTYPES"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _no_gpu_driver() -> bool:
    """True when this (Linux) machine has no GPU driver at all, so torch cannot see a GPU: saying so takes no torch
    import. False means "ask torch" (a driver is there, or this system does not tell)."""
    if not Path("/proc/self").exists():
        return False
    devices = ("/dev/nvidia0", "/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")  # CUDA, ROCm, WSL
    return not any(os.path.exists(d) for d in devices)


def device_problem(device: str | torch.device | None) -> str | None:
    """Why this machine cannot honour ``device`` (None when it can): ``cuda`` without a GPU torch sees, ``cuda:N``
    past the GPUs there are. Every command asks this before anything heavy loads, so each refuses alike.

    >>> device_problem("cpu"), device_problem("auto")
    (None, None)
    """
    device = "auto" if device is None else str(device)
    if not device.startswith("cuda"):
        return None
    none = f"--device {device}: torch sees no CUDA GPU here (use --device cpu, or auto)"
    if "torch" not in sys.modules and _no_gpu_driver():     # said in well under a second, torch not imported
        return none
    import torch

    if not torch.cuda.is_available():
        return none
    index = device.partition(":")[2]
    if index.isdigit() and int(index) >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        return f"--device {device}: this machine has {n} CUDA GPU{'s' if n > 1 else ''} (cuda:0 to cuda:{n - 1})"
    return None


def resolve_device(device: str | torch.device | None = "auto") -> str:
    """``auto`` (or None) = ``cuda`` when torch sees a GPU, else ``cpu``; anything else passes through, checked
    (:func:`device_problem`; SystemExit naming the fix)."""
    import torch

    if device is None or str(device) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    problem = device_problem(device)
    if problem:
        raise SystemExit(problem)
    return str(device)


def half_dtype(capability: tuple[int, int] | None = None) -> str:
    """The 16-bit dtype for a CUDA GPU: ``"bfloat16"`` from compute capability 8.0 (A100, L4,
    H100/H200), ``"float16"`` below it (T4, V100: no native bf16). ``capability``: the current
    GPU's by default; ``PEAGLE_HALF_DTYPE=float16`` (or ``bfloat16``) overrides that default, to run a
    T4's path on a newer GPU. With no GPU and no capability given, ``"bfloat16"``."""
    if capability is None:
        forced = os.environ.get("PEAGLE_HALF_DTYPE", "").strip()
        if forced:
            if forced not in ("bfloat16", "float16"):
                raise ValueError(f"PEAGLE_HALF_DTYPE={forced!r}: set it to bfloat16 or float16, or unset it")
            return forced
        import torch

        if not torch.cuda.is_available():
            return "bfloat16"
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
    import torch

    if torch.device(device).type != "cuda" or not skip:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
