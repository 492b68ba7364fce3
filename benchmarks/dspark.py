"""DSpark beside the shipped pair (docs/dspark.md, notebook 07).

    python benchmarks/dspark.py eval                  # AL at K = 3, 5, 7 on 80 MT-Bench prompts, 128 tokens (replay)
    python benchmarks/dspark.py serve                 # CUDA vLLM: AR, EAGLE-3, P-EAGLE and DSpark over concurrency
    python benchmarks/dspark.py train --data runs/data   # the shipped recipe (peagle-lab train --preset dspark)

``eval`` writes one JSON per K (OUT with -kK); ``serve`` needs a CUDA GPU (vLLM's CPU build cannot serve dspark).
The recorded figures (dspark_eval_mtbench80.json, dspark_vllm_cuda_h100.json) were made by the same library
calls on an H100; each raw file's ``command`` names the script that made it.
"""
import sys

from figure import args, peagle_lab, record

stage = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "eval"
a = args(__doc__, f"out/dspark_{stage}.json", data="runs/data", minutes=9)
if stage == "eval":
    for k in (3, 5, 7):
        record(["eval", "dspark-smollm2", "peagle-smollm2", "eagle-smollm2", "--prompts", "mt-bench",
                "--num-prompts", "80", "--k", str(k), "--max-new-tokens", "128", "--device", a.device],
               a.out.replace(".json", f"-k{k}.json"))
elif stage == "serve":
    record(["vllm-bench", "--methods", "ar,eagle,peagle,dspark", "--k", "3,7", "--concurrency", "1,4,16",
            "--prompts", "mt-bench", "--num-prompts", "16", "--spread", "--max-new-tokens", "256",
            "--device", a.device], a.out)
elif stage == "train":
    peagle_lab(["train", "--preset", "dspark", "--data", a.data, "--out", "runs/dspark", "--export",
                "runs/dspark-smollm2", "--steps", "4440", "--max-minutes", str(a.minutes), "--device", a.device])
else:
    sys.exit(f"unknown stage {stage!r}: eval, serve or train")
