"""Drafter checkpoints: bit-exact round trips in vLLM's layout, published variants, clear refusals."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import random_drafter, tiny_target
from peagle_lab.checkpoint import load_drafter, save_drafter
from peagle_lab.compat import IncompatibleDrafter, check_compatible
from peagle_lab.engines.teaching import generate

VLLM_LAYER_KEYS = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                   "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                   "input_layernorm.weight", "post_attention_layernorm.weight"}


@pytest.mark.parametrize("parallel", [False, True])
def test_round_trip_is_bit_exact_and_vllm_shaped(target, tmp_path, parallel):
    d = random_drafter(target, parallel=parallel, num_layers=2, draft_vocab_size=4096, seed=3, trained_depth=8)
    path = save_drafter(d, tmp_path / "drafter")
    back = load_drafter(path, target)
    a, b = d.state_dict(), back.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)

    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert cfg["draft_vocab_size"] == 4096 and cfg["vocab_size"] == target.vocab_size
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert ("ptd_token_id" in cfg) == parallel
    keys = set(load_file(str(path / "model.safetensors")))
    expect = {"embed_tokens.weight", "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d",
              "layers.0.hidden_norm.weight"} | {f"layers.{i}.{k}" for i in range(2) for k in VLLM_LAYER_KEYS}
    assert keys == expect | ({"mask_hidden"} if parallel else set())
    w = load_file(str(path / "model.safetensors"))
    assert w["layers.0.self_attn.q_proj.weight"].shape[1] == 2 * target.hidden_size    # layer 0 reads [embed; hidden]
    assert w["layers.1.self_attn.q_proj.weight"].shape[1] == target.hidden_size
    assert w["fc.weight"].shape == (target.hidden_size, 3 * target.hidden_size)
    # d2t is an offset: target id = i + d2t[i]; t2d marks exactly those ids
    ids = torch.arange(4096) + w["d2t"]
    assert w["t2d"].sum() == 4096 and w["t2d"][ids].all()
    if parallel:
        assert w["mask_hidden"].numel() == 3 * target.hidden_size


def test_published_variants_load(target, tmp_path):
    """midlayer.* keys, a model. prefix, pard_token / mask_token_id, eagle_config taps, no embed_tokens."""
    d = random_drafter(target, parallel=True, num_layers=1, seed=4)
    path = save_drafter(d, tmp_path / "ours")
    w = load_file(str(path / "model.safetensors"))
    cfg = json.loads((path / "config.json").read_text())
    variant = tmp_path / "published"
    variant.mkdir()
    renamed = {}
    for k, v in w.items():
        if k == "embed_tokens.weight":
            continue  # shared with the target
        if k.startswith("layers.0."):
            k = "midlayer." + k[len("layers.0."):]
        elif k not in ("d2t", "t2d", "mask_hidden", "lm_head.weight"):
            k = "model." + k
        renamed[k] = v.reshape(-1) if k == "mask_hidden" else v
    save_file(renamed, str(variant / "model.safetensors"))
    cfg["pard_token"] = cfg.pop("ptd_token_id")
    cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": cfg.pop("eagle_aux_hidden_state_layer_ids")}
    (variant / "config.json").write_text(json.dumps(cfg))
    back = load_drafter(variant, target)
    assert back.embed_tokens is None and back.cfg.mask_token_id == d.cfg.mask_token_id
    ids = target.chat_ids("Say hi.")
    a = generate(target, ids, method="peagle", drafter=d, k=3, max_new_tokens=12)
    b = generate(target, ids, method="peagle", drafter=back, k=3, max_new_tokens=12)
    assert [s.drafts for s in a.steps] == [s.drafts for s in b.steps]   # same proposals: same weights

    cfg2 = dict(cfg)
    cfg2.pop("pard_token")
    cfg2["mask_token_id"] = 7
    (variant / "config.json").write_text(json.dumps(cfg2))
    assert load_drafter(variant, target).cfg.mask_token_id == 7


def test_missing_mask_hidden_is_refused(target, tmp_path):
    path = save_drafter(random_drafter(target, parallel=True), tmp_path / "d")
    w = load_file(str(path / "model.safetensors"))
    del w["mask_hidden"]
    save_file(w, str(path / "model.safetensors"))
    with pytest.raises(ValueError, match="no mask_hidden"):
        load_drafter(path, target)


def test_incompatible_drafter_and_depth_are_refused(target, tmp_path):
    d = random_drafter(target, parallel=True, trained_depth=4)
    with pytest.raises(IncompatibleDrafter, match="K=6 exceeds the depth"):
        check_compatible(d, target, k=6)
    with pytest.raises(IncompatibleDrafter, match="K=6 exceeds"):
        generate(target, [1, 2, 3], method="peagle", drafter=d, k=6, max_new_tokens=4)
    check_compatible(d, target, k=4)
    d.cfg.aux_layer_ids = (1, 2, 3)
    with pytest.raises(IncompatibleDrafter, match=r"trained on target layers \[1, 2, 3\]"):
        check_compatible(d, target)
    d.cfg.aux_layer_ids, d.cfg.target_hidden_size = target.aux_layer_ids, 1024
    with pytest.raises(IncompatibleDrafter, match="hidden size 1024"):
        check_compatible(d, target)


def test_failed_save_leaves_previous_checkpoint(target, tmp_path, monkeypatch):
    d = random_drafter(target, parallel=False)
    path = save_drafter(d, tmp_path / "d")
    before = (path / "model.safetensors").read_bytes()
    import peagle_lab.checkpoint as mod

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(mod, "save_file", broken)
    with pytest.raises(OSError):
        save_drafter(random_drafter(target, parallel=False, seed=9), path)
    assert (path / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_not_a_drafter_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a drafter folder"):
        load_drafter(tmp_path)


@pytest.mark.parametrize("parallel", [False, True])
def test_speculators_export_validates_with_speculators_config_classes(target, tmp_path, parallel):
    from speculators import SpeculatorModelConfig

    from peagle_lab.checkpoint import export_speculators

    d = random_drafter(target, parallel=parallel, num_layers=2, draft_vocab_size=2048, seed=3, trained_depth=8)
    path = export_speculators(d, tmp_path / "spec", verifier_name="HuggingFaceTB/SmolLM2-135M-Instruct",
                              verifier_architectures=["LlamaForCausalLM"])
    cfg = SpeculatorModelConfig.from_pretrained(str(path))
    assert cfg.speculators_model_type == ("peagle" if parallel else "eagle3")
    assert type(cfg).__name__ == ("PEagleSpeculatorConfig" if parallel else "Eagle3SpeculatorConfig")
    assert cfg.draft_vocab_size == 2048 and cfg.eagle_aux_hidden_state_layer_ids == [2, 15, 27]
    assert cfg.transformer_layer_config.num_hidden_layers == 2
    assert cfg.speculators_config.proposal_methods[0].speculative_tokens == 8
    assert cfg.speculators_config.verifier.name_or_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    if parallel:
        assert cfg.mask_token_id == d.cfg.mask_token_id
    assert set(load_file(str(path / "model.safetensors"))) == set(d.state_dict())


def test_shared_lm_head_drafter_trains_saves_and_loads_without_a_head(tmp_path):
    """A drafter with no lm_head of its own drafts with the target's (full vocabulary): it is not trained,
    not saved (nor d2t/t2d: vLLM has no mapping then), and loading shares it again; logits are unchanged."""
    from peagle_lab.checkpoint import load_drafter, save_drafter
    from peagle_lab.drafter import DrafterConfig, init_drafter
    from safetensors.torch import load_file

    tgt = tiny_target(vocab=40, seed=3)
    with pytest.raises(ValueError, match="draft_vocab_size=40"):
        init_drafter(DrafterConfig.for_target(tgt, draft_vocab_size=16, has_lm_head=False), tgt)
    cfg = DrafterConfig.for_target(tgt, num_layers=2, parallel_drafting=True, trained_depth=4,
                                   has_embed_tokens=False, has_lm_head=False)
    d = init_drafter(cfg, tgt).eval()
    assert d.lm_head is None and all("lm_head" not in n for n, _ in d.named_parameters())
    ids = torch.randint(0, 40, (1, 6))
    hidden = torch.randn(1, 6, tgt.hidden_size)
    prenorm, logits = d(ids, d.project(torch.randn(1, 6, 3 * tgt.hidden_size)))
    want = d.norm(prenorm) @ tgt.model.get_output_embeddings().weight.T
    torch.testing.assert_close(logits, want)
    out = save_drafter(d, tmp_path / "shared")
    assert not {"lm_head.weight", "d2t", "t2d"} & set(load_file(str(out / "model.safetensors")))
    back = load_drafter(out, tgt)
    assert back.lm_head is None
    torch.testing.assert_close(back(ids, hidden)[1], d(ids, hidden)[1])
    prompt = [1, 2, 3, 4]
    assert generate(tgt, prompt, method="peagle", drafter=back, k=3, max_new_tokens=12).tokens == \
        generate(tgt, prompt, method="ar", max_new_tokens=12).tokens
    bare = load_drafter(out)                       # no target given: nothing to share yet
    bare.share_embedding(tgt.model.get_input_embeddings().weight)
    with pytest.raises(RuntimeError, match="share_head"):
        bare(ids, hidden)


@pytest.mark.parametrize("name", ["eagle-smollm2", "peagle-smollm2"])
def test_speculators_loads_each_export_with_our_weights(tmp_path, name):
    """The format's owner loads what export-speculators writes (``SpeculatorModel.from_pretrained``, which refuses
    a tensor of another shape) and holds exactly our values."""
    from speculators import SpeculatorModel

    from peagle_lab.assets import smollm2_dir
    from peagle_lab.checkpoint import export_speculators
    from peagle_lab.drafters_registry import shipped

    ours = load_drafter(shipped()[name])
    path = export_speculators(ours, tmp_path / "spec", verifier_name=str(smollm2_dir()),   # a local verifier: offline
                              verifier_architectures=["LlamaForCausalLM"])
    theirs = SpeculatorModel.from_pretrained(str(path)).state_dict()
    written = load_file(str(path / "model.safetensors"))
    assert set(written) <= set(theirs)
    for key, value in written.items():
        assert torch.equal(theirs[key].to(value.dtype).reshape(value.shape), value), key
    for key, value in ours.state_dict().items():                      # every tensor went out, in bf16
        assert torch.equal(written[key].reshape(value.shape).to(value.dtype), value.to(written[key].dtype)
                           .to(value.dtype)), key


def test_dspark_has_no_speculators_export(tmp_path):
    from peagle_lab.checkpoint import export_speculators
    from peagle_lab.drafters_registry import shipped

    with pytest.raises(ValueError, match="1\\+N layout"):
        export_speculators(load_drafter(shipped()["dspark-smollm2"]), tmp_path / "s", verifier_name="v",
                           verifier_architectures=["LlamaForCausalLM"])
