"""Batched decoding (docs/batched-decoding.md): the batched teaching engine at several batch sizes, greedy.

    python benchmarks/batched_bench.py                              # CPU, batch 1 and 4: bench_cpu_batched.json
    python benchmarks/batched_bench.py --device cuda --batch-sizes 1,8,32,64 --k 3 --num-prompts 64 \\
        --max-new-tokens 128 --dtype bfloat16                      # an H200's batch_rows_h200.json
"""
from figure import args, record

a = args(__doc__, "out/batched_bench.json", batch_sizes="1,4", k="3,5", num_prompts=8, max_new_tokens=64,
         dtype="float32")
record(["bench", "--methods", "ar,eagle,peagle", "--k", a.k, "--prompts", "mt-bench", "--spread",
        "--num-prompts", str(a.num_prompts), "--max-new-tokens", str(a.max_new_tokens), "--batch-size", a.batch_sizes,
        "--dtype", a.dtype, "--device", a.device], a.out)
