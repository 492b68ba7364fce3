"""The teaching engine on a GPU: `peagle-lab bench`'s own `run_bench`, target on CUDA.

Measures that the same code runs on a GPU (identical-to-AR check included) and the acceptance of
the given drafters there. Writes $OUT/bench_h200_mtbench.json.

    N=8 M=128 KS=3,7 EAGLE=peagle_lab/drafters/eagle-smollm2 PEAGLE=peagle_lab/drafters/peagle-smollm2 \
        python benchmarks/gpu/gpu_bench.py
"""
import json
import os
import sys
import time

import torch

from peagle_lab.bench import BenchSpec, run_bench
from peagle_lab.info import collect
from peagle_lab.drafters_registry import shipped
from peagle_lab.target import Target

env = os.environ
n, m = int(env.get("N", "20")), int(env.get("M", "128"))
ks = [int(k) for k in env.get("KS", "3,5,7").split(",")]
eagle = env.get("EAGLE", str(shipped()["eagle-smollm2"]))        # default: the shipped pair
peagle = env.get("PEAGLE", str(shipped()["peagle-smollm2"]))
t0 = time.time()
target = Target.load(None, device="cuda")
result = run_bench(BenchSpec(methods=["ar", "hf", "eagle", "peagle"], ks=ks, prompts="mt-bench", num_prompts=n,
                             max_new_tokens=m, engine="teaching", drafters={"eagle": eagle, "peagle": peagle}),
                   target=target)  # what this record measured; bench's auto picks the fast engine on CUDA
result.update(command=f"N={n} M={m} KS={env.get('KS', '3,5,7')} EAGLE={eagle} PEAGLE={peagle} "
                      "python benchmarks/gpu/gpu_bench.py",
              machine=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              info=collect(count_prompts=False), wall_s=time.time() - t0)
with open(os.path.join(env["OUT"], "bench_h200_mtbench.json"), "w") as f:
    json.dump(result, f, indent=1)
for r in result["results"]:
    print(json.dumps({k: r.get(k) for k in ("method", "k", "tokens_per_s", "acceptance_length", "identical_to_ar")}),
          file=sys.stderr)
