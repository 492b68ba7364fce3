"""The fast engine on a CUDA GPU (docs/fast-engine.md): AR, EAGLE-3 and P-EAGLE at K 3 and 7, batch 1, 12 spread
MT-Bench prompts x 256 tokens, bf16; plain captured steps, or fused with `--compile`.

    python benchmarks/fast_engine.py                                # plain: the fast_engine_h200.json rows
    python benchmarks/fast_engine.py --compile default              # fused + Triton attention: _pgraph_k3k7
    python benchmarks/fast_engine.py --compile max-autotune-no-cudagraphs --k 7   # _pgraph_max_k7
"""
from figure import args, record

a = args(__doc__, "out/fast_engine.json", compile="", k="3,7", dtype="bfloat16")
argv = ["bench", "--engine", "fast", "--methods", "ar,eagle,peagle", "--k", a.k, "--prompts", "mt-bench", "--spread",
        "--num-prompts", "12", "--max-new-tokens", "256", "--dtype", a.dtype, "--device", "cuda" if a.device == "auto"
        else a.device]
if a.compile:
    argv += ["--compile"] + ([] if a.compile == "default" else [a.compile])
record(argv, a.out)
