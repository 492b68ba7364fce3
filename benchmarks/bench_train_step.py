"""Where a training step's time goes on a GPU: the trainer's own ``train_step`` on a random target.

The target is a randomly initialised model with SmolLM2-135M's shape (30 layers, hidden 576), so
no checkpoint is needed; conversations are random tokens with lengths drawn like the regenerated
ShareGPT data (mean ~336 tokens, prompt median ~56, cut at 768). Step time does not depend on
the weights, only on shapes. For each configuration: 3 warm-up steps, then the median of
``--steps`` timed steps (CUDA synchronised); one configuration also gets a torch.profiler table.

    python benchmarks/bench_train_step.py --json results/train_step_h200.json

Not run by CI (it is a GPU benchmark; it also runs on CPU with --device cpu --batch 2 for a smoke test).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peagle_lab.target import Target  # noqa: E402
from peagle_lab.train.data import Sample  # noqa: E402
from peagle_lab.train.features import target_batch  # noqa: E402
import peagle_lab.train.trainer as trainer_mod  # noqa: E402
from peagle_lab.train.trainer import TrainConfig, Trainer  # noqa: E402

default_backends = trainer_mod.sdpa_backends
RECIPES = {"peagle": dict(method="peagle", num_layers=4, intermediate_size=256, max_depth=8, cod_ratio=0.8,
                          hidden_noise=0.05),
           "eagle": dict(method="eagle", num_layers=1, intermediate_size=1024)}      # as in data_scale.py

SMOLLM2 = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=8192,
               rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)


def random_target(device: str) -> Target:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2)).to(device)
    return Target(model, None)            # no tokenizer: the mask slot takes the last id, as in tests


def random_samples(n: int, seed: int = 0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    total = (torch.randn(n, generator=g) * 170 + 336).round().clamp(40, 767).long()
    prompt = torch.exp(torch.randn(n, generator=g) * 0.9 + 4.25).round().long()
    prompt = torch.minimum(prompt, total - 20).clamp_min(8)
    return [Sample(torch.randint(3, 49152, (int(t),), generator=g), int(p)) for t, p in zip(total, prompt)]


def time_config(target, samples, draft_ids, cfg: TrainConfig, steps: int, profile: bool) -> dict:
    sync = torch.cuda.synchronize if target.device.type == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(target, samples, cfg, out, draft_ids)
        for _ in range(3):
            trainer.train_step()
        times, supervised, reply = [], 0, 0
        for _ in range(steps):
            batch = trainer.batch_for(trainer.step)
            reply += sum(max(0, min(x.ids.numel(), cfg.max_len) - x.prompt_len) for x in batch)
            sync()
            t0 = time.perf_counter()
            row = trainer.train_step()
            sync()
            times.append(time.perf_counter() - t0)
            supervised += row["supervised"]
        target_times = []                  # the target's pass alone on the same batches: what sharing it would save
        for i in range(min(steps, 6)):
            batch = trainer.batch_for(i)
            sync()
            t0 = time.perf_counter()
            with torch.no_grad():
                target_batch(target, batch, trainer.draft_ids, cfg.max_len, bf16=cfg.target_bf16)
            sync()
            target_times.append(time.perf_counter() - t0)
        table = None
        if profile:
            from torch.profiler import ProfilerActivity, profile as prof

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if target.device.type == "cuda" else [])
            with prof(activities=acts) as p:
                for _ in range(3):
                    trainer.train_step()
                sync()
            key = "cuda_time_total" if target.device.type == "cuda" else "cpu_time_total"
            table = p.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60)
            print(table, flush=True)
    mem = torch.cuda.max_memory_allocated() / 2**30 if target.device.type == "cuda" else None
    return {"method": cfg.method, "layout": cfg.layout, "group_by_length": cfg.group_by_length,
            "sdpa_cudnn_allowed": trainer_mod.sdpa_backends is not default_backends, "batch_size": cfg.batch_size,
            "target_bf16": cfg.target_bf16, "num_layers": cfg.num_layers,
            "step_s_median": statistics.median(times), "step_s_mean": statistics.mean(times),
            "supervised_per_s": supervised / sum(times), "reply_tokens_per_s": reply / sum(times),
            "target_pass_s_median": statistics.median(target_times), "step_s_all": times,
            "elements_last": row["elements"], "supervised_last": row["supervised"], "peak_gib": mem,
            "profile": table}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", default="32", help="comma-separated conversations per step")
    ap.add_argument("--configs", default="peagle:bf16:cudnn,peagle:bf16,eagle:bf16:cudnn,eagle:bf16",
                    help="method:target-precision[:grouped][:cudnn] (grouped = batches by length; "
                         "cudnn = SDPA may use cuDNN)")
    ap.add_argument("--profile", default="none", help="pairs that also get a profiler table")
    ap.add_argument("--recipe", choices=["bench", "data-scale"], default="bench",
                    help="drafter shapes: bench (P-EAGLE 2 layers, MLP 512) or data-scale (data_scale.py's pair: "
                         "P-EAGLE 4 layers, MLP 256, COD 0.8, feature noise 0.05; EAGLE-3 1 layer, MLP 1024)")
    ap.add_argument("--json")
    args = ap.parse_args()
    target = random_target(args.device)
    samples = random_samples(2048)
    draft_ids = torch.arange(4096)
    rows = []
    for b in [int(x) for x in args.batch.split(",")]:
        for pair in args.configs.split(","):
            method, prec, *opt = pair.split(":")
            shape = (RECIPES[method] if args.recipe == "data-scale" else
                     dict(method=method, num_layers=2 if method == "peagle" else 1,
                          intermediate_size=512 if method == "peagle" else 1024, max_depth=8))
            cfg = TrainConfig(**shape, draft_vocab_size=4096, batch_size=b, max_len=768, layout="padded",
                              target_bf16=prec == "bf16", group_by_length="grouped" in opt,
                              steps=10_000, warmup_steps=10)
            if args.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            # "cudnn": SDPA may pick cuDNN, as the trainer did before 2026-12-01b
            trainer_mod.sdpa_backends = (lambda d: contextlib.nullcontext()) if "cudnn" in opt else default_backends
            profile = b == 32 and pair in args.profile.split(",")
            try:
                r = time_config(target, samples, draft_ids, cfg, args.steps, profile=profile)
            except torch.cuda.OutOfMemoryError:             # a batch too large for the GPU: say so, go on
                torch.cuda.empty_cache()
                r = {"method": method, "batch_size": b, "recipe": args.recipe, "out_of_memory": True}
            r["recipe"] = args.recipe
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k not in ("profile", "step_s_all")}), flush=True)
            if args.json:                                   # after every row: a killed run keeps what it measured
                Path(args.json).write_text(json.dumps({
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "machine": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                    "torch": torch.__version__, "command": " ".join(sys.argv), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
