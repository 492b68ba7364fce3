"""The drafters in vLLM's CPU build (docs/vllm-cpu-serving.md): no speculation, EAGLE-3 and P-EAGLE at K 3/5/7
over concurrency 1-8, 12 spread MT-Bench prompts x 48 tokens, float32 (vllm_cpu_sweep.json; about an hour on a
2-core CPU: one vLLM server per method and K).

    python benchmarks/vllm_cpu_sweep.py
"""
from figure import args, record

a = args(__doc__, "out/vllm_cpu_sweep.json")
record(["vllm-bench", "--methods", "none,eagle,peagle", "--k", "3,5,7", "--concurrency", "1,2,4,8",
        "--prompts", "mt-bench", "--num-prompts", "12", "--spread", "--max-new-tokens", "48",
        "--device", "cpu" if a.device == "auto" else a.device], a.out)
