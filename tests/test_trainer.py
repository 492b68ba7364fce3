"""Training loop oracles (peagle_lab.train.trainer): data regeneration, draft vocab, loss goes down,
resume == uninterrupted, DDP == one process."""
import os
from pathlib import Path

import pytest
import torch

from helpers import learnable_samples, tiny_target
from peagle_lab.checkpoint import load_drafter
from peagle_lab.train.data import Sample, load_samples, regenerate
from peagle_lab.train.trainer import TrainConfig, Trainer
from peagle_lab.train.vocab import build_draft_vocab, token_counts


def test_draft_vocab_and_coverage():
    samples = [Sample(torch.tensor([9, 9, 1, 1, 1, 2, 3]), 2)]
    counts = token_counts(samples, 10)
    assert counts.tolist() == [0, 3, 1, 1, 0, 0, 0, 0, 0, 0]
    ids, coverage = build_draft_vocab(counts, 2)
    assert ids.tolist() == [1, 2] or ids.tolist() == [1, 3]
    assert abs(coverage - 4 / 5) < 1e-9


def _trainer(tmp, method, steps=6, segments=1, layout="packed", **settings):
    tgt = tiny_target(vocab=50, seed=0)
    cfg = TrainConfig(method=method, num_layers=2, draft_vocab_size=40, max_depth=4, steps=steps, batch_size=3,
                      max_len=30, num_segments=segments, lr=3e-3, warmup_steps=2, checkpoint_every=2, seed=1,
                      layout=layout, **settings)
    ids, _ = build_draft_vocab(token_counts(learnable_samples(), 50) + 1, 40)
    return Trainer(tgt, learnable_samples(), cfg, tmp, ids)


@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_resume_after_kill_equals_uninterrupted(tmp_path, method):
    full = _trainer(tmp_path / "a", method, layout="padded")
    full.run(progress=False)
    killed = _trainer(tmp_path / "b", method, layout="padded")
    killed.run(progress=False, stop_after=3)          # "killed" after step 3; last checkpoint at step 2
    resumed = _trainer(tmp_path / "b", method, layout="padded")
    resumed.run(progress=False)
    assert resumed.step == full.step == 6
    a, b = full.drafter.state_dict(), resumed.drafter.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a)
    assert [round(r["loss"], 5) for r in full.history] == [round(r["loss"], 5) for r in resumed.history]


@pytest.mark.parametrize("method,layout", [("peagle", "padded"), ("peagle", "packed"), ("eagle", "padded")])
def test_micro_batches_take_the_one_pass_steps(tmp_path, monkeypatch, method, layout):
    """A step's conversations run in 3 micro-batches (one conversation each, with the recipe's feature noise and
    COD) give the one-pass losses, accuracies and weights after 4 optimiser steps: each slice's loss is divided by
    the whole batch's count of supervised elements, and each conversation's noise and elements are its own."""
    from peagle_lab.train import trainer as tr

    real, passes = tr.LAYOUTS[layout], []

    def counted(drafter, el, data, **kw):
        passes.append(int(data.doc.max()) + 1)              # conversations in this pass
        return real(drafter, el, data, **kw)

    monkeypatch.setitem(tr.LAYOUTS, layout, counted)
    one = _trainer(tmp_path / "one", method, steps=4, layout=layout, hidden_noise=0.05)
    three = _trainer(tmp_path / "three", method, steps=4, layout=layout, hidden_noise=0.05, micro_batches=3)
    one.run(progress=False)
    assert passes == [3] * 4
    three.run(progress=False)
    assert passes == [3] * 4 + [1] * 12                     # really three passes a step
    assert [r["supervised"] for r in one.history] == [r["supervised"] for r in three.history]
    assert [r["elements"] for r in one.history] == [r["elements"] for r in three.history]
    assert [r["acc_per_depth"] for r in one.history] == [r["acc_per_depth"] for r in three.history]
    assert [r["loss"] for r in three.history] == pytest.approx([r["loss"] for r in one.history], rel=1e-5)
    a, b = one.drafter.state_dict(), three.drafter.state_dict()
    # float32 sums in another order (measured: at most 1.3e-6 apart), as in the two-process test below
    assert all(torch.allclose(a[k].float(), b[k].float(), atol=1e-5, rtol=0) for k in a)
    # and the weights moved: the comparison is not between two untrained drafters
    start = _trainer(tmp_path / "start", method, steps=4, layout=layout).drafter.state_dict()
    assert any(not torch.allclose(a[k].float(), start[k].float(), atol=1e-3) for k in a)


@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_a_step_that_runs_out_of_memory_is_taken_again_in_more_micro_batches(tmp_path, monkeypatch, method):
    """A GPU that cannot hold more than one conversation's pass (simulated: the loss raises torch's out-of-memory
    error for a bigger slice) costs nothing: the step is taken again in 2, then 3 micro-batches, with a warning
    naming the setting, and the run takes the steps of one started with micro_batches=3."""
    from peagle_lab.train import trainer as tr

    want = _trainer(tmp_path / "want", method, steps=4, layout="padded", hidden_noise=0.05, micro_batches=3)
    want.run(progress=False)
    real, tries = tr.LAYOUTS["padded"], []

    def small_gpu(drafter, el, data, **kw):
        tries.append(int(el.doc.max()) + 1)
        if tries[-1] > 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(drafter, el, data, **kw)

    monkeypatch.setitem(tr.LAYOUTS, "padded", small_gpu)
    got = _trainer(tmp_path / "got", method, steps=4, layout="padded", hidden_noise=0.05)
    with pytest.warns(UserWarning) as caught:
        got.run(progress=False)
    said = [str(w.message) for w in caught]
    assert len(said) == 2 and "step 1 ran out of GPU memory in 1 micro-batch(es); taking it again in 2" in said[0]
    assert "in 2 micro-batch(es); taking it again in 3" in said[1] and "--set micro_batches=3" in said[1]
    assert got.micro_batches == 3 and [r["micro_batches"] for r in got.history] == [3, 3, 3, 3]
    assert tries[:6] == [3, 1, 2, 1, 1, 1] and got.cfg.micro_batches == 1   # the config itself is not changed
    assert [r["loss"] for r in got.history] == pytest.approx([r["loss"] for r in want.history], rel=1e-6)
    a, b = want.drafter.state_dict(), got.drafter.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a GPU that cannot hold even one conversation: the error is raised
    monkeypatch.setitem(tr.LAYOUTS, "padded", lambda *a, **k: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("x")))
    with pytest.raises(torch.cuda.OutOfMemoryError), pytest.warns(UserWarning):
        _trainer(tmp_path / "none", method, steps=1, layout="padded").run(progress=False)
    # out of memory in the optimiser's update (part of it may be applied already): raised, never taken again
    monkeypatch.setitem(tr.LAYOUTS, "padded", real)
    late = _trainer(tmp_path / "late", method, steps=1, layout="padded")
    monkeypatch.setattr(late.opt, "step", lambda *a, **k: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("y")))
    with pytest.raises(torch.cuda.OutOfMemoryError, match="y"):
        late.train_step()
    assert late.micro_batches == 1 and late.step == 0


def test_micro_batches_outside_the_batch_are_refused_naming_the_range(tmp_path):
    with pytest.raises(ValueError, match=r"micro_batches=4: .* 3 conversations .* 1 to 3 micro-batches"):
        _trainer(tmp_path, "peagle", micro_batches=4)
    with pytest.raises(ValueError, match="1 to 3"):
        _trainer(tmp_path, "peagle", micro_batches=0)


def test_resume_refuses_other_settings_but_accepts_longer_run(tmp_path):
    first = _trainer(tmp_path, "peagle")
    first.run(progress=False, steps=4)
    other = _trainer(tmp_path, "peagle")
    other.cfg.lr *= 2
    with pytest.raises(ValueError, match="differs in lr"):
        other.run(progress=False)
    # a longer run (e.g. one cut short by --max-minutes), saved more often, partitioned, padded: all resume
    longer = _trainer(tmp_path, "peagle", steps=8, segments=2, layout="padded")
    longer.cfg.checkpoint_every = 3
    longer.run(progress=False)
    assert longer.step == 8 and [r["step"] for r in longer.history] == list(range(1, 9))


def test_training_lowers_loss_and_exports(tmp_path):
    for method in ("peagle", "eagle"):
        t = _trainer(tmp_path / method, method, steps=30, segments=2)
        hist = t.run(progress=False)
        first = sum(r["loss"] for r in hist[:3]) / 3
        last = sum(r["loss"] for r in hist[-3:]) / 3
        assert last < 0.85 * first, (method, first, last)
        out = t.export(tmp_path / f"{method}-export", dtype=torch.float32)
        d = load_drafter(out, t.target)
        assert d.cfg.parallel_drafting == (method == "peagle")
        assert (out / "training.json").exists() and d.embed_tokens is None
        if method == "peagle":
            assert d.cfg.trained_depth == 4


def test_regenerate_resumes_by_shard(target, tmp_path):
    prompts = ["Say yes.", "Say no.", "Count to three."]
    paths = regenerate(target, prompts, tmp_path, max_new_tokens=6, batch_size=2, shard_size=2, progress=False)
    assert [p.name for p in paths] == ["shard-00000.pt", "shard-00001.pt"]
    samples = load_samples(tmp_path)
    assert len(samples) == 3
    for p, s in zip(prompts, samples):
        ids = target.chat_ids(p)
        assert s.ids[: s.prompt_len].tolist() == ids
        assert s.ids[s.prompt_len:].tolist() == target.generate(ids, 6).tokens   # greedy reply, batched == alone
    stamp = paths[0].stat().st_mtime_ns
    regenerate(target, prompts, tmp_path, max_new_tokens=6, batch_size=2, shard_size=2, progress=False)
    assert paths[0].stat().st_mtime_ns == stamp                                  # existing shard kept


# The DDP tests run where PEAGLE_TEST_DEVICE says: cpu (CI: gloo), or cuda (benchmarks/gpu/30_ddp.sh): NCCL with a
# GPU per process, or, on a machine of one GPU, two processes sharing it over gloo (PEAGLE_DIST_BACKEND=gloo, set
# here when fewer than two GPUs are visible; NCCL refuses two ranks on one GPU).
DDP_DEVICE = os.environ.get("PEAGLE_TEST_DEVICE", "cpu")


def _ddp_env() -> dict:
    env = dict(os.environ)
    if DDP_DEVICE.startswith("cuda") and torch.cuda.device_count() < 2:
        env.setdefault("PEAGLE_DIST_BACKEND", "gloo")
    return env


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """tests/ddp_worker.py launched by torchrun with 1 and 2 processes, for both methods."""
    import socket
    import subprocess
    import sys

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    tmp = tmp_path_factory.mktemp("ddp")
    worker = Path(__file__).with_name("ddp_worker.py")
    results = {}
    for method in ("peagle", "eagle"):
        for n in (1, 2):
            out = tmp / f"{method}-{n}.pt"
            # an explicit free loopback port per launch: back-to-back launches never share one
            proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={n}",
                                   "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
                                   str(worker), str(out), str(tmp / f"run-{method}-{n}"), method],
                                  capture_output=True, text=True, timeout=300, env=_ddp_env())
            assert proc.returncode == 0, proc.stderr[-3000:]
            grads = [torch.load(f"{out}.grads-rank{r}.pt", weights_only=False) for r in range(n)]
            results[method, n] = {"train": torch.load(out, weights_only=False), "grads": grads}
    return results


def _close(a: torch.Tensor, b: torch.Tensor, rel: float) -> bool:
    """|a - b| <= rel * max|b| elementwise (float32 sums in another order, relative to the tensor's scale)."""
    return bool((a.double() - b.double()).abs().max() <= rel * b.double().abs().max().clamp_min(1e-12))


@pytest.mark.slow                     # torchrun, 2 processes: `make test` runs it, `make test-fast` does not
@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_two_process_gradients_are_the_single_process_gradient(ddp_runs, method):
    """One step under torchrun: each process holds the gradient of its share of the global batch (every
    world-th conversation, its loss divided by the global count of supervised elements); after the
    all-reduce every process holds the sum, which is the single-process gradient of the whole batch --
    with the recipe's feature noise on (each conversation's noise is its own, wherever it is packed)."""
    rel = 1e-5 if DDP_DEVICE == "cpu" else 1e-4
    (one,), (r0, r1) = ddp_runs[method, 1]["grads"], ddp_runs[method, 2]["grads"]
    assert r0["world"] == 2 and r0["device"].split(":")[0] == DDP_DEVICE.split(":")[0]
    assert r0["backend"] == ("gloo" if DDP_DEVICE == "cpu" else _ddp_env().get("PEAGLE_DIST_BACKEND", "nccl"))
    assert r0["supervised"] == r1["supervised"] == one["supervised"]              # the global count, on every rank
    assert r0["loss"] == pytest.approx(one["loss"], rel=rel)
    want = one["reduced"]
    if os.environ.get("PEAGLE_DDP_REPORT"):                                     # numbers for benchmarks/gpu/30_ddp.sh
        import json

        def worst(a, b):
            return max(float((a[k].double() - b[k].double()).abs().max() / b[k].double().abs().max()) for k in b)
        with open(os.environ["PEAGLE_DDP_REPORT"], "a") as f:
            f.write(json.dumps({"method": method, "device": r0["device"], "backend": r0["backend"],
                                "tensors": len(want), "supervised": one["supervised"],
                                "loss_1": one["loss"], "loss_2": r0["loss"],
                                "max_rel_diff_reduced_vs_single": worst(r0["reduced"], want),
                                "max_rel_diff_shares_sum_vs_single": worst(
                                    {k: r0["local"][k] + r1["local"][k] for k in want}, want),
                                "min_rel_diff_share_vs_whole": min(worst(r["local"], want) for r in (r0, r1)),
                                "tolerance": rel}) + "\n")
    assert set(r0["reduced"]) == set(r1["reduced"]) == set(want) == set(r0["local"]) == set(r1["local"])
    for k, g in want.items():
        assert torch.equal(r0["reduced"][k], r1["reduced"][k]), k                  # every rank steps with the same sum
        assert _close(r0["reduced"][k], g, rel), (k, (r0["reduced"][k] - g).abs().max(), g.abs().max())
        assert _close(r0["local"][k] + r1["local"][k], g, rel), k                  # the sum of the two shares
    # each share alone is far from the whole (so the all-reduce is what makes the step right)
    big = max(want, key=lambda k: want[k].abs().max())
    assert not _close(r0["local"][big], want[big], 0.05) and not _close(r1["local"][big], want[big], 0.05)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_two_process_training_equals_one_process(ddp_runs, method):
    """torchrun with 2 processes (gloo on CPUs; NCCL or gloo on CUDA) takes the same optimiser steps as one process."""
    one, two = ddp_runs[method, 1]["train"], ddp_runs[method, 2]["train"]
    # float32 sums in another order: compare with a tolerance (rounding to 5 places can straddle a digit)
    tol = 1e-5 if DDP_DEVICE == "cpu" else 1e-4
    assert two["losses"] == pytest.approx(one["losses"], rel=tol, abs=tol), method
    atol = 2e-5 if DDP_DEVICE == "cpu" else 2e-4
    for k in one["state"]:
        assert torch.allclose(one["state"][k].float(), two["state"][k].float(), atol=atol, rtol=0), (method, k)


def test_feature_noise_of_a_conversation_does_not_depend_on_the_process_that_packs_it():
    """--hidden-noise under torchrun: each conversation's noise is seeded by its place in the global batch, so
    packing conversations 0-3 together or 0, 2 and 1, 3 apart (two processes) gives every one the same noise."""
    from peagle_lab.train.loss import SeqData
    from peagle_lab.train.trainer import with_feature_noise

    sizes = [3, 5, 2, 4]

    def noise(gids):
        doc = torch.cat([torch.full((sizes[g],), i) for i, g in enumerate(gids)])
        n = doc.numel()
        data = SeqData(torch.zeros(n), torch.zeros(n, 6), torch.zeros(n, 3), torch.ones(n, dtype=torch.bool), doc)
        return with_feature_noise(data, 0.05, seed=7, global_ids=gids).aux.split([sizes[g] for g in gids])

    whole, even, odd = noise([0, 1, 2, 3]), noise([0, 2]), noise([1, 3])
    for g, part in zip([0, 2, 1, 3], even + odd):
        assert torch.equal(whole[g], part), g
    assert not torch.equal(whole[0][:2], whole[2][:2]) and whole[1].abs().max() <= 0.05


def test_init_distributed_picks_backend_and_gpu_and_names_the_fix(monkeypatch):
    """NCCL with a GPU per process by default on CUDA, gloo on CPUs; PEAGLE_DIST_BACKEND=gloo lets processes
    share a GPU (rank r on GPU r % count); more processes than GPUs under NCCL fails naming both fixes."""
    import peagle_lab.train.distributed as T

    calls = []
    monkeypatch.setattr(T.dist, "init_process_group", lambda backend, **kw: calls.append((backend, kw)))
    monkeypatch.setattr(T.torch.cuda, "set_device", lambda i: calls.append(("gpu", i)))
    monkeypatch.setattr(T.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(T.torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("PEAGLE_DIST_BACKEND", raising=False)
    for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert T.init_distributed("cuda") == "cuda" and calls == []           # not under torchrun: nothing to join
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    names_the_fix = r"2 processes on this machine but 1 GPU.*--nproc-per-node 1.*PEAGLE_DIST_BACKEND=gloo"
    with pytest.raises(RuntimeError, match=names_the_fix):
        T.init_distributed("cuda")
    assert calls == []
    monkeypatch.setenv("PEAGLE_DIST_BACKEND", "gloo")                       # two ranks share the one GPU
    assert T.init_distributed("cuda") == torch.device("cuda", 0)
    assert calls == [("gpu", 0), ("gloo", {})]
    monkeypatch.setattr(T.torch.cuda, "device_count", lambda: 2)           # a GPU each: NCCL, bound to its GPU
    monkeypatch.delenv("PEAGLE_DIST_BACKEND")
    calls.clear()
    assert T.init_distributed("cuda") == torch.device("cuda", 1)
    assert calls == [("gpu", 1), ("nccl", {"device_id": torch.device("cuda", 1)})]
    calls.clear()
    assert T.init_distributed("cpu") == "cpu" and calls == [("gloo", {})]  # --device cpu on a GPU machine: gloo
    monkeypatch.setenv("PEAGLE_DIST_BACKEND", "nccl")
    with pytest.raises(ValueError, match="needs the run on CUDA"):
        T.init_distributed("cpu")
    monkeypatch.setenv("PEAGLE_DIST_BACKEND", "mpi")
    with pytest.raises(ValueError, match="use nccl or gloo"):
        T.init_distributed("cuda")


def test_sample_order_grouped_by_length_is_a_seeded_permutation_of_similar_batches():
    from peagle_lab.train.trainer import sample_order

    g = torch.Generator().manual_seed(3)
    samples = [Sample(torch.zeros(int(n), dtype=torch.long), 1) for n in torch.randint(5, 500, (1000,), generator=g)]
    lengths = [s.ids.numel() for s in samples]
    cfg = TrainConfig(batch_size=8, max_len=768, seed=5, group_by_length=True)
    order = sample_order(samples, cfg)
    assert sorted(order) == list(range(1000))                         # every conversation once
    assert order == sample_order(samples, cfg)                        # a function of the seed (resume is exact)
    assert order != sample_order(samples, TrainConfig(batch_size=8, seed=6, group_by_length=True))
    plain = sample_order(samples, TrainConfig(batch_size=8, seed=5))

    def mean_spread(o):                                               # longest - shortest within each full batch
        batches = [o[i: i + 8] for i in range(0, 1000 - 7, 8)]
        return sum(max(lengths[j] for j in b) - min(lengths[j] for j in b) for b in batches) / len(batches)
    assert mean_spread(order) < 0.2 * mean_spread(plain), (mean_spread(order), mean_spread(plain))
    first_lengths = [lengths[j] for j in order[:64]]                  # batches come in a shuffled order, not sorted
    assert first_lengths != sorted(first_lengths, reverse=True)


def test_target_batch_bf16_flag_changes_nothing_off_cuda():
    """The bf16 target pass is a CUDA-only speed-up: on a CPU the features and logits are the fp32 ones."""
    from peagle_lab.train.features import target_batch
    from peagle_lab.train.trainer import sdpa_backends

    tgt = tiny_target(vocab=50, seed=0)
    samples, ids = learnable_samples(4), torch.arange(40)
    a = target_batch(tgt, samples, ids, max_len=30, bf16=False)
    with sdpa_backends(tgt.device):                                   # a no-op context off CUDA
        b = target_batch(tgt, samples, ids, max_len=30, bf16=True)
    for name in ("tokens", "aux", "target_logits", "supervised", "doc"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and torch.equal(x, y), name
    assert a.aux.dtype == torch.float32 and a.target_logits.shape == (a.tokens.numel(), 40)


@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_validation_al_at_checkpoints_equals_the_engines(tmp_path, method):
    """The AL the trainer logs at a checkpoint (replayed) is the engine's AL for the drafter of that step."""
    from peagle_lab.engines.teaching import generate
    from peagle_lab.stats import AcceptanceStats
    from peagle_lab.train.replay import greedy_replies

    t = _trainer(tmp_path, method, steps=12)
    t.cfg.checkpoint_every, t.cfg.val_k, budget = 6, 3, 12
    prompts = [s.ids[:5].tolist() for s in learnable_samples()[:3]]
    t.val_replies = list(zip(prompts, greedy_replies(t.target, prompts, k=t.cfg.val_k, max_new_tokens=budget)))
    hist = t.run(progress=False)
    vals = [(r["step"], r["val_al"]) for r in hist if "val_al" in r]
    assert [s for s, _ in vals] == [6, 12]
    st = AcceptanceStats(3)
    t.drafter.eval()
    for p in prompts:
        st = st.merge(generate(t.target, p, method=method, drafter=t.drafter, k=3, max_new_tokens=budget).acceptance)
    assert vals[-1][1] == pytest.approx(st.acceptance_length, abs=1e-12)
    out = t.export(tmp_path / "export", dtype=torch.float32)
    import json
    rows = json.loads((out / "training.json").read_text())["history"]
    assert [r["step"] for r in rows if "val_al" in r] == [6, 12]


def test_shared_lm_head_training_leaves_the_target_head_alone(tmp_path):
    """--share-lm-head: the drafter trains through the target's frozen output layer and exports without it."""
    tgt = tiny_target(vocab=50, seed=0)
    head_before = tgt.model.get_output_embeddings().weight.detach().clone()
    with pytest.raises(ValueError, match="draft_vocab_size=50"):
        Trainer(tgt, learnable_samples(), TrainConfig(draft_vocab_size=40, share_lm_head=True), tmp_path / "bad",
                torch.arange(40))
    cfg = TrainConfig(method="peagle", num_layers=1, draft_vocab_size=50, max_depth=3, steps=20, batch_size=3,
                      max_len=30, lr=3e-3, warmup_steps=2, checkpoint_every=10, seed=1, layout="padded",
                      share_lm_head=True)
    t = Trainer(tgt, learnable_samples(), cfg, tmp_path / "run", torch.arange(50))
    hist = t.run(progress=False)
    assert t.drafter.lm_head is None
    assert sum(r["loss"] for r in hist[-3:]) < sum(r["loss"] for r in hist[:3])
    assert torch.equal(tgt.model.get_output_embeddings().weight, head_before)
    d = load_drafter(t.export(tmp_path / "export", dtype=torch.float32), tgt)
    assert d.lm_head is None and d.cfg.draft_vocab_size == 50


def test_fine_tuning_an_exported_drafter_continues_from_its_weights(tmp_path):
    """Trainer(drafter=load_drafter(...)) (the CLI's --init-from) starts where the export left off."""
    t = _trainer(tmp_path / "first", "peagle", steps=20)
    hist = t.run(progress=False)
    d = load_drafter(t.export(tmp_path / "export", dtype=torch.float32), t.target)
    ids = d.to_target_ids(torch.arange(d.cfg.draft_vocab_size))
    with pytest.raises(ValueError, match="pass its own ids"):
        Trainer(t.target, learnable_samples(), t.cfg, tmp_path / "bad", torch.arange(40), drafter=d)
    cfg = TrainConfig(**{**t.cfg.__dict__, "steps": 3, "seed": 1})
    tuned = Trainer(t.target, learnable_samples(), cfg, tmp_path / "tune", ids, drafter=d).run(progress=False)
    fresh = _trainer(tmp_path / "fresh", "peagle", steps=3).run(progress=False)
    # same first batch (same seed): the loaded drafter's loss is the trained one's, far below a fresh start
    assert tuned[0]["loss"] < 0.9 * fresh[0]["loss"]
    assert abs(tuned[0]["loss"] - sum(r["loss"] for r in hist[-3:]) / 3) < 0.25 * fresh[0]["loss"]


def test_time_budget_shortens_the_run_without_changing_the_config(tmp_path):
    """run(time_budget_s=...) fits the run after 13 steps; the cosine ends at the fitted total, cfg is untouched."""
    t = _trainer(tmp_path, "peagle", steps=40)
    t.run(progress=False, time_budget_s=1e-6)          # no time left: stop one step after the fit
    assert t.cfg.steps == 40
    assert t.step == t.total_steps == 14
    assert abs(t.history[-1]["lr"] - 0.1 * t.cfg.lr) < 1e-12  # the schedule reached its floor at the fitted end


def test_run_hooks_stop_refit_and_grow_the_pool_without_private_state(tmp_path):
    """A study is a caller of run(): until() stops before a step, on_step() after one (False stops), plan() moves
    the cosine's end (the schedule reaches its floor there), add_samples() grows the pool behind the order."""
    t = _trainer(tmp_path / "a", "eagle", steps=100)
    seen = []

    def after(trainer, row):
        seen.append(trainer.step)
        if trainer.step == 2:
            trainer.plan(5)                                # e.g. the time left holds 3 more steps
        return trainer.step < 5
    t.run(progress=False, on_step=after)
    assert seen == [1, 2, 3, 4, 5] and t.step == t.total_steps == 5 and t.cfg.steps == 100
    assert t.history[-1]["lr"] == pytest.approx(0.1 * t.cfg.lr)      # the floor, at the refitted end
    grown = _trainer(tmp_path / "b", "eagle", steps=100)
    before = list(grown.order)
    grown.add_samples(learnable_samples(n=6, seed=9))
    assert grown.order[: len(before)] == before and sorted(grown.order[len(before):]) == list(range(12, 18))
    grown.run(progress=False, until=lambda: grown.step >= 2)
    assert grown.step == 2
