"""P-EAGLE training memory at 8B scale (GPU): single pass vs sequence partitioning, dense vs flex mask.

    python benchmarks/bench_train_memory.py --json benchmarks/results/train_memory_h200.json

A drafter shaped for an 8B Llama target (hidden 4096, 32 heads, 8 KV heads, head_dim 128, MLP
14336, 4 layers, vocabulary 128256 with a trained embedding, draft vocabulary 32000), random
weights in bfloat16, and random "target" data: tokens, three 4096-wide feature taps and target
logits over the draft vocabulary. For sequences of 2K/8K/16K/32K tokens, COD sampling to depth
K=8 (keep ratio 0.7), one forward + backward of the library's own training loss
(``peagle_lab.train.loss.sequence_loss``) is measured: peak allocated GPU memory above the
weights, and the median wall time of ``--repeats`` steps. Configurations that run out of memory are
recorded as such. Not run by CI (needs a CUDA device).

``--tiny`` runs a miniature version on any device (a smoke check of the script itself).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import time

import torch

from peagle_lab.drafter import DrafterConfig, init_drafter
from peagle_lab.train.cod import cod_sample
from peagle_lab.train.loss import SeqData, sequence_loss, supervised_mask

LLAMA_8B = dict(hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                vocab_size=128256, draft_vocab_size=32000, target_hidden_size=4096, aux_layer_ids=(2, 16, 29),
                num_layers=4, rope_theta=500000.0, max_position_embeddings=131072, parallel_drafting=True,
                mask_token_id=128002, trained_depth=8, has_embed_tokens=True)
TINY = dict(LLAMA_8B, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128,
            vocab_size=1000, draft_vocab_size=200, target_hidden_size=64, mask_token_id=999, num_layers=2)


def make_data(n: int, cfg: DrafterConfig, device: str, dtype: torch.dtype, seed: int = 0) -> SeqData:
    g = torch.Generator(device="cpu").manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size - 1, (n,), generator=g)
    aux = torch.randn(n, 3 * cfg.target_hidden_size, generator=g, dtype=torch.float32).to(dtype)
    logits = (3 * torch.randn(n, cfg.draft_vocab_size, generator=g)).to(dtype)
    sup = torch.ones(n, dtype=torch.bool)
    sup[: min(64, n // 8)] = False                                          # a prompt that is not supervised
    return SeqData(tokens.to(device), aux.to(device), logits.to(device), sup.to(device))


def one_step(drafter, data, el, segments: int, attention: str) -> None:
    n = int(supervised_mask(el, data).sum())
    drafter.zero_grad(set_to_none=True)
    sequence_loss(drafter, el, data, method="peagle", max_depth=8, num_segments=segments, normalizer=n,
                  backward=True, attention=attention)


def measure(drafter, data, el, segments: int, attention: str, repeats: int, device: str) -> dict:
    cuda = device == "cuda"
    try:
        one_step(drafter, data, el, segments, attention)                     # warm-up (and compile)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if cuda else 0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            one_step(drafter, data, el, segments, attention)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        peak = torch.cuda.max_memory_allocated() if cuda else 0
        return {"ok": True, "step_s": statistics.median(times), "peak_gib": peak / 2**30,
                "peak_above_start_gib": (peak - base) / 2**30}
    except torch.OutOfMemoryError as exc:
        return {"ok": False, "error": "out of memory", "detail": str(exc).splitlines()[0][:200]}
    finally:
        drafter.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--lengths", default="2048,8192,16384,32768")
    ap.add_argument("--segments", default="1,4,8,16", help="1 = single pass")
    ap.add_argument("--attention", default="dense,flex")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="miniature shapes on any device (smoke check)")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.tiny:
        raise SystemExit("the 8B-scale run needs a CUDA device; use --tiny for a smoke check on CPU")
    shape = TINY if args.tiny else LLAMA_8B
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    cfg = DrafterConfig(**shape)
    drafter = init_drafter(cfg, seed=0).to(device=device, dtype=dtype).train()
    weights_gib = sum(p.numel() * p.element_size() for p in drafter.parameters()) / 2**30
    rows = []
    lengths = [int(x) for x in args.lengths.split(",")]
    for n in lengths if not args.tiny else [min(x, 256) for x in lengths[:2]]:
        data = make_data(n, cfg, device, dtype)
        el = cod_sample(n, 8, 0.7, supervised=data.supervised.cpu(), generator=torch.Generator().manual_seed(n))
        el.anchor, el.depth, el.doc = el.anchor.to(device), el.depth.to(device), el.doc.to(device)
        for attention in args.attention.split(","):
            if attention == "flex" and device != "cuda":
                continue                                                     # no flex backward on CPU
            for segments in (int(s) for s in args.segments.split(",")):
                row = {"tokens": n, "elements": len(el), "k": 8, "segments": segments, "attention": attention,
                       **measure(drafter, data, el, segments, attention, args.repeats, device)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        del data
    out = {"command": "python benchmarks/bench_train_memory.py " + " ".join(
               f"--{k} {v}" if not isinstance(v, bool) else f"--{k}" for k, v in vars(args).items()
               if v not in (False, None) and k != "json"),
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine(),
           "torch": torch.__version__, "drafter": {k: v for k, v in shape.items()}, "dtype": str(dtype),
           "weights_gib": weights_gib, "rows": rows}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
