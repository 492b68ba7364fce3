"""Kernel benchmark (GPU): fused Triton kernel vs the torch reference vs an empty launch.

    python benchmarks/bench_kernel.py --json benchmarks/results/kernel_h200.json

Batches of 1, 8, 64 and 256 requests, each a decode step of K+1 query tokens with random
rejections (plus one 512-token prefill in the mixed case). Times are medians from
``triton.testing.do_bench`` (CUDA events), eager (each call pays Python and launch overhead) and
replayed from a CUDA graph (``do_bench_cudagraph``: the kernel's own time). Not run by CI: it needs a CUDA device.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform

import torch
import triton

from peagle_lab.kernels import copy_and_expand_eagle_inputs, launch_config


@triton.jit
def _empty(x_ptr):
    pass


def batch(num_reqs: int, k: int, prefill: bool, device: str):
    g = torch.Generator().manual_seed(num_reqs)
    lens = [k + 1] * num_reqs
    if prefill:
        lens[0] = 512
    rej = [int(torch.randint(0, L, (1,), generator=g)) if L == k + 1 else 0 for L in lens]
    qsl = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    qel = (qsl[1:] - 1 - torch.tensor(rej, dtype=torch.int32)).to(torch.int32)
    n = int(qsl[-1])
    return dict(target_token_ids=torch.randint(0, 50_000, (n,), dtype=torch.int32, device=device),
                target_positions=torch.arange(n, device=device),
                next_token_ids=torch.randint(0, 50_000, (num_reqs,), dtype=torch.int32, device=device),
                query_start_loc=qsl.to(device), query_end_loc=qel.to(device), padding_token_id=0,
                parallel_drafting_token_id=-1, num_padding_slots_per_request=k), max(lens)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--k", type=int, default=7)
    args = ap.parse_args()
    dev = "cuda"
    rows = []
    dummy = torch.zeros(1, device=dev)
    floor = triton.testing.do_bench(lambda: _empty[(1,)](dummy), return_mode="median")
    # The same calls replayed from a CUDA graph: no Python or launch overhead, so what is left is the
    # kernel itself (vLLM captures its drafting steps in CUDA graphs on GPUs).
    floor_graph = triton.testing.do_bench_cudagraph(lambda: _empty[(1,)](dummy), return_mode="median")
    for prefill in (False, True):
        for num_reqs in (1, 8, 64, 256):
            kw, max_len = batch(num_reqs, args.k, prefill, dev)
            def triton_call():
                return copy_and_expand_eagle_inputs(**kw, backend="triton", max_query_len=max_len)

            fused = triton.testing.do_bench(triton_call, return_mode="median")
            ref = triton.testing.do_bench(lambda: copy_and_expand_eagle_inputs(**kw, backend="torch"),
                                          return_mode="median")
            fused_graph = triton.testing.do_bench_cudagraph(triton_call, return_mode="median")
            # the launch used before 2026-12-01b: 128-slot blocks, 4 warps, whatever the request length
            old_graph = triton.testing.do_bench_cudagraph(
                lambda: copy_and_expand_eagle_inputs(**kw, backend="triton", max_query_len=max_len, launch=(128, 4)),
                return_mode="median")
            rows.append({"num_reqs": num_reqs, "k": args.k, "with_prefill": prefill, "triton_ms": fused,
                         "torch_ref_ms": ref, "empty_launch_ms": floor, "speedup_vs_torch": ref / fused,
                         "x_launch_floor": fused / floor,
                         "triton_graph_ms": fused_graph, "empty_graph_ms": floor_graph,
                         "graph_x_floor": fused_graph / floor_graph, "launch": list(launch_config(max_len + args.k)),
                         "graph_ms_block128_warps4": old_graph,
                         "graph_x_floor_block128_warps4": old_graph / floor_graph})
            print(rows[-1])
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
           "device": torch.cuda.get_device_name(0), "command": "python benchmarks/bench_kernel.py --json " + args.json,
           "torch": torch.__version__, "triton": triton.__version__, "rows": rows}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
