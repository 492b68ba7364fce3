"""The teaching engine's tokens/s and acceptance (docs/teaching-engine-bench.md): AR, transformers' `generate`,
EAGLE-3 and P-EAGLE at K 3/5/7 on the first 10 MT-Bench prompts, 128 new tokens, the shipped drafters.

    python benchmarks/teaching_engine_bench.py                      # CPU: recorded as bench_cpu_mtbench.json
    python benchmarks/teaching_engine_bench.py --device cuda        # recorded on an H200 as bench_h200_mtbench.json
"""
from figure import args, record

a = args(__doc__, "out/teaching_engine_bench.json")
record(["bench", "--methods", "ar,hf,eagle,peagle", "--k", "3,5,7", "--prompts", "mt-bench", "--num-prompts", "10",
        "--max-new-tokens", "128", "--engine", "teaching", "--device", a.device], a.out)
