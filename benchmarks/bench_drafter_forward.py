"""Drafter forward cost (GPU): one P-EAGLE pass over K slots vs one single-slot pass vs K EAGLE passes.

    python benchmarks/bench_drafter_forward.py --json benchmarks/results/drafter_forward_h200.json
    python benchmarks/bench_drafter_forward.py --compile none,reduce-overhead --json ...
    python benchmarks/bench_drafter_forward.py --tiny --json /tmp/tiny.json       # CPU smoke check

The library's :class:`peagle_lab.drafter.Eagle3Drafter` at P-EAGLE's published size for
gpt-oss-20b (hidden 2880, 4 layers, 64 heads, 8 KV heads, head_dim 64, target vocab 201088),
bf16, random weights, built from a :class:`DrafterConfig` directly (no target needed). The
intermediate size is not given by the issue; it defaults to 4 x hidden (``--intermediate-size``).
Draft vocab 32000 (``--draft-vocab-size``). For each batch size B and draft length K, every
request has ``--context`` cached drafter slots, and one decoding step costs:

* ``single``: one pass over 1 slot per request (the floor: what one drafted token costs);
* ``parallel``: one pass over K slots per request (bonus + K-1 mask slots, causal) = P-EAGLE;
* ``sequential``: K chained passes of 1 slot, each on the previous draft and pre-norm state,
  the cache growing by one slot per pass = EAGLE-3.

Times are medians from ``triton.testing.do_bench`` (CUDA events) on a GPU, from
``time.perf_counter`` on CPU (``--tiny`` only). ``--compile reduce-overhead`` runs the same forward
through ``torch.compile(mode="reduce-overhead")`` (CUDA graphs; its chained sequential passes failed on
2026-12-01: a graph's outputs are overwritten by its next replay). ``--compile cudagraph`` captures
each whole step -- the single pass, the parallel pass, all K sequential passes with their argmax in
between -- as one ``torch.cuda.CUDAGraph`` over static inputs and times its replay: no Python or
launch overhead left, the way vLLM runs drafting in CUDA graphs. Every row also records a
correctness check: slot 0 of the parallel pass and the first sequential pass must give the
single pass's logits. Not run by CI at full size: it needs a CUDA device.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from peagle_lab.drafter import DrafterCache, DrafterConfig, Eagle3Drafter  # noqa: E402

GPT_OSS_20B = dict(hidden_size=2880, num_layers=4, num_heads=64, num_kv_heads=8, head_dim=64, vocab_size=201088,
                   target_hidden_size=2880, aux_layer_ids=(2, 12, 21))   # gpt-oss-20b: 24 layers -> taps 2, 12, 21
TINY = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, vocab_size=1000,
            target_hidden_size=64, aux_layer_ids=(1, 2, 3))


def build(shape: dict, intermediate: int, draft_vocab: int, dtype, device) -> Eagle3Drafter:
    cfg = DrafterConfig(**shape, intermediate_size=intermediate, draft_vocab_size=draft_vocab, parallel_drafting=True,
                        mask_token_id=shape["vocab_size"] - 1, trained_depth=8, has_embed_tokens=True)
    torch.manual_seed(0)
    with torch.device(device):
        drafter = Eagle3Drafter(cfg)                       # nn.Linear's own random init
        drafter.mask_hidden.data.normal_(0, 0.02)
    return drafter.to(dtype).eval()


def forward_fn(drafter: Eagle3Drafter):
    """A pure function of tensors (no cache mutated outside), so torch.compile / CUDA graphs can take it."""
    L = drafter.cfg.num_layers

    def fwd(ids, hidden, positions, mask, keys, values):
        cache = DrafterCache(L)
        cache.keys, cache.values = list(keys), list(values)
        prenorm, logits = drafter(ids, hidden, cache, positions=positions, attn_mask=mask)
        return prenorm, logits, cache.keys, cache.values
    return fwd


def timer(device: str, reps: int = 7):
    if device == "cuda":
        import triton.testing

        return lambda fn: triton.testing.do_bench(fn, return_mode="median")

    def cpu(fn):
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    return cpu


def graphed(fn):
    """``fn`` captured once as a CUDA graph (after warm-up on a side stream); calling the result replays
    it and returns the captured outputs (static tensors refreshed by each replay)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay():
        graph.replay()
        return out
    replay.graph = graph
    return replay


@torch.inference_mode()
def measure(drafter, fwd, B: int, K: int, context: int, device: str, bench, cuda_graph: bool = False) -> dict:
    c, H = drafter.cfg, drafter.cfg.hidden_size
    dtype = next(drafter.parameters()).dtype
    g = torch.Generator(device=device).manual_seed(B * 100 + K)
    keys = [torch.randn(B, c.num_kv_heads, context, c.head_dim, generator=g, device=device, dtype=dtype)
            for _ in range(c.num_layers)]
    values = [torch.randn_like(k) for k in keys]
    bonus = torch.randint(0, c.vocab_size, (B, 1), generator=g, device=device)
    h_bonus = torch.randn(B, 1, H, generator=g, device=device, dtype=dtype)
    pos1 = torch.full((B, 1), context, device=device)
    # P-EAGLE input: bonus + K-1 mask slots sharing fc(mask_hidden)
    ids_k = torch.cat([bonus, torch.full((B, K - 1), c.mask_token_id, device=device)], dim=1)          # (B, K)
    h_k = torch.cat([h_bonus, drafter.projected_mask_hidden().to(dtype).expand(B, K - 1, H)], dim=1)    # (B, K, H)
    pos_k = context + torch.arange(K, device=device).expand(B, K)
    mask_k = torch.arange(context + K, device=device)[None, :] <= (context + torch.arange(K, device=device))[:, None]

    def single():
        return fwd(bonus, h_bonus, pos1, None, keys, values)

    def parallel():
        return fwd(ids_k, h_k, pos_k, mask_k, keys, values)

    def sequential():
        ids, h, pos, ks, vs, first = bonus, h_bonus, pos1, keys, values, None
        for _ in range(K):
            prenorm, logits, ks, vs = fwd(ids, h, pos, None, ks, vs)       # cache grows by one slot per pass
            first = logits if first is None else first
            ids, h, pos = drafter.to_target_ids(logits[:, -1:].argmax(-1)), prenorm[:, -1:], pos + 1
        return first

    if cuda_graph:
        single, parallel, sequential = graphed(single), graphed(parallel), graphed(sequential)
    ref = single()[1][:, 0].float()
    check = {"parallel_slot0_max_abs_diff": float((parallel()[1][:, 0].float() - ref).abs().max()),
             "sequential_pass1_max_abs_diff": float((sequential()[:, 0].float() - ref).abs().max()),
             "logit_scale": float(ref.abs().max())}
    t_single, t_parallel, t_seq = bench(single), bench(parallel), bench(sequential)
    return {"B": B, "K": K, "context": context, "single_ms": t_single, "parallel_ms": t_parallel,
            "sequential_ms": t_seq, "parallel_over_single": t_parallel / t_single,
            "sequential_over_single": t_seq / t_single, "sequential_over_parallel": t_seq / t_parallel, "check": check}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="where to write the raw results")
    ap.add_argument("--batch", default="1,8,64", help="batch sizes B, comma-separated")
    ap.add_argument("--k", default="3,5,7", help="draft lengths K, comma-separated")
    ap.add_argument("--context", type=int, default=1024, help="cached drafter slots per request")
    ap.add_argument("--compile", default="none",
                    help="comma list of none, default, reduce-overhead, cudagraph (whole step as one CUDA graph)")
    ap.add_argument("--intermediate-size", type=int, default=None, help="drafter MLP width (default 4 x hidden)")
    ap.add_argument("--draft-vocab-size", type=int, default=32000)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke check: a tiny drafter, B=1,2, K=2,3, float32")
    args = ap.parse_args(argv)

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    if device == "cpu" and not args.tiny:
        raise SystemExit("the full-size benchmark needs a CUDA GPU; use --tiny for a CPU smoke check")
    shape = TINY if args.tiny else GPT_OSS_20B
    batches = [1, 2] if args.tiny else [int(x) for x in args.batch.split(",")]
    ks = [2, 3] if args.tiny else [int(x) for x in args.k.split(",")]
    context = 16 if args.tiny else args.context
    dtype = torch.float32 if args.tiny else getattr(torch, args.dtype)
    intermediate = args.intermediate_size or 4 * shape["hidden_size"]
    draft_vocab = 256 if args.tiny else args.draft_vocab_size
    modes = [m.strip() for m in args.compile.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("none", "default", "reduce-overhead", "cudagraph")]
    if bad:
        raise SystemExit(f"unknown --compile mode(s) {bad}; use none, default, reduce-overhead or cudagraph")
    if "cudagraph" in modes and device != "cuda":
        raise SystemExit("--compile cudagraph needs a CUDA GPU")

    drafter = build(shape, intermediate, draft_vocab, dtype, device)
    threads = torch.get_num_threads()
    if args.tiny:
        torch.set_num_threads(1)                       # a smoke check: do not fight other jobs for cores
    bench = timer(device, reps=3 if args.tiny else 7)
    rows = []

    device_name = torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({1 if args.tiny else threads} threads)"
    command = "python benchmarks/bench_drafter_forward.py " + " ".join(sys.argv[1:] if argv is None else argv)

    def write() -> None:                               # after every row: a killed run keeps what it measured
        out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "machine": f"{platform.node()} {platform.machine()}",
               "device": device_name,
               "command": command,
               "what": "drafter forward: one parallel pass over K slots vs one single-slot pass vs K sequential passes",
               "torch": torch.__version__,
               "drafter": {**{k: v for k, v in shape.items() if k != "aux_layer_ids"},
                           "intermediate_size": intermediate, "draft_vocab_size": draft_vocab,
                           "dtype": str(dtype).removeprefix("torch."), "weights": "random",
                           "intermediate_size_note": "not published with the issue's numbers; 4 x hidden unless given"},
               "rows": rows}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")

    for mode in modes:
        fwd = forward_fn(drafter)
        if mode not in ("none", "cudagraph"):
            import torch._dynamo as dynamo

            dynamo.config.cache_size_limit = max(dynamo.config.cache_size_limit, 256)   # one graph per cache length
            fwd = torch.compile(fwd, mode=None if mode == "default" else mode, dynamic=False)
        for B in batches:
            for K in ks:
                timed = measure(drafter, fwd, B, K, context, device, bench, cuda_graph=mode == "cudagraph")
                row = {"compile": mode, **timed}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
                write()
    torch.set_num_threads(threads)


if __name__ == "__main__":
    main()
