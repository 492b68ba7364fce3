"""Acceptance of the shipped pair, replayed (docs/acceptance-by-category.md, docs/replay.md): AL and acceptance
per position at K=7 on all 80 MT-Bench prompts (per category), or on 40 spread HumanEval problems; 128 tokens.

    python benchmarks/acceptance.py                                 # replay_acceptance_mtbench80.json
    python benchmarks/acceptance.py --prompts humaneval --num-prompts 40 --spread 1   # replay_acceptance_humaneval40
"""
from figure import args, record

a = args(__doc__, "out/acceptance.json", prompts="mt-bench", num_prompts=80, spread=0)
record(["eval", "peagle-smollm2", "eagle-smollm2", "--prompts", a.prompts, "--num-prompts", str(a.num_prompts),
        *(["--spread"] if a.spread else []), "--k", "7", "--max-new-tokens", "128", "--device", a.device], a.out)
