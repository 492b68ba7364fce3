"""``peagle-lab check DRAFTER``: what is wrong with a drafter, in plain words, before serving it.

The usual complaint with EAGLE-3 / P-EAGLE heads is "near-zero acceptance in vLLM": the checkpoint
loads, but it was trained on other taps, another vocabulary mapping, or without its mask hidden
state. This runs every check we can make offline and then a short acceptance probe.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from .checkpoint import load_drafter
from .compat import IncompatibleDrafter, check_compatible, drafting_method, fit_problems, read_mask_token_id
from .materialise import materialise_for_vllm


REQUIRED_KEYS = ("hidden_size", "vocab_size", "num_attention_heads", "intermediate_size")


def _read_config(path: Path) -> tuple[dict | None, list[str]]:
    """``(config, [])`` or ``(None, [what is wrong with config.json])``."""
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        return None, [f"{path} has no config.json: not a drafter folder"]
    try:
        cfg = json.loads(cfg_file.read_text())
    except (ValueError, OSError) as err:                 # truncated or hand-edited
        return None, [f"{cfg_file} is not valid JSON ({err}); restore it from the export"]
    if not isinstance(cfg, dict):
        return None, [f"{cfg_file} holds {type(cfg).__name__}, not a JSON object"]
    missing = [key for key in REQUIRED_KEYS if not isinstance(cfg.get(key), int)]
    if missing:
        return None, [f"{cfg_file} lacks {', '.join(missing)} (whole numbers); is this a drafter's config "
                      "in vLLM's EAGLE-3 layout?"]
    return cfg, []


def _weight_shapes(path: Path) -> tuple[dict[str, list[int]], list[str]]:
    """``({canonical key: shape}, problems)`` read from the safetensors headers (no tensor is loaded)."""
    from .checkpoint import _canonical_key

    files = sorted(path.glob("*.safetensors"))
    if not files:
        return {}, [f"{path} has no .safetensors weights"]
    shapes, problems = {}, []
    for f in files:
        try:
            with safe_open(str(f), "pt") as handle:
                shapes.update({_canonical_key(k): list(handle.get_slice(k).get_shape()) for k in handle.keys()})
        except Exception as err:                         # safetensors raises its own error type for a bad file
            problems.append(f"{f} is unreadable, truncated or corrupt ({err}); copy or export it again")
    return shapes, problems


def _shape_problems(cfg: dict, shapes: dict[str, list[int]]) -> list[str]:
    """Where the weights' shapes disagree with what config.json says (a config from another drafter, an edit)."""
    hidden, vocab = cfg["hidden_size"], cfg["vocab_size"]
    width = (shapes.get("norm.weight") or shapes.get("fc.weight") or [hidden])[0]
    if width != hidden:                                 # everything else would disagree too: say it once
        return [f"config.json says hidden_size {hidden} but the weights are {width} wide (norm.weight / fc.weight): "
                "the config and the weights do not belong together"]
    taps = 3 * int(cfg.get("target_hidden_size") or hidden)
    draft_vocab = int(cfg.get("draft_vocab_size") or vocab)
    expected = {"fc.weight": ([hidden, taps], "hidden_size, 3 x target_hidden_size"),
                "lm_head.weight": ([draft_vocab, hidden], "draft_vocab_size, hidden_size"),
                "d2t": ([draft_vocab], "draft_vocab_size"), "t2d": ([vocab], "vocab_size"),
                "embed_tokens.weight": ([vocab, hidden], "vocab_size, hidden_size"),
                "layers.0.mlp.gate_proj.weight": ([cfg["intermediate_size"], hidden], "intermediate_size, hidden_size")}
    problems = [f"{key} has shape {shapes[key]} but config.json says {want} ({what}): the config and the weights "
                "do not belong together"
                for key, (want, what) in expected.items() if key in shapes and shapes[key] != want]
    layers = {int(k.split(".")[1]) for k in shapes if k.startswith("layers.") and k.split(".")[1].isdigit()}
    if layers and "num_hidden_layers" in cfg and max(layers) + 1 != int(cfg["num_hidden_layers"]):
        problems.append(f"the weights hold {max(layers) + 1} layer(s) but config.json says num_hidden_layers "
                        f"{cfg['num_hidden_layers']}")
    return problems


def folder_problems(path: str | Path) -> list[str]:
    """What is wrong with a drafter folder on its own, no target needed: a missing or unreadable config,
    missing, truncated or corrupt weights, shapes the config does not describe (``[]`` when none)."""
    path = Path(path)
    if not path.is_dir():
        return [f"{path} is not a folder"]
    cfg, problems = _read_config(path)
    if cfg is None:
        return problems
    shapes, problems = _weight_shapes(path)
    return problems or _shape_problems(cfg, shapes)


def check_drafter(path: str, target, k: int | None = None, probe_prompts: int = 2, probe_tokens: int = 32) -> dict:
    """``{"problems": [...], "warnings": [...], "probe": {...} or None}`` for the drafter folder ``path``."""
    path = Path(path)
    problems, warnings = folder_problems(path), []
    if problems:                                       # nothing further can be read
        return {"problems": problems, "warnings": [], "probe": None}
    try:                                               # a learned mask row stored apart: check what vLLM loads
        path = materialise_for_vllm(path, target)
    except ValueError as err:                          # trained with another target's embedding
        return {"problems": [str(err)], "warnings": [], "probe": None}
    cfg = json.loads((path / "config.json").read_text())
    dspark = "markov_rank" in cfg                       # vLLM's Qwen3DSparkModel (peagle_lab.dspark)
    if not dspark and not any("Eagle3" in a for a in cfg.get("architectures", [])):
        problems.append(f"architectures {cfg.get('architectures')} do not name an EAGLE-3 model "
                        "(vLLM's loader expects LlamaForCausalLMEagle3)")
    if dspark and "Qwen3DSparkModel" not in cfg.get("architectures", []):
        problems.append(f"a DSpark config (markov_rank) needs architectures ['Qwen3DSparkModel'] for vLLM, got "
                        f"{cfg.get('architectures')}")
    keys = set()
    for f in path.glob("*.safetensors"):
        with safe_open(str(f), "pt") as handle:
            keys |= set(handle.keys())
    parallel = read_mask_token_id(cfg) is not None
    if dspark and not {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight"} <= keys:
        problems.append("a DSpark drafter needs markov_head.markov_w1/markov_w2 weights (vLLM's Qwen3DSparkModel "
                        "loads them); re-export it")
    if parallel and not dspark and "mask_hidden" not in keys:
        problems.append("config asks for parallel drafting but the weights have no mask_hidden "
                        "(vLLM refuses to start; re-export with the trained mask_hidden)")
    if int(cfg.get("draft_vocab_size") or cfg["vocab_size"]) < int(cfg["vocab_size"]) and "d2t" not in keys:
        problems.append("draft vocabulary is smaller than the target's but there is no d2t mapping "
                        "(every draft would map to the wrong token)")
    problems += [f"{p}: trained for another target" for p in fit_problems(
        expects_hidden=cfg.get("target_hidden_size") or cfg["hidden_size"], vocab=cfg["vocab_size"], taps=None,
        target_hidden=target.hidden_size, target_vocab=target.vocab_size, target_layers=target.num_layers)]
    if problems:
        return {"problems": problems, "warnings": warnings, "probe": None}
    try:
        drafter = load_drafter(path, target).to(target.device)
    except (ValueError, RuntimeError, KeyError, TypeError, OSError) as err:   # IncompatibleDrafter is a ValueError
        return {"problems": [f"the drafter does not load: {err}"], "warnings": warnings, "probe": None}
    ids = torch.arange(drafter.cfg.draft_vocab_size) + drafter.d2t
    if ids.min() < 0 or ids.max() >= drafter.cfg.vocab_size or not drafter.t2d[ids].all():
        problems.append("d2t maps draft ids outside the target vocabulary or disagrees with t2d "
                        "(d2t must hold offsets: target id = i + d2t[i])")
    if parallel and not 0 <= drafter.cfg.mask_token_id < drafter.cfg.vocab_size:
        problems.append(f"mask token id {drafter.cfg.mask_token_id} is outside the target vocabulary")
    method = drafting_method(drafter) if drafter is not None else ("peagle" if parallel else "eagle")
    k = k or (drafter.cfg.trained_depth if parallel and drafter.cfg.trained_depth else 3)
    try:
        check_compatible(drafter, target, k, parallel=parallel)
    except IncompatibleDrafter as err:
        problems.append(str(err))
    if problems:
        return {"problems": problems, "warnings": warnings, "probe": None}
    from .engines.teaching import generate
    from .prompts import load_prompts
    from .stats import AcceptanceStats

    stats = AcceptanceStats(k)
    for prompt in load_prompts("mt-bench", probe_prompts):
        stats = stats.merge(generate(target, target.chat_ids(prompt), method=method, drafter=drafter, k=k,
                                     max_new_tokens=probe_tokens).acceptance)
    probe = {"method": method, "k": k, "acceptance_length": stats.acceptance_length,
             "acceptance_per_position": stats.per_position}
    if stats.acceptance_length < 1.05:
        warnings.append(f"near-zero acceptance (AL {stats.acceptance_length:.2f}): the drafter loads and fits, but "
                        "was probably trained on another target, other taps or another chat template")
    return {"problems": problems, "warnings": warnings, "probe": probe}
