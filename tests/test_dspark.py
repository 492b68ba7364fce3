"""DSpark (peagle_lab.dspark): lossless in the engine, the training graph equal to the engine's, replay equal to
the engine, and checkpoints in the layout vLLM's Qwen3DSparkModel loads."""
import json

import pytest
import torch

from helpers import tiny_target
from peagle_lab.checkpoint import load_drafter
from peagle_lab.compat import drafting_method
from peagle_lab.dspark import DSparkConfig, init_dspark, load_dspark, save_dspark, vllm_config_dict
from peagle_lab.engines.batched import generate_batch
from peagle_lab.engines.drafting import draft_markov
from peagle_lab.engines.teaching import generate
from peagle_lab.train.blocks import block_elements, element_logits
from peagle_lab.train.cod import Elements
from peagle_lab.train.data import Sample
from peagle_lab.train.features import target_batch
from peagle_lab.train.replay import replay_acceptance

from test_sampling import chi2_pvalue


def dspark(target, *, seed=0, vd=None, markov=0.5, layers=2, block=8, rank=8):
    """A random DSpark drafter; ``markov`` scales markov_w2 (0: the head adds nothing)."""
    cfg = DSparkConfig.for_target(target, num_layers=layers, draft_vocab_size=vd, markov_rank=rank, block_size=block,
                                  intermediate_size=64)
    d = init_dspark(cfg, target, seed=seed)
    g = torch.Generator().manual_seed(seed)
    if vd and vd < target.vocab_size:
        d.set_draft_vocab(torch.randperm(target.vocab_size, generator=g)[:vd])
    with torch.no_grad():
        d.markov_head.markov_w2.weight.normal_(0, markov, generator=g)
        d.lm_head.weight.mul_(20.0)                                      # peaky: drafts that differ by position
    return d.to(target.device).eval()


@pytest.fixture(scope="module")
def small():
    return tiny_target(vocab=64, seed=3, logit_scale=2.0, layers=5)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_dspark_equals_ar_on_the_real_target(target, mtbench_ids, k):
    d = dspark(target, seed=1, vd=4096, markov=0.05)
    ref = generate(target, mtbench_ids[0], method="ar", max_new_tokens=40).tokens
    out = generate(target, mtbench_ids[0], method="dspark", drafter=d, k=k, max_new_tokens=40)
    assert out.tokens == ref
    assert len(out.acceptance.per_position) == k


@pytest.fixture(scope="module")
def learned(small):
    """A DSpark drafter that learned the tiny target a little (a few steps of its own loss): drafts often right."""
    from peagle_lab.train.loss import padded_loss
    d = dspark(small, seed=2, markov=0.0).train()
    samples = [Sample(torch.tensor(generate(small, [i % 64, 7], method="ar", max_new_tokens=30,
                                            stop_at_eos=False).tokens), 0) for i in range(6)]
    opt = torch.optim.Adam([p for p in d.parameters() if p.requires_grad], lr=3e-2)
    with torch.no_grad():                                                  # the target is frozen, as in training
        data = target_batch(small, samples, torch.arange(64), 64)
    n = data.tokens.numel()
    el = Elements(*(t.reshape(-1) for t in torch.meshgrid(torch.arange(n - 9), torch.arange(4), indexing="ij")),
                  data.doc[torch.arange(n - 9)].repeat_interleave(4))
    for _ in range(60):
        opt.zero_grad()
        padded_loss(d, el, data, method="dspark", max_depth=4, backward=True)
        opt.step()
    return d.eval()


def test_greedy_dspark_equals_ar_when_drafts_are_often_right(small, learned):
    """The learned drafter accepts some drafts, so the accept-and-roll-back path runs, and the output still
    equals plain decoding."""
    d, accepted = learned, 0
    for start in range(5):
        prompt = [start, 9, 4]
        ref = generate(small, prompt, method="ar", max_new_tokens=24, stop_at_eos=False).tokens
        out = generate(small, prompt, method="dspark", drafter=d, k=4, max_new_tokens=24, stop_at_eos=False)
        assert out.tokens == ref
        accepted += out.acceptance.num_accepted_tokens
    assert accepted > 10, accepted


def _batch_equals_alone_and_ar(target, prompts, budgets, d, k):
    """generate_batch(method="dspark") == each request alone in the teaching engine == AR: tokens, drafts and
    acceptance per step and per position -> the batch's per-step ``{request: accepted}``."""
    out = generate_batch(target, prompts, method="dspark", drafter=d, k=k, max_new_tokens=budgets, stop_at_eos=False)
    for r, (ids, n) in enumerate(zip(prompts, budgets)):
        got = out.results[r]
        alone = generate(target, ids, method="dspark", drafter=d, k=k, max_new_tokens=n, stop_at_eos=False)
        ar = generate(target, ids, method="ar", max_new_tokens=n, stop_at_eos=False).tokens
        assert got.tokens == alone.tokens == ar, r
        assert [(s.drafts, s.accepted) for s in got.steps] == [(s.drafts, s.accepted) for s in alone.steps], r
        assert got.acceptance.to_dict() == alone.acceptance.to_dict(), r
    assert len(out.accepted[0]) == len(prompts) and len(out.accepted[-1]) < len(prompts)   # some left early
    return out.accepted


@pytest.mark.parametrize("k", [1, 4])
def test_batched_dspark_equals_each_request_alone_and_ar(target, mtbench_ids, k):
    """A ragged batch (three prompt lengths, three budgets) on the real target with a random drafter."""
    prompts = list(mtbench_ids[:3])
    assert len({len(p) for p in prompts}) == 3
    _batch_equals_alone_and_ar(target, prompts, [24, 10, 16], dspark(target, seed=1, vd=4096, markov=0.05), k)


def test_batched_dspark_with_drafts_often_right(small, learned):
    """On the tiny target the learned drafter's drafts are often accepted, by different counts in one step."""
    accepted = _batch_equals_alone_and_ar(small, [[0, 9, 4], [1, 9, 4, 5, 2], [2, 9]], [30, 14, 24], learned, 4)
    assert sum(sum(step.values()) for step in accepted) > 10, accepted
    assert any(len(set(step.values())) > 1 for step in accepted), accepted     # ragged steps happened


def test_bench_runs_dspark_in_batches(target):
    """`bench --methods ar,dspark --batch-size 1,2`: the DSpark batch row runs the batched engine and equals AR."""
    from peagle_lab.bench import BenchSpec, run_bench

    out = run_bench(BenchSpec(methods=["ar", "dspark"], ks=[3], prompts="mt-bench", num_prompts=2, max_new_tokens=4,
                              batch_sizes=[1, 2]), target=target, progress=False)
    rows = {(x["method"], x["batch_size"]): x for x in out["results"]}
    assert rows[("dspark", 2)]["engine"] == "teaching-batched" and rows[("dspark", 1)]["engine"] == "teaching"
    assert all(x["identical_to_ar"] is True for key, x in rows.items() if key != ("ar", 1))
    assert rows[("dspark", 2)]["new_tokens"] == 8 and len(rows[("dspark", 2)]["acceptance_per_position"]) == 3


@pytest.mark.slow
def test_sampled_dspark_follows_the_target_distribution():
    tiny = tiny_target(vocab=8, seed=0, logit_scale=0.6)
    d = dspark(tiny, seed=5, markov=3.0)
    with torch.no_grad():
        d.lm_head.weight.mul_(3.0)
    pvalue, accepted_per_step = chi2_pvalue(tiny, d, "dspark")
    assert pvalue > 1e-3
    assert 0.1 < accepted_per_step < 2.5, accepted_per_step


def test_training_graph_equals_the_engine(target, mtbench_ids):
    """Slot d of a training block gives the engine's logits for the same context, block and previous token."""
    d = dspark(target, seed=4, vd=4096)
    ids = mtbench_ids[1]
    full = torch.tensor(ids + generate(target, ids, method="ar", max_new_tokens=12).tokens)
    data = target_batch(target, [Sample(full, len(ids))], d.to_target_ids(torch.arange(4096)).sort().values,
                        full.numel())
    a, k = len(ids) + 3, 6
    got = element_logits(d, Elements(torch.full((k,), a), torch.arange(k)), data)         # teacher-forced (k, Vd)
    # the engine, with each slot's previous token set to the real one (what the training graph feeds)
    real = full[a + 2: a + 2 + k]                                          # what slot d predicts
    seen = []
    real_pick = iter(real.tolist())

    def pick(drafter, logits, temperature, gen):
        seen.append(logits[0])
        return torch.tensor([next(real_pick)]), None

    import peagle_lab.engines.drafting as drafting
    old = drafting._pick
    drafting._pick = pick
    try:
        draft_markov(d, d.new_cache(), full[1: a + 2], data.aux[: a + 1], k)
    finally:
        drafting._pick = old
    # slot 0's previous token is x_{a+1} (the block's first input) on both sides; later slots: the real tokens
    torch.testing.assert_close(torch.stack(seen), got, rtol=1e-4, atol=1e-4)


def test_replay_equals_the_engine(target, mtbench_ids):
    d = dspark(target, seed=6, vd=4096, markov=0.05)
    ids, k = mtbench_ids[2], 4
    reply = generate(target, ids, method="ar", max_new_tokens=48 + k + 1, stop_at_eos=False).tokens
    engine = generate(target, ids, method="dspark", drafter=d, k=k, max_new_tokens=48, stop_at_eos=False)
    rep = replay_acceptance(target, d, ids, reply, method="dspark", k=k, max_new_tokens=48)
    assert rep.steps[0] == [s.accepted for s in engine.steps]
    assert rep.stats.per_position == engine.acceptance.per_position


def test_checkpoint_round_trip_and_vllm_layout(target, tmp_path, mtbench_ids):
    d = dspark(target, seed=7, vd=4096)
    save_dspark(d, tmp_path / "ds", dtype=torch.float32)
    cfg = json.loads((tmp_path / "ds" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3DSparkModel"] and cfg["model_type"] == "qwen3"
    assert cfg["dflash_config"]["causal"] is True and cfg["sample_from_anchor"] is True
    assert cfg["eagle_aux_hidden_state_layer_ids"] == list(target.aux_layer_ids)
    assert cfg["dflash_config"]["target_layer_ids"] == [i - 1 for i in target.aux_layer_ids]
    from safetensors.torch import load_file
    keys = set(load_file(str(tmp_path / "ds" / "model.safetensors")))
    # what vLLM's Qwen3DSparkForCausalLM.load_weights maps (model. prefix added there; t2d skipped; d2t renamed)
    want = {"fc.weight", "hidden_norm.weight", "norm.weight", "lm_head.weight", "d2t", "t2d",
            "markov_head.markov_w1.weight", "markov_head.markov_w2.weight"}
    for i in range(2):
        want |= {f"layers.{i}.{n}.weight" for n in (
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm",
            "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
            "post_attention_layernorm")}
    assert keys == want
    back = load_drafter(tmp_path / "ds", target)                  # the package's one loader dispatches on config
    assert drafting_method(back) == "dspark"
    a = generate(target, mtbench_ids[0], method="dspark", drafter=d, k=5, max_new_tokens=20)
    b = generate(target, mtbench_ids[0], method="dspark", drafter=back, k=5, max_new_tokens=20)
    assert [s.drafts for s in a.steps] == [s.drafts for s in b.steps]


def test_bad_dspark_checkpoints_are_named(target, tmp_path):
    d = dspark(target, seed=8, vd=4096)
    save_dspark(d, tmp_path / "ds", dtype=torch.float32)
    cfg = json.loads((tmp_path / "ds" / "config.json").read_text())
    del cfg["markov_rank"]
    (tmp_path / "ds" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="markov_rank"):
        load_dspark(tmp_path / "ds", target)
    cfg["markov_rank"] = 16                                         # weights say 8
    (tmp_path / "ds" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="shape"):
        load_dspark(tmp_path / "ds", target)


def test_method_and_drafter_must_match(target, mtbench_ids):
    d = dspark(target, seed=9, vd=4096)
    with pytest.raises(ValueError, match="method 'peagle' cannot run a DSpark drafter"):
        generate(target, mtbench_ids[0], method="peagle", drafter=d, k=3, max_new_tokens=4)
    with pytest.raises(ValueError, match="exceeds the depth"):
        generate(target, mtbench_ids[0], method="dspark", drafter=d, k=9, max_new_tokens=4)


def test_block_elements_cover_whole_blocks_inside_the_conversation():
    sup = torch.zeros(40, dtype=torch.bool)
    sup[10:] = True
    el = block_elements(40, 8, 5, sup, torch.Generator().manual_seed(0))
    anchors = el.anchor.unique()
    assert anchors.numel() == 5 and bool(sup[anchors + 2].all())
    assert bool((el.anchor + 2 + el.depth < 40).all())
    for a in anchors.tolist():
        assert el.depth[el.anchor == a].tolist() == list(range(min(8, 40 - 2 - a)))


def test_vllm_config_has_what_vllm_reads(target):
    cfg = DSparkConfig.for_target(target, draft_vocab_size=4096)
    out = vllm_config_dict(cfg)
    for key in ("markov_rank", "mask_token_id", "draft_vocab_size", "block_size", "hidden_size", "head_dim"):
        assert key in out
    assert out["mask_token_id"] == out["dflash_config"]["mask_token_id"] == 16   # <empty_output>, as P-EAGLE's


def test_train_init_from_a_dspark_drafter(target, tmp_path):
    """train --init-from a DSpark drafter: its shape is kept, the Trainer starts from its exact weights (so its
    first replay equals the shipped drafter's), one step moves them, and a drafter of another method is named."""
    from helpers import learnable_samples
    from peagle_lab.drafters_registry import shipped
    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.setup import init_drafter
    from peagle_lab.train.trainer import Trainer

    path, marks = str(shipped()["dspark-smollm2"]), []
    init, shape = init_drafter(path, TrainConfig.preset("dspark"), target, marks.append)
    assert shape == dict(num_layers=init.cfg.num_layers, intermediate_size=init.cfg.intermediate_size,
                         draft_vocab_size=init.cfg.draft_vocab_size, markov_rank=init.cfg.markov_rank,
                         max_depth=init.cfg.block_size, mask_token_id=init.cfg.mask_token_id)
    assert "DSpark" in marks[0]
    before = {k: v.clone() for k, v in load_drafter(path, target).state_dict().items()}
    cfg = TrainConfig.preset("dspark", **shape, batch_size=2, steps=1, warmup_steps=0)
    ids = init.to_target_ids(torch.arange(init.cfg.draft_vocab_size))
    samples = learnable_samples(n=4, vocab=target.vocab_size)
    trainer = Trainer(target, samples, cfg, tmp_path / "run", ids, drafter=init)
    start = trainer.drafter.state_dict()
    assert all(torch.equal(start[k].cpu(), v) for k, v in before.items()), "fine-tuning starts from the file's weights"
    trainer.train_step()
    moved = trainer.drafter.state_dict()
    assert any(not torch.equal(moved[k].cpu(), before[k]) for k in before if moved[k].dtype.is_floating_point)
    for method, named in (("eagle", "is a DSpark drafter; pass --method dspark"),
                          ("peagle", "is a DSpark drafter; pass --method dspark")):
        with pytest.raises(ValueError, match=named):
            init_drafter(path, TrainConfig(method=method), target, marks.append)
    with pytest.raises(ValueError, match="is a P-EAGLE drafter; pass --method peagle"):
        init_drafter(str(shipped()["peagle-smollm2"]), cfg, target, marks.append)
