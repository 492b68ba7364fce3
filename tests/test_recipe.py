"""P-EAGLE's recipe: an unused mask token with a learned embedding row (materialised for vLLM), feature
noise in training only, multi-turn regeneration."""
import json

import pytest
import torch
from safetensors.torch import load_file

from helpers import learnable_samples, load_benchmark, tiny_target
from peagle_lab.checkpoint import load_drafter, save_drafter
from peagle_lab.drafter import DrafterConfig, init_drafter, unused_token_id
from peagle_lab.engines.drafting import draft_parallel
from peagle_lab.materialise import FINGERPRINT_KEY, embedding_fingerprint, materialise_for_vllm, needs_materialising
from peagle_lab.train.data import load_samples, regenerate_conversations
from peagle_lab.train.loss import SeqData
from peagle_lab.train.trainer import TrainConfig, Trainer, with_feature_noise
from peagle_lab.train.vocab import build_draft_vocab, token_counts


def test_unused_id_is_a_special_token_real_text_never_produces(target):
    from peagle_lab.prompts import load_prompts

    tok = target.tokenizer
    mask = unused_token_id(tok, target.eos_token_ids)
    assert mask == 16 and str(tok.added_tokens_decoder[mask]) == "<empty_output>"
    assert mask not in target.eos_token_ids and mask not in (tok.bos_token_id, tok.pad_token_id, tok.unk_token_id)
    texts = load_prompts("mt-bench") + load_prompts("humaneval", 40) + load_prompts("sharegpt", 300)
    assert all(mask not in target.chat_ids(t) for t in texts)


def _peagle(target, learned=True, seed=3):
    cfg = DrafterConfig.for_target(target, num_layers=2, parallel_drafting=True, draft_vocab_size=target.vocab_size,
                                   trained_depth=4, has_embed_tokens=False, learned_mask_embedding=learned)
    d = init_drafter(cfg, target, seed=seed)
    with torch.no_grad():
        d.mask_embedding.normal_(0, 1.0) if learned else None
    return d.eval()


def test_learned_row_replaces_only_the_mask_rows():
    tgt = tiny_target(vocab=50)
    d = _peagle(tgt)
    table = tgt.model.get_input_embeddings().weight
    ids = torch.tensor([[3, d.cfg.mask_token_id, 7, d.cfg.mask_token_id]])
    e = d.embed(ids)[0]
    assert torch.equal(e[0], table[3]) and torch.equal(e[2], table[7])
    assert torch.equal(e[1], d.mask_embedding[0]) and torch.equal(e[3], d.mask_embedding[0])
    fresh = init_drafter(d.cfg, tgt, seed=0)                              # starts as the row it replaces
    assert torch.equal(fresh.mask_embedding[0], table[d.cfg.mask_token_id])


def test_training_learns_the_mask_row_and_noise_stays_out_of_evaluation(tmp_path):
    tgt = tiny_target(vocab=50)
    ids, _ = build_draft_vocab(token_counts(learnable_samples(), 50) + 1, 40)

    def trainer(out, noise, learn=True, steps=4):
        cfg = TrainConfig(method="peagle", num_layers=1, draft_vocab_size=40, max_depth=4, steps=steps, batch_size=3,
                          max_len=30, lr=3e-3, warmup_steps=1, checkpoint_every=2, seed=1, layout="padded",
                          hidden_noise=noise, learn_mask_embedding=learn)
        return Trainer(tgt, learnable_samples(), cfg, out, ids, val_replies=[(list(range(5)), list(range(5, 20)))])

    learned = trainer(tmp_path / "a", 0.0)
    start = learned.drafter.mask_embedding.detach().clone()
    learned.run(progress=False)
    assert not torch.equal(start, learned.drafter.mask_embedding.detach())
    frozen = trainer(tmp_path / "b", 0.0, learn=False)
    assert frozen.drafter.mask_embedding is None
    # noise changes training but not the validation AL of the same weights
    noisy = trainer(tmp_path / "c", 0.5, steps=1)
    noisy.drafter.load_state_dict(learned.drafter.state_dict())
    assert noisy.validation_al() == learned.validation_al()
    quiet = trainer(tmp_path / "d", 0.0, steps=1)
    quiet.drafter.load_state_dict(learned.drafter.state_dict())
    noisy.run(progress=False)
    quiet.run(progress=False)
    assert noisy.history[0]["loss"] != quiet.history[0]["loss"]


def test_feature_noise_is_uniform_bounded_and_seeded():
    data = SeqData(torch.zeros(4), torch.zeros(4, 6), torch.zeros(4, 3), torch.ones(4, dtype=torch.bool))
    a, b, c = (with_feature_noise(data, 0.05, seed=s).aux for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.abs().max() <= 0.05 and a.min() < 0 < a.max() and torch.equal(data.aux, torch.zeros(4, 6))


def test_materialised_drafter_is_the_stored_one_plus_the_targets_table(tmp_path, monkeypatch):
    monkeypatch.setenv("PEAGLE_CACHE", str(tmp_path / "cache"))
    tgt = tiny_target(vocab=50)
    d = _peagle(tgt)
    table = tgt.model.get_input_embeddings().weight
    config_path = tmp_path / "stored"
    from peagle_lab.checkpoint import vllm_config_dict

    config = {**vllm_config_dict(d.cfg, "bfloat16"), FINGERPRINT_KEY: embedding_fingerprint(table)}
    save_drafter(d, config_path, dtype=torch.bfloat16, config=config)
    assert needs_materialising(config_path)
    out = materialise_for_vllm(config_path, tgt)
    assert out != config_path and not needs_materialising(out)
    assert materialise_for_vllm(config_path, tgt) == out                  # made once, then found
    stored, made = load_file(str(config_path / "model.safetensors")), load_file(str(out / "model.safetensors"))
    emb = made.pop("embed_tokens.weight")
    row = stored.pop("mask_embedding")[0]
    assert set(made) == set(stored) and all(torch.equal(made[k], stored[k]) for k in made)
    m = d.cfg.mask_token_id
    assert torch.equal(emb[m], row.to(emb.dtype)) and emb.dtype == table.dtype   # bit-exact learned row
    others = torch.arange(50) != m
    assert torch.equal(emb[others], table.detach()[others])             # the target's rows, untouched
    assert json.loads((out / "config.json").read_text())["ptd_token_id"] == m
    # both folders draft the same tokens
    a, b = load_drafter(config_path, tgt), load_drafter(out, tgt)
    assert a.embed_tokens is None and b.embed_tokens is not None
    ctx, aux = torch.tensor([1, 2, 3, 4]), torch.randn(4, 3 * 32)
    da = draft_parallel(a, a.new_cache(), ctx, aux, 4)
    db = draft_parallel(b, b.new_cache(), ctx, aux, 4)
    assert torch.equal(da.tokens, db.tokens)
    # another target's table is refused, and nothing is written for it
    other = tiny_target(vocab=50, seed=1)
    with pytest.raises(ValueError, match="another target"):
        materialise_for_vllm(config_path, other)
    assert len(list((tmp_path / "cache" / "drafters").glob("stored-*[!k]"))) == 1


def test_multi_turn_regeneration_answers_every_turn_with_its_own_replies(target, tmp_path):
    convs = [["Say hi.", "Now say bye."], ["Name a colour."]]
    regenerate_conversations(target, convs, tmp_path, max_new_tokens=6, batch_size=4, progress=False)
    samples = load_samples(tmp_path)
    assert len(samples) == 3
    by_len = sorted(samples, key=lambda s: s.prompt_len)
    second = [s for s in samples if s.prompt_len > len(target.chat_ids("Say hi.")) + 6][0]
    first = [s for s in samples if s.prompt_len == len(target.chat_ids("Say hi."))][0]
    reply = first.ids[first.prompt_len:].tolist()
    assert second.ids[: second.prompt_len].tolist() == target.chat_history_ids(convs[0], [reply])
    assert by_len[0].prompt_len == min(len(target.chat_ids(c[0])) for c in convs)
    # an interrupted run loses only the turn it was on: without turn 1 on disk, a rerun makes it again from
    # turn 0's saved replies (greedy: the same tokens) and leaves turn 0 alone
    t0, t1 = tmp_path / "shard-00000-t0.pt", tmp_path / "shard-00000-t1.pt"
    before, stamp = torch.load(t1, weights_only=True), t0.stat().st_mtime_ns
    t1.unlink()
    regenerate_conversations(target, convs, tmp_path, max_new_tokens=6, batch_size=4, progress=False)
    after = torch.load(t1, weights_only=True)
    assert [s["ids"].tolist() for s in after] == [s["ids"].tolist() for s in before]
    assert t0.stat().st_mtime_ns == stamp


def test_ablation_table_schema_and_sources():
    """benchmarks/results/ablation_135m.json: every row names its lever, arm and source, and its AL equals the
    source replay's (AL = 1 + sum of per-position acceptance); unmeasured levers say why."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    table = json.loads((root / "benchmarks/results/ablation_135m.json").read_text())
    assert {"what", "date", "machine", "command", "rows", "not_measured"} <= set(table)
    levers = {}
    for r in table["rows"]:
        assert {"lever", "arm", "method", "k", "num_prompts", "acceptance_length", "acceptance_per_position",
                "second_draft_agreement", "source", "drafter_key"} <= set(r)
        assert r["method"] in ("eagle", "peagle") and r["num_prompts"] == 80
        assert len(r["acceptance_per_position"]) == r["k"]
        raw = json.loads((root / r["source"]).read_text())
        by_k = raw.get("results_by_k")                       # benchmarks/ablation_eval.py: several K per file
        src = by_k[str(r["k"])][r["drafter_key"]] if by_k else raw["results"][r["drafter_key"]]
        assert src["acceptance_length"] == r["acceptance_length"]
        for k, al in r.get("acceptance_length_by_k", {}).items():
            assert by_k[k][r["drafter_key"]]["acceptance_length"] == al
        assert abs(1 + sum(r["acceptance_per_position"]) - r["acceptance_length"]) < 2e-3
        levers.setdefault(r["lever"], []).append(r["arm"])
    assert all(len(arms) >= 2 for arms in levers.values())              # a lever compares at least two arms
    assert all(not r["measured"] and r["why"] for r in table["not_measured"])


def test_materialise_command_prints_the_folder_vllm_loads(target, tmp_path, capsys, monkeypatch):
    from pathlib import Path

    from peagle_lab.assets import smollm2_dir
    from peagle_lab.cli import main
    from test_serving import learned_row_drafter

    stored = learned_row_drafter(target, tmp_path / "stored")
    hf_folder = smollm2_dir()                            # the converted target, found before the cache moves
    monkeypatch.setenv("PEAGLE_CACHE", str(tmp_path / "cache"))   # the ~110 MB materialised copy goes here
    assert main(["materialise", str(stored), "--target", str(hf_folder)]) == 0
    out = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert out.is_relative_to(tmp_path / "cache")
    emb = load_file(str(out / "model.safetensors"))["embed_tokens.weight"]
    row = load_file(str(stored / "model.safetensors"))["mask_embedding"][0]
    assert out != stored and torch.equal(emb[16], row.to(emb.dtype))
    assert torch.equal(emb[17], target.model.get_input_embeddings().weight[17].detach().cpu())


def test_ablation_eval_several_k_equals_one_eval_per_k(target, tmp_path):
    """benchmarks/ablation_eval.py replays every K on replies made once for the largest K, cut to length: the
    same numbers as evaluating each K on its own replies (greedy replies are prefix-stable)."""
    from peagle_lab.drafters_registry import drafter_for
    from peagle_lab.train.replay import evaluate_drafters, greedy_replies
    from peagle_lab.prompts import load_prompts

    mod = load_benchmark("ablation_eval.py")
    out = mod.main(["peagle-smollm2", "eagle-smollm2", "--ks", "2", "4", "--num-prompts", "2", "--max-new-tokens", "12",
                    "--json", str(tmp_path / "abl.json")])
    written = json.loads((tmp_path / "abl.json").read_text())["results_by_k"]
    assert written == json.loads(json.dumps(out["results_by_k"]))
    prompts = [target.chat_ids(p) for p in load_prompts("mt-bench", 2)]
    drafters = {name: drafter_for(target, method)[0]
                for name, method in (("peagle-smollm2", "peagle"), ("eagle-smollm2", "eagle"))}
    for k in (2, 4):
        replies = greedy_replies(target, prompts, k=k, max_new_tokens=12)
        alone = evaluate_drafters(target, drafters, prompts, replies, k=k, max_new_tokens=12)
        for name in drafters:
            got = out["results_by_k"][str(k)][name]
            assert got["acceptance_length"] == alone[name]["acceptance_length"], (k, name)
            assert got["acceptance_per_position"] == alone[name]["acceptance_per_position"]


def test_learned_mask_row_conversion_keeps_the_drafts_and_trains_the_row(target, tmp_path):
    """The shipped P-EAGLE (mask id 0, frozen) moved to the unused id with its own row: the same drafts before
    training (the oracle), stored and read back as a learned row, and `train --init-from` converts it by default."""
    from peagle_lab.checkpoint import with_learned_mask_row
    from peagle_lab.drafters_registry import drafter_for

    shipped, _ = drafter_for(target, "peagle")
    assert shipped.mask_embedding is None and shipped.cfg.mask_token_id == 0
    moved = with_learned_mask_row(shipped, target).eval()
    table = target.model.get_input_embeddings().weight
    assert moved.cfg.mask_token_id == 16 and torch.equal(moved.mask_embedding[0], table[0].to(moved.mask_embedding))
    ids = target.chat_ids("Explain what a hash map is.")
    out = target.forward(torch.tensor(ids), target.new_cache())
    ctx = torch.tensor(ids[1:] + [int(out.logits[0, -1].argmax())])
    for k in (3, 7):
        assert torch.equal(draft_parallel(moved, moved.new_cache(), ctx, out.aux[0], k=k).tokens,
                           draft_parallel(shipped, shipped.new_cache(), ctx, out.aux[0], k=k).tokens)
    assert torch.equal(moved.embed(torch.tensor([5, 16])), shipped.embed(torch.tensor([5, 0])))
    back = load_drafter(save_drafter(moved, tmp_path / "moved"), target)
    assert back.cfg.mask_token_id == 16 and torch.equal(back.mask_embedding, moved.mask_embedding)
    with pytest.raises(ValueError, match="EAGLE-3 drafter has no mask token"):
        with_learned_mask_row(drafter_for(target, "eagle")[0], target)
    with pytest.raises(ValueError, match="outside the target's vocabulary"):
        with_learned_mask_row(shipped, target, 10**6)


def test_train_init_from_learns_the_mask_row_unless_frozen(target):
    from peagle_lab.drafters_registry import shipped
    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.setup import init_drafter

    marks = []
    path, cfg = str(shipped()["peagle-smollm2"]), TrainConfig(method="peagle")
    init, shape = init_drafter(path, cfg, target, marks.append)
    assert init.mask_embedding is not None and init.cfg.mask_token_id == 16
    assert shape["num_layers"] == init.cfg.num_layers and "mask token 0 -> 16" in marks[0]
    kept, _ = init_drafter(path, TrainConfig(method="peagle", learn_mask_embedding=False), target, marks.append)
    assert kept.mask_embedding is None and kept.cfg.mask_token_id == 0
    with pytest.raises(ValueError, match="pass --method peagle"):
        init_drafter(path, TrainConfig(method="eagle"), target, marks.append)
    assert init_drafter(None, cfg, target, marks.append) == (None, {})
