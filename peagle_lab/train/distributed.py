"""Training on several processes (``torchrun``): join the group, pick each process's GPU, sum the gradients.

The trainer calls :func:`rank_and_world` and :func:`all_reduce_grads`; ``peagle-lab train`` joins and leaves
the group (:func:`init_distributed`, :func:`finish_distributed`). Not under torchrun, every one of them is a
no-op and a run is one process (rank 0 of 1).
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of processes (1 when not launched by torchrun)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


BACKEND_ENV = "PEAGLE_DIST_BACKEND"


def dist_backend(device: str | torch.device | None = None) -> str:
    """The process group's backend: NCCL when the run trains on CUDA, gloo on CPUs; ``PEAGLE_DIST_BACKEND``
    (``nccl`` or ``gloo``) overrides it -- gloo also reduces CUDA tensors, so it lets several processes
    share one GPU, which NCCL refuses."""
    on_cuda = torch.cuda.is_available() if device is None else str(device).startswith("cuda")
    choice = os.environ.get(BACKEND_ENV, "").strip().lower() or ("nccl" if on_cuda else "gloo")
    if choice not in ("nccl", "gloo"):
        raise ValueError(f"{BACKEND_ENV}={choice!r}: use nccl or gloo")
    if choice == "nccl" and not on_cuda:
        raise ValueError(f"{BACKEND_ENV}=nccl needs the run on CUDA (--device cuda); on CPUs unset it (gloo)")
    return choice


def init_distributed(device: str | torch.device | None = None) -> str | torch.device | None:
    """Join the process group when launched by ``torchrun``; return the device this process should use.

    ``device`` is what the run asked for (``"cuda"``, ``"cpu"``; None: CUDA when present). On CUDA each
    process takes GPU ``LOCAL_RANK % device_count`` and the backend is NCCL (one GPU per process); on
    CPUs it is gloo. ``PEAGLE_DIST_BACKEND=gloo`` runs several processes on one GPU (tests, a machine
    with fewer GPUs than processes). Not under torchrun: a no-op that returns ``device``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return device
    on_cuda = torch.cuda.is_available() if device is None else str(device).startswith("cuda")
    backend = dist_backend("cuda" if on_cuda else "cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if on_cuda:
        n = torch.cuda.device_count()
        if n == 0:
            raise RuntimeError("training on CUDA under torchrun, but no GPU is visible: pass --device cpu (gloo)")
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        if backend == "nccl" and per_node > n:
            raise RuntimeError(f"{per_node} processes on this machine but {n} GPU(s): NCCL needs a GPU of its own for "
                               f"every process. Launch at most {n} (torchrun --nproc-per-node {n}), or set "
                               f"{BACKEND_ENV}=gloo to let processes share a GPU (slower; for tests)")
        idx = local % n
        torch.cuda.set_device(idx)                      # before the group: NCCL binds to the current device
        device = torch.device("cuda", idx)
    if not dist.is_initialized():
        extra = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, **extra)
    return device


def finish_distributed() -> None:
    """Leave the process group together (barrier, then destroy): a rank that exits while another is
    still writing its results can otherwise abort in gloo's threads ("terminate called without an
    active exception")."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_grads(params) -> None:
    """Sum the gradients over all processes, one flat buffer per dtype (one collective call each, not one
    per tensor). Every process must hold gradients for the same parameters (they run the same model on
    the same kind of batch)."""
    groups: dict[torch.dtype, list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            groups.setdefault(p.grad.dtype, []).append(p.grad)
    for grads in groups.values():
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))
