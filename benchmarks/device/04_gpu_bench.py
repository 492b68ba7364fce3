"""Device call 4 of 4: the teaching engine on the H200 with the drafters call 3 trained.

Validation acceptance on MT-Bench at T=0 (the same `run_bench` as `peagle-lab bench`, target on
CUDA), so the "same code runs on a GPU" claim is measured. Writes $OUT/bench_h200_mtbench.json.
"""
import json
import os
import sys
import time

import torch

from peagle_lab.bench import run_bench
from peagle_lab.info import collect
from peagle_lab.target import Target

n, m = int(os.environ.get("N", "20")), int(os.environ.get("M", "128"))
t0 = time.time()
target = Target.load(None, device="cuda")
result = run_bench(methods=["ar", "eagle", "peagle"], ks=[3, 5, 7], prompts="mt-bench", num_prompts=n,
                   max_new_tokens=m, target=target, eagle_drafter="/tmp/pk/eagle-smollm2",
                   peagle_drafter="/tmp/pk/peagle-smollm2")
result.update(command=f"N={n} M={m} python benchmarks/device/04_gpu_bench.py", machine=torch.cuda.get_device_name(),
              date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), info=collect(count_prompts=False),
              wall_s=time.time() - t0)
with open(os.path.join(os.environ["OUT"], "bench_h200_mtbench.json"), "w") as f:
    json.dump(result, f, indent=1)
for r in result["results"]:
    print(json.dumps({k: r[k] for k in ("method", "k", "tokens_per_s", "acceptance_length", "identical_to_ar")}), file=sys.stderr)
