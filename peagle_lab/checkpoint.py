"""Drafter checkpoints: the folders vLLM (and *speculators*) load, written and read back.

A checkpoint is a folder: ``config.json`` + ``model.safetensors`` (+ extra files such as
``training.json``), written atomically (a temp folder renamed into place).

* :func:`vllm_config_dict` / :func:`speculators_config_dict` -- a :class:`~peagle_lab.drafter.DrafterConfig`
  as the ``config.json`` vLLM's ``LlamaForCausalLMEagle3`` reads, or as the speculators format
  (vLLM >= 0.33 also reads it: ``speculators_model_type`` ``"peagle"`` or ``"eagle3"``, the decoder
  shape as an HF ``transformer_layer_config``, and a ``speculators_config`` naming the proposal
  method (greedy, K tokens) and the verifier);
* :func:`config_from_dict` -- the way back, from our own, vLLM's and the published variants;
* :func:`save_drafter`, :func:`export_speculators` and :func:`load_drafter` -- the weights. A
  drafter that learned its mask token's embedding stores that one row (``mask_embedding``);
  loading reads it back, and :mod:`peagle_lab.materialise` turns it into the full table vLLM wants.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .atomic import DRAFTER_NOTE, atomic_dir
from .compat import place_loaded, read_mask_token_id
from .drafter import DrafterConfig, Eagle3Drafter


def vllm_config_dict(cfg: DrafterConfig, dtype: str = "float32") -> dict:
    """config.json that vLLM's ``LlamaForCausalLMEagle3`` reads (plain HF llama layout)."""
    out = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_theta": cfg.rope_theta, "rope_type": "default"},
        "max_position_embeddings": cfg.max_position_embeddings,
        "attention_bias": cfg.attention_bias,
        "tie_word_embeddings": False,
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids),
        "torch_dtype": dtype,
    }
    if cfg.parallel_drafting:
        out["ptd_token_id"] = int(cfg.mask_token_id)
        if cfg.trained_depth is not None:
            out["peagle_trained_depth"] = int(cfg.trained_depth)
    return out


def speculators_config_dict(drafter: Eagle3Drafter, verifier_name: str, verifier_architectures: list[str],
                            k: int) -> dict:
    """config.json in the speculators format: greedy proposals of ``k`` tokens, checked by ``verifier_name``."""
    c = drafter.cfg
    algorithm = "peagle" if c.parallel_drafting else "eagle3"
    out = {
        "architectures": ["PEagleSpeculator" if c.parallel_drafting else "Eagle3Speculator"],
        "speculators_model_type": algorithm,
        "transformer_layer_config": {
            "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": c.hidden_size,
            "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
            "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim, "intermediate_size": c.intermediate_size,
            "hidden_act": "silu", "rms_norm_eps": c.rms_norm_eps, "max_position_embeddings": c.max_position_embeddings,
            "rope_parameters": {"rope_theta": c.rope_theta, "rope_type": "default"}, "vocab_size": c.vocab_size,
            "attention_bias": c.attention_bias, "tie_word_embeddings": False,
        },
        "draft_vocab_size": c.draft_vocab_size,
        "target_hidden_size": c.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(c.aux_layer_ids),
        "norm_before_residual": False,
        "embed_requires_grad": c.has_embed_tokens,
        "speculators_config": {
            "algorithm": algorithm,
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": int(k)}],
            "verifier": {"name_or_path": verifier_name, "architectures": list(verifier_architectures)},
        },
    }
    if c.parallel_drafting:
        out["mask_token_id"] = int(c.mask_token_id)
    return out




def save_drafter(drafter: Eagle3Drafter, path: str | os.PathLike, dtype: torch.dtype = torch.float32,
                 extra_files: dict[str, str] | None = None, config: dict | None = None, *,
                 overwrite: bool = False, flag: str = "overwrite=True",
                 shapes: dict[str, tuple[int, ...]] | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (+ ``extra_files``) atomically: a temp folder
    renamed into place, so a failed export leaves the previous drafter (or nothing) behind.

    ``path`` must be new, empty, or a folder peagle-lab wrote (its marker file); anything else is
    refused (:class:`~peagle_lab.atomic.DestinationInUse`, naming ``flag``) unless ``overwrite``. ``shapes``
    stores the named tensors in another shape (the same values), as another format's model holds them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, value in drafter.state_dict().items():
        if name in ("d2t", "t2d") and drafter.lm_head is None:
            continue                       # full vocabulary: no mapping (vLLM has no d2t parameter then)
        if name in ("d2t", "t2d"):
            tensors[name] = value.contiguous()
        else:
            tensors[name] = value.detach().to(dtype).contiguous()
    for name, shape in (shapes or {}).items():
        if name in tensors:
            tensors[name] = tensors[name].reshape(shape).contiguous()
    dtype_name = str(dtype).removeprefix("torch.")
    with atomic_dir(path, overwrite=overwrite, flag=flag, note=DRAFTER_NOTE) as tmp:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = config if config is not None else vllm_config_dict(drafter.cfg, dtype_name)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return path


def export_speculators(drafter: Eagle3Drafter, path: str | os.PathLike, *, verifier_name: str,
                       verifier_architectures: list[str], k: int | None = None,
                       dtype: torch.dtype = torch.bfloat16, overwrite: bool = False,
                       flag: str = "overwrite=True") -> Path:
    """Write ``path`` in the speculators format (K defaults to the trained depth, else 3); ``path`` is
    refused as in :func:`save_drafter` unless ``overwrite``. speculators' P-EAGLE model holds ``mask_hidden`` as
    ``(1, 1, 3H)``, so it is stored so (:func:`load_drafter` reads either shape).

    A DSpark drafter is refused: speculators' DSpark layout is DFlash's "1+N" block whose anchor is a separate
    bonus token, while this package's (and vLLM's default ``Qwen3DSparkModel``) samples from the anchor, so the
    same weights would draft differently there."""
    if hasattr(drafter, "markov_head"):
        raise ValueError("a DSpark drafter has no faithful speculators-format export (speculators' DSpark block is "
                         "DFlash's 1+N layout with a bonus anchor; this drafter samples from the anchor): serve the "
                         "folder itself, vLLM loads it as method dspark")
    k = k or drafter.cfg.trained_depth or 3
    config = speculators_config_dict(drafter, verifier_name, verifier_architectures, k)
    shapes = {"mask_hidden": (1, 1, -1)} if drafter.mask_hidden is not None else None
    return save_drafter(drafter, Path(path), dtype=dtype, config=config, overwrite=overwrite, flag=flag,
                        shapes=shapes)


_ALIASES = (("midlayer.", "layers.0."), ("model.", ""))


def _canonical_key(key: str) -> str:
    for old, new in _ALIASES:
        if key.startswith(old):
            key = new + key[len(old):]
    return key


def config_from_dict(raw: dict) -> DrafterConfig:
    """Read our own, vLLM's and the published variants of the EAGLE-3 / P-EAGLE config."""
    heads = int(raw["num_attention_heads"])
    eagle_cfg = raw.get("eagle_config") or {}
    aux = raw.get("eagle_aux_hidden_state_layer_ids") or eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
    mask_id = read_mask_token_id(raw)
    rope = raw.get("rope_parameters") or {}
    return DrafterConfig(
        hidden_size=int(raw["hidden_size"]), num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
        intermediate_size=int(raw["intermediate_size"]), vocab_size=int(raw["vocab_size"]),
        draft_vocab_size=int(raw.get("draft_vocab_size") or raw["vocab_size"]),
        target_hidden_size=int(raw.get("target_hidden_size") or raw["hidden_size"]),
        aux_layer_ids=tuple(aux) if aux else (),
        num_layers=int(raw.get("num_hidden_layers", 1)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
        max_position_embeddings=int(raw.get("max_position_embeddings", 8192)),
        attention_bias=bool(raw.get("attention_bias", False)),
        parallel_drafting=mask_id is not None, mask_token_id=None if mask_id is None else int(mask_id),
        trained_depth=raw.get("peagle_trained_depth"), has_embed_tokens=True)


def with_learned_mask_row(drafter: Eagle3Drafter, target, mask_token_id: int | None = None) -> Eagle3Drafter:
    """The same P-EAGLE drafter with its mask token moved to ``mask_token_id`` (default: an id real text
    never produces, :func:`~peagle_lab.drafter.default_mask_token_id`) and the mask row made a parameter of
    its own, initialised to the row the drafter was trained with (the old mask id's embedding).

    Drafts are unchanged (the mask slots see the same vector); fine-tuning the result
    (``peagle-lab train --init-from``) then learns the row, and an export stores it beside the weights.
    """
    from .drafter import default_mask_token_id

    if not drafter.cfg.parallel_drafting:
        raise ValueError("an EAGLE-3 drafter has no mask token; only a P-EAGLE drafter can learn a mask row")
    if drafter.mask_embedding is not None:
        return drafter
    table = target.model.get_input_embeddings().weight
    old = drafter.cfg.mask_token_id
    new = default_mask_token_id(target) if mask_token_id is None else int(mask_token_id)
    if not 0 <= new < table.shape[0]:
        raise ValueError(f"mask token id {new} is outside the target's vocabulary of {table.shape[0]}")
    cfg = replace(drafter.cfg, mask_token_id=new, learned_mask_embedding=True)
    out = Eagle3Drafter(cfg).to(drafter.fc.weight.device)
    with torch.no_grad():
        out.mask_embedding.copy_(table[old][None].to(out.mask_embedding))
    out.load_state_dict({**drafter.state_dict(), "mask_embedding": out.mask_embedding.detach()})
    out.share_target_weights(target)
    return out


def read_config(path: str | os.PathLike) -> dict:
    """A drafter folder's ``config.json`` as a dict; a missing, truncated or hand-broken one raises naming the file
    (and the line of a JSON error) and the fix."""
    file = Path(path) / "config.json"
    if not file.exists():
        raise FileNotFoundError(f"{path} is not a drafter folder (no config.json); pass the folder save_drafter wrote")
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}:{err.lineno}: not valid JSON ({err.msg}); the file is damaged: export or copy the "
                         "drafter again") from None
    except UnicodeDecodeError:
        raise ValueError(f"{file} is not UTF-8 text; the file is damaged: export or copy the drafter again") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{file} holds a JSON {type(raw).__name__}, not an object; export or copy the drafter again")
    return raw


def _config(path: Path) -> tuple[dict, DrafterConfig]:
    raw = read_config(path)
    try:
        return raw, config_from_dict(raw)
    except KeyError as err:
        raise ValueError(f"{path / 'config.json'} has no {err.args[0]!r}, which a drafter's config needs; add it "
                         "(or export the drafter again)") from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path / 'config.json'} holds a value of the wrong kind ({err}); export the drafter "
                         "again") from None


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path} has no .safetensors weights")
    state = {}
    for f in files:
        try:
            state.update({_canonical_key(k): v for k, v in load_file(str(f)).items()})
        except Exception as err:                  # safetensors' own error type: a truncated or damaged file
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
            raise ValueError(f"{f} is truncated or damaged ({first}); export or copy the drafter again") from None
    return state


# the config keys that decide each weight's shape, for a message naming the key to fix
_SHAPE_KEYS = {"q_proj": "num_attention_heads x head_dim", "k_proj": "num_key_value_heads x head_dim",
               "v_proj": "num_key_value_heads x head_dim", "o_proj": "hidden_size, num_attention_heads x head_dim",
               "mlp": "intermediate_size, hidden_size", "fc": "hidden_size, 3 x target_hidden_size",
               "embed_tokens": "vocab_size, hidden_size", "lm_head": "draft_vocab_size, hidden_size",
               "d2t": "draft_vocab_size", "t2d": "vocab_size"}


def _shape_problem(path: Path, raw: dict, cfg: DrafterConfig, key: str, have: tuple, want: tuple) -> str:
    """One line: which weight disagrees with config.json, and the config key to fix."""
    part = next((p for p in _SHAPE_KEYS if p in key.split(".")), None)
    if part in ("k_proj", "v_proj") and "num_key_value_heads" not in raw and have[0] % cfg.head_dim == 0:
        return (f"{path / 'config.json'} has no num_key_value_heads (so it was taken as num_attention_heads = "
                f"{cfg.num_heads}), but {key} is {list(have)}: add \"num_key_value_heads\": {have[0] // cfg.head_dim}")
    decided = f" (set by {_SHAPE_KEYS[part]})" if part else ""
    return (f"{path}: {key} is {list(have)} in the weights but config.json gives {list(want)}{decided}; the config and "
            "the weights do not belong together: fix that key or export the drafter again")


def load_drafter(path: str | os.PathLike, target=None, dtype: torch.dtype = torch.float32) -> Eagle3Drafter:
    """Load a drafter folder; ``target`` fills in missing aux ids / embeddings and is checked. A damaged config or
    weights file, a missing key, or a weight whose shape the config does not describe raises ValueError naming the
    file and the key."""
    path = Path(path)
    read_config(path)                                    # a missing or damaged config.json: named first
    from .dspark import is_dspark_dir, load_dspark
    if is_dspark_dir(path):                              # a DSpark drafter (vLLM's Qwen3DSparkModel layout)
        return load_dspark(path, target, dtype)
    raw, cfg = _config(path)
    state = _read_weights(path)
    if cfg.parallel_drafting and "mask_hidden" not in state:
        raise ValueError(f"{path}: config asks for parallel drafting (mask token id) but the weights have no "
                         "mask_hidden; re-export the drafter with its trained mask_hidden")
    cfg.has_embed_tokens = "embed_tokens.weight" in state
    cfg.has_lm_head = "lm_head.weight" in state
    cfg.learned_mask_embedding = "mask_embedding" in state
    if cfg.learned_mask_embedding and not cfg.parallel_drafting:
        raise ValueError(f"{path}: the weights hold a learned mask_embedding but config.json names no mask token "
                         "(ptd_token_id); re-export the drafter")
    if not cfg.has_lm_head and cfg.draft_vocab_size != cfg.vocab_size:
        raise ValueError(f"{path}: no lm_head in the weights but draft_vocab_size {cfg.draft_vocab_size} != "
                         f"vocab_size {cfg.vocab_size}; a drafter sharing the target's lm_head must draft over the "
                         "full vocabulary")
    if not cfg.aux_layer_ids:
        if target is None:
            raise ValueError(f"{path}: config names no eagle_aux_hidden_state_layer_ids; "
                             "pass the target to use its taps")
        cfg.aux_layer_ids = tuple(target.aux_layer_ids)
    drafter = Eagle3Drafter(cfg)
    own = drafter.state_dict()
    if "d2t" not in state:  # full-vocab drafters may omit the mapping
        state["d2t"], state["t2d"] = own["d2t"], own["t2d"]
    if "t2d" not in state:
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[torch.arange(cfg.draft_vocab_size) + state["d2t"]] = True
        state["t2d"] = t2d
    if "mask_hidden" in state:
        state["mask_hidden"] = state["mask_hidden"].reshape(1, -1)
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(f"{path}: weights do not match an EAGLE-3 drafter of this config "
                         f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
    for key, value in state.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise ValueError(_shape_problem(path, raw, cfg, key, tuple(value.shape), tuple(own[key].shape)))
    return place_loaded(drafter, state, dtype, target)
