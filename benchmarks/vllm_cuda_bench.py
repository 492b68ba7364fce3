"""CUDA vLLM (docs/vllm-cuda-serving.md): every method at K 3/5/7 over concurrency 1-64 on 80 MT-Bench prompts,
bf16, CUDA graphs, one model runner for every method. The recorded vllm_cuda_h200_sweep.json started the servers
side by side (benchmarks/gpu/vllm_cuda_sweep.py); this runs the same configurations one server at a time.

    python benchmarks/vllm_cuda_bench.py
"""
from figure import args, record

a = args(__doc__, "out/vllm_cuda_bench.json")
record(["vllm-bench", "--methods", "ar,eagle,peagle", "--k", "3,5,7", "--concurrency", "1,4,16,64",
        "--prompts", "mt-bench", "--num-prompts", "80", "--max-new-tokens", "256",
        "--device", "cuda" if a.device == "auto" else a.device], a.out)
