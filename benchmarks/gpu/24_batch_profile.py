"""Where a batched teaching-engine step spends its time on a GPU: for a batch that runs far slower than
its batch size predicts, which part of the step (drafting, verifying, host bookkeeping, sync points) grows.

For B in $BATCH_SIZES and each method: wall time of generate_batch on B spread MT-Bench prompts x $MAX_NEW
tokens (after one warm-up), its StepTimes split, steps, and for one configuration a cProfile of the call
(top functions by own time; on CUDA the sync points show as the functions that wait).
Writes $OUT/batch_profile.json (recorded as results/batch_profile_h200_cudnn.json). From the repository root,
with the target's GGUF in place (PEAGLE_GGUF; README.md):

    BATCH_SIZES="8 32" MAX_NEW=64 DTYPE=bfloat16 PROFILE=peagle:8 python benchmarks/gpu/24_batch_profile.py
"""
import cProfile
import io
import json
import os
import pstats
import sys
import time

import torch

from peagle_lab.engines.batched import generate_batch
from peagle_lab.bench import resolve_drafter
from peagle_lab.checkpoint import load_drafter
from peagle_lab.device import DTYPES, resolve_device
from peagle_lab.prompts import load_prompts
from peagle_lab.target import Target

sizes = [int(b) for b in os.environ.get("BATCH_SIZES", "8 32").split()]
max_new = int(os.environ.get("MAX_NEW", "64"))
dtype = os.environ.get("DTYPE", "bfloat16")
prof_method, prof_b = os.environ.get("PROFILE", "peagle:8").split(":")
target = Target.load(None, dtype=DTYPES[dtype], device=resolve_device("auto"))
drafters = {m: load_drafter(resolve_drafter(m, None, True), target, dtype=DTYPES[dtype]) for m in ("eagle", "peagle")}
prompts = [target.chat_ids(p) for p in load_prompts("mt-bench", max(sizes), spread=True)]
sync = torch.cuda.synchronize if target.device.type == "cuda" else (lambda: None)
rows = []
for B in sizes:
    for method in ("ar", "eagle", "peagle"):
        kw = dict(method=method, drafter=drafters.get(method), k=3, max_new_tokens=max_new)
        generate_batch(target, prompts[:B], **dict(kw, max_new_tokens=8))                  # warm-up
        sync()
        prof = cProfile.Profile() if (method, B) == (prof_method, int(prof_b)) else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        out = generate_batch(target, prompts[:B], **kw)
        sync()
        wall = time.perf_counter() - t0
        if prof:
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
            print(s.getvalue()[-6000:])
        steps = len(out.accepted) if out.accepted else max(len(r.tokens) for r in out.results)
        row = dict(batch_size=B, method=method, k=3 if method != "ar" else None, wall_s=wall, steps=steps,
                   new_tokens=out.new_tokens, tokens_per_s=out.new_tokens / wall, ms_per_step=1e3 * wall / steps,
                   split_s=out.times.to_dict(), profiled=bool(prof))
        rows.append(row)
        print(json.dumps(row), flush=True)
json.dump({"command": " ".join(sys.argv), "env": {k: os.environ.get(k) for k in ("BATCH_SIZES", "MAX_NEW", "DTYPE")},
           "machine": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "rows": rows},
          open(os.path.join(os.environ.get("OUT", "/tmp"), "batch_profile.json"), "w"), indent=1)
