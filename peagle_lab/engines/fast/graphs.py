"""CUDA graphs for fixed-shape steps, and the two floors a step's time is compared with.

A step function here takes no arguments: it reads and writes preallocated device buffers. On
CUDA :class:`StepGraph` runs it a few times on a side stream (so lazy initialisation, cuBLAS
workspaces and the allocator settle), then captures it once; a call replays the graph, one
launch for the whole step instead of hundreds from Python. Off CUDA (or when capture fails) it
calls the function eagerly and says why in ``reason``.

``compile=True`` first runs the function through ``torch.compile`` (inductor, ``fullgraph=True``,
``dynamic=False``: one compiled graph per fixed shape), which fuses the elementwise work between
the matmuls (RMSNorm, RoPE, residual adds, SiLU * up, the mask, the acceptance arithmetic) into a
few generated kernels; the compiled function is then captured like any other. A graph that is still
one launch is cheaper to replay when it holds fewer kernels: at batch 1 each costs ~1-2 us on the
device however small it is. The first call compiles (``compile_s`` records how long); a compile that
fails leaves the plain function in place and says why in ``reason``. Not ``mode="reduce-overhead"``:
its own CUDA graphs would copy inputs into graph-owned buffers and replay per call, while our steps
already read and write fixed buffers, and one capture path serves compiled and plain steps alike.

Floors, for reading a measured step time:

* launch floor: replaying an *empty* captured graph -- the least a step can cost;
* memory floor: the bytes of weight one forward must read / HBM bandwidth (H200: 4.8 TB/s).
"""
from __future__ import annotations

import logging
import time
import warnings
from typing import Callable

import torch

log = logging.getLogger(__name__)

H200_HBM_BYTES_PER_S = 4.8e12


# A step's code object is shared by every engine (one per method and K), and dynamo keeps its compiled
# graphs per code object: the default limit (8) would silently send later engines back to eager.
RECOMPILE_LIMIT = 64


COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


def compile_mode(compile: bool | str) -> str | None:
    """``compile`` as the engine takes it -> inductor's mode, or None for no compile.

    ``True`` / ``"default"``: inductor's default (fused pointwise kernels between library matmuls).
    ``"max-autotune-no-cudagraphs"``: inductor also benchmarks Triton matmul templates against the
    library's at each shape and can fuse the pointwise work into a matmul's epilogue (longer compile).
    Modes with inductor's own CUDA graphs are refused: the engine captures the whole step itself.
    """
    if compile is False or compile is None:
        return None
    mode = "default" if compile is True else str(compile)
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile={compile!r}: choose True/False or one of {', '.join(COMPILE_MODES)} (inductor's "
                         "own CUDA-graph modes would capture inside our capture)")
    return mode


def compile_step(fn: Callable[[], None], mode: str = "default") -> tuple[Callable[[], None], float, str | None]:
    """``fn`` through inductor (``mode`` as :func:`compile_mode` returns it), compiled now by one call
    -> ``(fn to use, compile seconds, reason or None)``.

    The call runs the step once (as the capture warm-up does): a step's buffers are rewritten by
    prefill before they are read. On failure (no C++ compiler on a CPU, an op inductor cannot
    lower) the plain ``fn`` comes back with the reason.
    """
    compiled = torch.compile(fn, fullgraph=True, dynamic=False, mode=None if mode == "default" else mode)
    t0 = time.perf_counter()
    try:
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            compiled()
    except Exception as err:  # noqa: BLE001 -- falls back to the uncompiled step, loudly
        return fn, time.perf_counter() - t0, f"torch.compile failed, running uncompiled: {type(err).__name__}: {err}"
    return compiled, time.perf_counter() - t0, None


class StepGraph:
    """``fn()`` captured once as a CUDA graph and replayed; eager off CUDA (``reason`` says why).

    ``compile``: run ``fn`` through :func:`compile_step` first (``compiled``, ``compile_s``); True or an
    inductor mode (:func:`compile_mode`). ``pool``: a memory-pool token (``torch.cuda.graph_pool_handle()``)
    shared with other graphs that never run at the same time and read nothing later that they left in the
    pool (every result written into buffers allocated outside it): their temporaries then reuse one region instead of
    each graph holding its own."""

    def __init__(self, fn: Callable[[], None], device: torch.device, *, capture: bool = True, warmup: int = 2,
                 compile: bool | str = False, pool=None):
        self.graph, self.reason, self.compiled, self.compile_s = None, None, False, 0.0
        mode = compile_mode(compile)
        if mode is not None:
            fn, self.compile_s, self.reason = compile_step(fn, mode)
            self.compiled = self.reason is None
        self.fn = fn
        if device.type != "cuda":
            self.reason = (self.reason
                           or f"graph capture skipped: device is {device.type}, CUDA graphs need a CUDA device")
        elif not capture:
            self.reason = self.reason or "graph capture skipped: capture=False (eager launches)"
        else:
            try:
                side = torch.cuda.Stream(device)
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    for _ in range(warmup):
                        fn()
                torch.cuda.current_stream(device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    fn()
                self.graph = graph
            except Exception as err:  # noqa: BLE001 -- any capture failure falls back to eager, loudly
                self.reason = f"graph capture failed, running eagerly: {type(err).__name__}: {err}"
                torch.cuda.synchronize(device)
        if self.reason:
            log.info(self.reason)

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self) -> None:
        if self.graph is None:
            self.fn()
        else:
            self.graph.replay()


def launch_floor_us(device: torch.device | str = "cuda", reps: int = 2000) -> float:
    """Mean time (us) of replaying an empty captured CUDA graph, back to back."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("the launch floor is a CUDA measurement; run it on a CUDA device")
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings():                 # torch warns that the graph is empty: that is the point
        warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
        with torch.cuda.graph(graph):
            pass
    for _ in range(50):
        graph.replay()
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        graph.replay()
    torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / reps * 1e6


def memory_floor_ms(weight_bytes: int, bandwidth_bytes_per_s: float = H200_HBM_BYTES_PER_S) -> float:
    """Least time (ms) to stream ``weight_bytes`` from memory once at the given bandwidth."""
    return weight_bytes / bandwidth_bytes_per_s * 1e3


def tensor_bytes(tensors) -> int:
    """Bytes of ``tensors``, each storage once (tied weights count once)."""
    seen, total = set(), 0
    for t in tensors:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def module_weight_bytes(module: torch.nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Bytes of a module's parameters and buffers, each storage once, leaving out names containing
    any of ``skip`` (an embedding table is looked up a row at a time, not streamed)."""
    return tensor_bytes(t for name, t in [*module.named_parameters(), *module.named_buffers()]
                        if not any(part in name for part in skip))
