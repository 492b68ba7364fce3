"""The README's picture (docs/acceptance_per_position.png), drawn from recorded data: vLLM's acceptance per draft
position for the shipped EAGLE-3 and P-EAGLE drafters at K=7, concurrency 1, on 80 MT-Bench prompts with 256 new
tokens per reply, from the CUDA vLLM sweep on an H200 (``peagle_lab.recorded.load("vllm_cuda_h200")``, made from
benchmarks/results/vllm_cuda_h200_sweep.json). It measures nothing. It needs matplotlib (`pip install matplotlib`),
which the package itself does not depend on.

    python benchmarks/readme_figure.py
"""
from __future__ import annotations

import argparse
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "acceptance_per_position.png"
K, CONCURRENCY, PROMPTS = 7, 1, "mt-bench"
# (method, vLLM model runner of the recorded row, label, bar colour)
SERIES = [("eagle", "v1", "EAGLE-3", "#636EFA"), ("peagle", "v1", "P-EAGLE", "#EF553B")]


def data() -> list[dict]:
    """One dict per bar series: ``label``, ``layers`` (of the shipped drafter), ``acceptance_length`` and
    ``acceptance_per_position`` (vLLM's counters), copied from the recorded sweep row it names (``config``)."""
    from peagle_lab import recorded
    from peagle_lab.drafters_registry import describe

    rec = recorded.load("vllm_cuda_h200")
    layers = {d["method"]: d["num_layers"] for d in describe()}
    out = []
    for method, runner, label, colour in SERIES:
        row = next(r for r in rec["rows"] if r["method"] == method and r["runner"] == runner and r["k"] == K
                   and r["concurrency"] == CONCURRENCY and r["prompts"] == PROMPTS)
        out.append({"label": label, "colour": colour, "layers": layers[method], "config": row["config"],
                    "num_prompts": row["num_prompts"], "acceptance_length": row["acceptance_length"],
                    "acceptance_per_position": row["acceptance_per_position"]})
    return out


def title(series: list[dict]) -> str:
    from peagle_lab import recorded

    rec = recorded.load("vllm_cuda_h200")
    gpu = rec["device"].removeprefix("NVIDIA ")
    return (f"Shipped drafters in vLLM on an {gpu}: K={K}, {series[0]['num_prompts']} MT-Bench prompts, "
            f"{rec['settings']['max_new_tokens']} tokens each")


def draw(series: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.0), dpi=110)
    width = 0.8 / len(series)
    for i, s in enumerate(series):
        xs = [p + 1 + (i - (len(series) - 1) / 2) * width for p in range(K)]
        layers = f"{s['layers']} layer" + ("s" if s["layers"] != 1 else "")
        ax.bar(xs, s["acceptance_per_position"], width, color=s["colour"],
               label=f"{s['label']} ({layers}): AL {s['acceptance_length']:.2f}")
    ax.set_xticks(range(1, K + 1))
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted share of drafts")
    ax.set_title(title(series), fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    from PIL import Image                               # matplotlib's own dependency

    # 64 colours hold the bars, text and anti-aliasing: a third of the size of matplotlib's RGBA file
    Image.open(buf).convert("RGB").quantize(colors=64).save(out, optimize=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT, help=f"the PNG to write (default {OUT.relative_to(ROOT)})")
    a = ap.parse_args()
    series = data()
    draw(series, a.out)
    print(f"wrote {a.out}: " + ", ".join(f"{s['label']} AL {s['acceptance_length']:.2f}" for s in series))


if __name__ == "__main__":
    main()
