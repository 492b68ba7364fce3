"""benchmarks/gpu/data_scale.py's CPU-side parts: packed data unpacks to the very samples training read, the
newest export is found by its reply-token count, and the recorded curve is what `collect` makes."""
import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from peagle_lab.train.data import load_samples

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "gpu" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _module():
    return _load("data_scale")


def _regenerated(folder: Path, seed: int) -> None:
    """A regenerate folder: two turn files of samples (int32 ids, prompt length), and its settings record."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True)
    for turn in range(2):
        samples = [{"ids": torch.randint(0, 49152, (int(n),), generator=g, dtype=torch.int32), "prompt_len": 3 + i,
                    "conversation": i} for i, n in enumerate(torch.randint(8, 40, (5,), generator=g))]
        torch.save(samples, folder / f"shard-00000-t{turn}.pt")
    (folder / "regenerate.json").write_text("{}")


def test_pack_then_unpack_gives_back_every_sample(tmp_path):
    ds = _module()
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    _regenerated(work / "data-0", 1)
    _regenerated(work / "data-1", 2)
    ds.pack(work, out)
    assert sorted(p.name for p in out.iterdir()) == ["data-0.npz", "data-0.regenerate.json", "data-1.npz",
                                                     "data-1.regenerate.json"]
    again = tmp_path / "again"
    for name in ("data-0", "data-1"):
        folder = ds.unpack(out / f"{name}.npz", again)
        want, got = load_samples(work / name), load_samples(folder)
        assert [(s.ids.tolist(), s.prompt_len) for s in got] == [(s.ids.tolist(), s.prompt_len) for s in want]
    ds.pack(again, tmp_path)                    # unpacked folders carry no settings record: never packed twice
    assert not list(tmp_path.glob("*.npz"))


def test_last_export_is_the_one_trained_on_most_tokens(tmp_path):
    ds = _module()
    assert ds.last_export(tmp_path, "peagle") is None
    for name in ("peagle-2.0M", "peagle-10.0M", "peagle-3.2M", "eagle-50.0M"):
        (tmp_path / "exports" / name).mkdir(parents=True)
    assert ds.last_export(tmp_path, "peagle").name == "peagle-10.0M"


def test_recorded_equal_step_rows_are_the_ablation_replays():
    ds = _module()
    recorded = json.loads((ROOT / "benchmarks" / "results" / "data_scaling.json").read_text())
    rows = {r["name"]: r for r in recorded["rows"]}
    for row in ds.equal_step_rows():
        assert rows[row["name"]] == row                   # data_scaling.json holds them as collect made them
    series = {(r["series"], r["method"]) for r in rows.values()}
    assert {(s, m) for s in ("one pass", "equal steps", "shipped") for m in ("peagle", "eagle")} <= series


def test_the_recorded_curve_reaches_50m_for_both_methods_and_equals_its_raw_replays():
    """The curve's contract (AL at K = 3, 5, 7 at four or more data sizes, from about 2M to 50M or more, per method),
    and each repeat row equals what its allocation's raw record replayed, shipped pair included."""
    results = ROOT / "benchmarks" / "results"
    rows = {r["name"]: r for r in json.loads((results / "data_scaling.json").read_text())["rows"]}
    for method in ("peagle", "eagle"):
        sizes = sorted(r["reply_tokens"] for r in rows.values()
                       if r["method"] == method and r["series"] == "one pass, repeat")
        assert len(sizes) >= 4 and sizes[0] <= 2.1e6 and sizes[-1] >= 50e6
    assert all(set(r["al"]) == {"3", "5", "7"} and r["steps"] > 0 for r in rows.values())
    shipped = {r["method"]: r for r in rows.values() if r["series"] == "shipped"}
    for record in sorted(results.glob("data_scale_repeat_*.json")):
        for k, replays in json.loads(record.read_text())["eval"]["by_k"].items():
            for name, replay in replays.items():
                method, _, size = name.partition("-")
                row = shipped[method] if size == "shipped" else rows[f"one pass, repeat/{name}"]
                assert abs(row["al"][k] - replay["acceptance_length"]) <= 0.0015, (record.name, name, k)


def test_pack_skips_a_folder_whose_engine_wrote_nothing(tmp_path):
    """An engine that failed to start leaves a folder with its settings and no turn file: pack goes on."""
    ds = _module()
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    _regenerated(work / "data-0", 1)
    (work / "data-1").mkdir()
    (work / "data-1" / "regenerate.json").write_text("{}")
    ds.pack(work, out)
    assert sorted(p.name for p in out.glob("*.npz")) == ["data-0.npz"]


def test_watch_starts_a_failed_engine_again_and_it_resumes(tmp_path):
    """The first start fails (as a vLLM engine whose memory profiling broke); the second runs to the end."""
    ds = _module()
    marker = tmp_path / "tried"
    script = (f"import pathlib, sys; m = pathlib.Path({str(marker)!r}); first = not m.exists(); m.touch(); "
              "print('start'); sys.exit(1 if first else 0)")
    logs = [tmp_path / "regen_0.log"]
    rcs = ds.watch([[ds.sys.executable, "-c", script]], logs, ds.time.perf_counter() + 30, relaunch_s=5)
    assert rcs == [0]
    assert logs[0].read_text().strip() == "start"
    assert len(list(tmp_path.glob("regen_0.failed*.log"))) == 1


def test_watch_stops_what_is_still_running_at_the_deadline(tmp_path):
    ds = _module()
    rcs = ds.watch([[ds.sys.executable, "-c", "import time; time.sleep(60)"]], [tmp_path / "r.log"],
                   ds.time.perf_counter() + 3)
    assert rcs[0] != 0


def test_watch_stops_every_engine_when_it_breaks_before_the_deadline(tmp_path, monkeypatch):
    """An error while watching (here: renaming a failed engine's log) must not leave engines running: the stage
    says regen.done after it, and the trainers take the engines' memory back once that is there."""
    ds = _module()
    cmds = [[ds.sys.executable, "-c", "import time; time.sleep(60)"], [ds.sys.executable, "-c", "raise SystemExit(1)"]]
    started = []
    real_launch = ds.launch
    monkeypatch.setattr(ds, "launch", lambda c, lg: started.append(real_launch(c, lg)) or started[-1])
    monkeypatch.setattr(ds.Path, "rename", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    t = ds.time.perf_counter()
    with pytest.raises(OSError, match="disk full"):
        ds.watch(cmds, [tmp_path / "r0.log", tmp_path / "r1.log"], t + 60, relaunch_s=5)
    assert all(p.poll() is not None for p in started) and ds.time.perf_counter() - t < 30


def test_watch_gives_up_on_an_engine_that_keeps_failing(tmp_path):
    ds = _module()
    t = ds.time.perf_counter()
    rcs = ds.watch([[ds.sys.executable, "-c", "raise SystemExit(3)"]], [tmp_path / "r.log"], t + 60,
                   relaunch_s=5, tries=2)
    assert rcs == [3] and ds.time.perf_counter() - t < 30
    assert len(list(tmp_path.glob("r.failed*.log"))) == 1


def _turn_file(folder: Path, name: str, samples) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save([{"ids": s.ids.to(torch.int32), "prompt_len": s.prompt_len} for s in samples], folder / name)


def test_stream_train_is_one_pass_over_a_pool_that_grows_while_it_trains(tmp_path):
    """Turn files land while the trainer runs (as vLLM writes them): every sample is trained on exactly once,
    the reply tokens counted are those of the samples trained on, milestones export in order, and the run ends
    when the pool is spent and the engines are done."""
    from helpers import learnable_samples, tiny_target

    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.trainer import Trainer
    from peagle_lab.train.vocab import build_draft_vocab, token_counts

    ds = _module()
    work = tmp_path / "work"
    first, later = learnable_samples(n=9, seed=1), learnable_samples(n=12, seed=2)
    _turn_file(work / "data-carried", "shard-00000.pt", first)
    files = ds.TurnFiles(work)
    pool = files.fresh()
    cfg = TrainConfig(method="peagle", num_layers=1, draft_vocab_size=40, max_depth=3, steps=10**6, batch_size=3,
                      max_len=30, lr=3e-3, warmup_steps=2, seed=1, group_by_length=True)
    ids, _ = build_draft_vocab(token_counts(pool, 50) + 1, 40)
    trainer = Trainer(tiny_target(vocab=50), pool, cfg, tmp_path / "run", ids)
    trained, exports, landed = [], [], []
    real_step = trainer.train_step

    def step():                         # record what each step trains on; the engines write a file meanwhile
        b = cfg.batch_size
        trained.extend(trainer.order[trainer.step * b:(trainer.step + 1) * b])
        if trainer.step == 1:
            _turn_file(work / "data-0", "shard-00000-t0.pt", later[:6])
        if trainer.step == 3:
            _turn_file(work / "data-1", "shard-00000-t0.pt", later[6:])
            landed.append(True)
        return real_step()

    trainer.train_step = step
    reply = 25                          # every learnable sample: 30 tokens, a 5-token prompt
    seen = ds.stream_train(trainer, files, done=lambda: bool(landed), deadline=ds.time.perf_counter() + 120,
                           marks=[4 * reply, 10 * reply], export=lambda tok, st: exports.append((tok, st)),
                           poll_every=1, wait_s=0.01)
    assert sorted(trained) == list(range(21)), "each of the 21 samples once"
    assert len(trainer.samples) == 21 and seen == 21 * reply
    assert [t for t, _ in exports] == [6 * reply, 12 * reply, 21 * reply]     # first step past each mark, the end
    assert exports[-1][1] == trainer.step == 7


def test_a_pool_that_ends_before_the_time_still_ends_the_cosine(tmp_path):
    """When the engines are done long before the deadline, the cosine is refitted to the pool left: the last step
    trains at the schedule's floor (lr_factor 0.1 at total_steps), as a run fitted to its time would, instead of
    stopping at a learning rate fitted to minutes that never came. A file the engines wrote just before they
    said done is trained on too."""
    from helpers import learnable_samples, tiny_target

    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.trainer import Trainer, lr_factor
    from peagle_lab.train.vocab import build_draft_vocab, token_counts

    ds = _module()
    work = tmp_path / "work"
    _turn_file(work / "data-0", "shard-00000-t0.pt", learnable_samples(n=12, seed=3))
    files = ds.TurnFiles(work)
    pool = files.fresh()
    cfg = TrainConfig(method="eagle", num_layers=1, draft_vocab_size=40, steps=10**6, batch_size=3, max_len=30,
                      lr=3e-3, warmup_steps=2, seed=1)
    ids, _ = build_draft_vocab(token_counts(pool, 50) + 1, 40)
    trainer = Trainer(tiny_target(vocab=50), pool, cfg, tmp_path / "run", ids)
    lrs, real_step, done = [], trainer.train_step, []

    def step():
        lrs.append(trainer.sched.get_last_lr()[0] / cfg.lr)
        if trainer.step == 2:           # the engines' last file, then their done flag
            _turn_file(work / "data-1", "shard-00000-t1.pt", learnable_samples(n=6, seed=4))
            done.append(True)
        return real_step()

    trainer.train_step = step
    ds.stream_train(trainer, files, done=lambda: bool(done), deadline=ds.time.perf_counter() + 600, marks=[],
                    export=lambda tok, st: None, poll_every=100, wait_s=0.01)
    assert trainer.step == 6 == trainer.total_steps, "18 samples, batch 3, every one trained"
    assert lrs[-1] == pytest.approx(lr_factor(5, cfg.warmup_steps, 6))
    assert trainer.sched.get_last_lr()[0] / cfg.lr == pytest.approx(0.1)      # the floor, reached at the end


def test_once_the_engines_are_done_each_step_takes_fewer_micro_batches(tmp_path):
    """Beside the engines an 80 GB card splits each step in micro-batches; once they are done (and their memory is
    back) the trainer takes the step in the fewer that fit it alone. The split changes passes, not the gradient: the
    run trains every sample once and ends with the weights of a run that took one pass a step from the start."""
    from helpers import learnable_samples, tiny_target

    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.trainer import Trainer
    from peagle_lab.train.vocab import build_draft_vocab, token_counts

    ds = _module()
    work = tmp_path / "work"
    _turn_file(work / "data-0", "shard-00000-t0.pt", learnable_samples(n=12, seed=5))
    pool = ds.TurnFiles(work).fresh()
    ids, _ = build_draft_vocab(token_counts(pool, 50) + 1, 40)

    def run(micro: int, micro_after: int, folder: str):
        files = ds.TurnFiles(work)
        cfg = TrainConfig(method="eagle", num_layers=1, draft_vocab_size=40, steps=10**6, batch_size=4,
                          max_len=30, lr=3e-3, warmup_steps=2, seed=1, micro_batches=micro)
        torch.manual_seed(0)
        trainer = Trainer(tiny_target(vocab=50), files.fresh(), cfg, tmp_path / folder, ids)
        passes, real_step = [], trainer.train_step

        def step():
            passes.append(trainer.micro_batches)
            return real_step()

        trainer.train_step = step
        ds.stream_train(trainer, files, done=lambda: trainer.step >= 1, deadline=ds.time.perf_counter() + 600,
                        marks=[], export=lambda tok, st: None, poll_every=1, wait_s=0.01, micro_after=micro_after,
                        micro_after_s=0.0)
        return trainer, passes

    split, passes = run(4, 1, "split")
    assert passes == [4, 1, 1] and split.step == 3, "the first step beside the engines, the rest alone"
    whole, whole_passes = run(1, 1, "whole")
    assert whole_passes == [1, 1, 1]
    for a, b in zip(split.drafter.state_dict().values(), whole.drafter.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    _, kept = run(2, 4, "kept")
    assert kept == [2, 2, 2], "never more micro-batches than the trainer took beside the engines"


def test_turn_files_are_read_once_and_a_broken_one_again_later(tmp_path):
    from helpers import learnable_samples

    ds = _module()
    files = ds.TurnFiles(tmp_path)
    (tmp_path / "data-0").mkdir()
    (tmp_path / "data-0" / "shard-00000-t0.pt").write_bytes(b"not yet")
    assert files.fresh() == []
    _turn_file(tmp_path / "data-0", "shard-00000-t0.pt", learnable_samples(n=2))
    assert len(files.fresh()) == 2 and files.fresh() == []


def test_a_later_window_goes_on_from_the_saved_state_and_trains_no_sample_twice(tmp_path):
    """Window 1 trains on the data it has and saves its state; window 2, on a fresh trainer and a pool that holds
    window 1's files again plus new ones, starts from the saved weights and step, counts reply tokens on from
    window 1's and trains only the new samples: across the windows each sample once."""
    from helpers import learnable_samples, tiny_target

    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.trainer import Trainer
    from peagle_lab.train.vocab import build_draft_vocab, token_counts

    ds = _module()
    work, reply = tmp_path / "work", 25
    old, new = learnable_samples(n=9, seed=1), learnable_samples(n=6, seed=2)
    _turn_file(work / "data-0", "shard-00000-t0.pt", old)
    cfg = TrainConfig(method="peagle", num_layers=1, draft_vocab_size=40, max_depth=3, steps=10**6, batch_size=3,
                      max_len=30, lr=3e-3, warmup_steps=2, seed=1, group_by_length=True)
    target = tiny_target(vocab=50)
    ids, _ = build_draft_vocab(token_counts(old, 50) + 1, 40)
    saved = []

    def window(pool_files, state=None):
        skip = frozenset(state["seen"].tolist()) if state else frozenset()
        pool = [x for x in pool_files.fresh() if ds.sample_key(x) not in skip]
        trainer = Trainer(target, pool, cfg, tmp_path / "run", state["draft_ids"] if state else ids)
        if state:
            ds.continue_from(trainer, {**state, "source": "window 1"})
        trained = []
        real = trainer.train_step
        trainer.train_step = lambda: (trained.extend(trainer.order[trainer.step * 3:(trainer.step + 1) * 3]),
                                      real())[1]
        seen = ds.stream_train(trainer, pool_files, done=lambda: True, deadline=ds.time.perf_counter() + 120,
                               marks=[], export=lambda tok, st: None, seen=state["reply_tokens_seen"] if state else 0,
                               save=lambda tok: saved.append(ds.stream_state(trainer, tok, skip)), skip=skip,
                               wait_s=0.01)
        return trainer, [trainer.samples[i] for i in trained], seen

    first, done1, seen1 = window(ds.TurnFiles(work))
    assert seen1 == 9 * reply and first.step == 3 and len(done1) == 9
    state = saved[-1]
    assert state["step"] == 3 and state["reply_tokens_seen"] == seen1 and len(state["seen"]) == 9
    _turn_file(work / "data-1", "shard-00000-t0.pt", new)
    second, done2, seen2 = window(ds.TurnFiles(work), state)      # reads window 1's file again, and the new one
    assert {ds.sample_key(x) for x in done2} == {ds.sample_key(x) for x in new}, "only the new samples"
    assert second.step == 5 and seen2 == 15 * reply
    assert len(saved[-1]["seen"]) == 15                           # both windows' samples, for a third window


def _trained(tmp_path, steps: int, device: str = "cpu"):
    """A tiny P-EAGLE trainer (batch 3, six learnable samples) after ``steps`` steps on ``device``, with what built
    it."""
    from helpers import learnable_samples, tiny_target

    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.trainer import Trainer
    from peagle_lab.train.vocab import build_draft_vocab, token_counts

    samples = learnable_samples(n=6, seed=3)
    cfg = TrainConfig(method="peagle", num_layers=1, draft_vocab_size=40, max_depth=3, steps=10**6, batch_size=3,
                      max_len=30, lr=3e-3, warmup_steps=2, seed=1)
    target = tiny_target(vocab=50)
    target.model.to(device)
    ids, _ = build_draft_vocab(token_counts(samples, 50) + 1, 40)
    trainer = Trainer(target, samples, cfg, tmp_path / "a", ids)
    for _ in range(steps):
        trainer.train_step()
    return trainer, samples, cfg, target, ids


def test_continue_from_restores_the_weights_and_refuses_another_recipe(tmp_path):
    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.trainer import Trainer

    ds = _module()
    a, samples, cfg, target, ids = _trained(tmp_path, steps=2)
    state = {**ds.stream_state(a, 50, frozenset()), "source": "a"}
    b = Trainer(target, samples, cfg, tmp_path / "b", ids)
    ds.continue_from(b, state)
    assert b.step == 2 and all(torch.equal(x, y) for x, y in zip(a.drafter.state_dict().values(),
                                                                  b.drafter.state_dict().values()))
    assert b.order[:6] == [None] * 6 and sorted(b.order[6:]) == list(range(6))
    assert b.sched.get_last_lr()[0] < cfg.lr                      # the window's warm-up: no full step at once
    assert [r["step"] for r in b.history] == [1, 2]               # the earlier window's history goes on
    other = Trainer(target, samples, TrainConfig(**{**cfg.__dict__, "num_layers": 2}), tmp_path / "c", ids)
    with pytest.raises(SystemExit, match="another training recipe"):
        ds.continue_from(other, state)


def test_a_window_can_go_on_from_an_exported_drafter_named_in_resume_json(tmp_path):
    """Weights only (a window whose state was not brought back): the drafter starts as exported, at the recorded
    step and reply tokens, the optimiser afresh, and it trains and exports again."""
    from peagle_lab.train.trainer import Trainer

    ds = _module()
    a, samples, cfg, target, ids = _trained(tmp_path, steps=1)
    a.export(tmp_path / "resume" / "peagle-0.1M")
    (tmp_path / "resume" / "resume.json").write_text(json.dumps(
        {"peagle": {"export": "peagle-0.1M", "reply_tokens_seen": 75, "steps": 1}}))
    assert ds.load_resume(tmp_path / "resume", "eagle", target) is None
    if torch.cuda.is_available():        # the loader on a GPU target (it once mixed devices there): the same ids
        target.model.cuda()
        assert torch.equal(ds.load_resume(tmp_path / "resume", "peagle", target)["draft_ids"], ids.cpu())
        target.model.cpu()
    state = ds.load_resume(tmp_path / "resume", "peagle", target)
    assert torch.equal(state["draft_ids"], ids.cpu())           # the draft vocabulary the export was built with
    b = Trainer(target, samples, cfg, tmp_path / "b", state["draft_ids"], drafter=state["drafter_module"])
    ds.continue_from(b, state)
    for name, w in a.drafter.state_dict().items():              # as exported: bfloat16
        assert torch.equal(b.drafter.state_dict()[name], w.to(torch.bfloat16).float()), name
    seen = ds.stream_train(b, ds.TurnFiles(tmp_path / "none"), done=lambda: True,
                           deadline=ds.time.perf_counter() + 60, marks=[], seen=75, wait_s=0.01,
                           export=lambda tok, st: b.export(tmp_path / f"peagle-{tok}", overwrite=True))
    assert b.step == 3 and seen == 75 + 6 * 25 and (tmp_path / "peagle-225" / "config.json").exists()
    history = json.loads((tmp_path / "peagle-225" / "training.json").read_text())["history"]
    assert [r["step"] for r in history] == [1, 2, 3]               # the export's steps, then this window's


def _fake_clock(monkeypatch, ds, trainer, seconds):
    """data_scale's clock made fake: it moves only when ``trainer`` takes a step, by ``seconds(step)``, or sleeps.
    Returns the clock (a one-item list) and the learning-rate factors each step trains at."""
    import types

    now, factors, real_step = [1000.0], [], trainer.train_step
    monkeypatch.setattr(ds, "time", types.SimpleNamespace(perf_counter=lambda: now[0],
                                                          sleep=lambda s: now.__setitem__(0, now[0] + s)))

    def step():
        factors.append(trainer.sched.get_last_lr()[0] / trainer.cfg.lr)
        now[0] += seconds(trainer.step)
        return real_step()

    trainer.train_step = step
    return now, factors


def test_a_resumed_cosine_is_fitted_at_once_and_ends_at_its_deadline(tmp_path, monkeypatch):
    """After a resume at step S the warm-up multiplies the cosine from S on. The cosine's end is fitted to the
    time left after the first measured step (a clock that moves one second per step: 20 steps fit), so the
    learning rate climbs through the warm-up and comes down to the schedule's floor exactly at the deadline.
    Fitted only every 50 steps, a short window would end at its peak, never annealed."""
    from helpers import learnable_samples

    from peagle_lab.train.trainer import Trainer

    ds = _module()
    a, samples, cfg, target, ids = _trained(tmp_path, steps=4)
    state = {"drafter": a.drafter.state_dict(), "opt": a.opt.state_dict(), "step": 4, "draft_ids": ids,
             "source": "test", "history": []}
    cfg.warmup_steps = 6
    b = Trainer(target, learnable_samples(n=90, seed=5), cfg, tmp_path / "b", ids)
    ds.continue_from(b, state)
    now, factors = _fake_clock(monkeypatch, ds, b, lambda step: 1.0)
    ds.stream_train(b, ds.TurnFiles(tmp_path / "none"), done=lambda: False, deadline=now[0] + 20, marks=[],
                    export=lambda tok, st: None, wait_s=0.01, poll_every=10**6)
    assert b.step == 4 + 20 == b.total_steps, (b.step, b.total_steps)
    assert all(x < y for x, y in zip(factors[:6], factors[1:6])), factors      # the warm-up only climbs
    assert b.sched.get_last_lr()[0] / cfg.lr == pytest.approx(0.1)             # and the end is annealed


def test_the_cosine_is_timed_afresh_when_the_engines_stop_and_steps_get_faster(tmp_path, monkeypatch):
    """Beside the engines a step takes 3 s of a fake clock, after them 1 s. The step time is measured again from the
    engines' stop and used 20 steps later, so the schedule ends at the deadline's step (70), not at the step an
    average over both phases predicts (64), after which the last steps would all train at the floor."""
    from helpers import learnable_samples, tiny_target

    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.trainer import Trainer
    from peagle_lab.train.vocab import build_draft_vocab, token_counts

    ds = _module()
    samples = learnable_samples(n=240, seed=6)
    cfg = TrainConfig(method="eagle", num_layers=1, draft_vocab_size=40, steps=10**6, batch_size=3, max_len=30,
                      lr=3e-3, warmup_steps=2, seed=1)
    ids, _ = build_draft_vocab(token_counts(samples, 50) + 1, 40)
    trainer = Trainer(tiny_target(vocab=50), samples, cfg, tmp_path / "run", ids)
    now, factors = _fake_clock(monkeypatch, ds, trainer, lambda step: 3.0 if step < 10 else 1.0)
    ds.stream_train(trainer, ds.TurnFiles(tmp_path / "none"), done=lambda: trainer.step >= 10,
                    deadline=now[0] + 30 + 60, marks=[], export=lambda tok, st: None, wait_s=0.01, poll_every=1)
    assert trainer.step == 70 == trainer.total_steps
    # measured afresh 20 steps after the stop (step 30), the cosine reaches its floor only at the end
    assert min(factors[31:-1]) > 0.1 and trainer.sched.get_last_lr()[0] / cfg.lr == pytest.approx(0.1)


def test_an_export_resumes_with_the_sample_keys_its_window_saved_beside_it(tmp_path):
    """The keys file a window writes with each state (seen-<method>.pt) travels with the export: the next window
    skips exactly those samples."""
    ds = _module()
    a, samples, cfg, target, ids = _trained(tmp_path, steps=1)
    a.export(tmp_path / "resume" / "peagle-0.1M")
    keys = torch.tensor(sorted(ds.sample_key(x) for x in samples[:3]), dtype=torch.int64)
    torch.save(keys, tmp_path / "resume" / "seen-peagle.pt")
    (tmp_path / "resume" / "resume.json").write_text(json.dumps(
        {"peagle": {"export": "peagle-0.1M", "reply_tokens_seen": 75, "steps": 1, "seen_file": "seen-peagle.pt"}}))
    state = ds.load_resume(tmp_path / "resume", "peagle", target)
    assert state["seen"].tolist() == keys.tolist()
    assert {ds.sample_key(x) for x in samples} & set(state["seen"].tolist()) == set(keys.tolist())


ON_CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))


@pytest.mark.parametrize("device", ["cpu", ON_CUDA])
def test_a_carry_folder_survives_the_trip_home_and_resumes_both_methods(tmp_path, device):
    """A trainer's carry folder (weights, keys, tokens), cut into pieces as data_scale.sh cuts it, unpacked here by
    keep_carry.sh: the two methods' folders merged into one --resume folder give each method its own drafter, step,
    tokens and keys. A piece that came back broken leaves the last good folder as it was."""
    import shutil
    import subprocess

    from peagle_lab.train.trainer import Trainer

    ds = _module()
    a, samples, cfg, target, ids = _trained(tmp_path, steps=2, device=device)
    out, home, parts = tmp_path / "dsout", tmp_path / "files", tmp_path / "parts"
    out.mkdir()
    home.mkdir()
    keys = torch.tensor(sorted(ds.sample_key(x) for x in samples[:4]), dtype=torch.int64)
    ds.write_carry(out, a, "peagle", 150, keys)
    assert not (out / "carry-peagle.new").exists()
    subprocess.run(f"tar cf - -C {out} carry-peagle | split -b 20000 -d -a 1 - {home}/carry-peagle.tar.",
                   shell=True, check=True)
    keep = ROOT / "benchmarks" / "gpu" / "keep_carry.sh"
    subprocess.run(["bash", str(keep), str(home)], check=True, env={**os.environ, "RESUME_PARTS": str(parts)})
    folder = tmp_path / "resume"
    shutil.copytree(parts / "resume-peagle", folder)          # data_scale.sh merges every parts/resume*/ folder
    (folder / "resume-eagle.json").write_text(json.dumps({"eagle": {"export": "eagle-0.0M", "steps": 1,
                                                                     "reply_tokens_seen": 9}}))
    state = ds.load_resume(folder, "peagle", target)
    assert state["step"] == 2 and state["reply_tokens_seen"] == 150 and state["seen"].tolist() == keys.tolist()
    for name, w in a.drafter.state_dict().items():
        got = state["drafter_module"].state_dict()[name]
        assert torch.equal(got.cpu(), w.to(torch.bfloat16).float().cpu()), name
    b = Trainer(target, samples, cfg, tmp_path / "b", state["draft_ids"], drafter=state["drafter_module"])
    ds.continue_from(b, state)                                    # and it trains on from there, on the same device
    b.train_step()
    assert b.step == 3 and b.history[-1]["step"] == 3
    pieces = sorted(home.glob("carry-peagle.tar.*"))
    assert len(pieces) > 2
    pieces[-1].unlink()                                           # a piece missing: the good folder stays
    done = subprocess.run(["bash", str(keep), str(home)], capture_output=True, text=True,
                          env={**os.environ, "RESUME_PARTS": str(parts)})
    assert "did not unpack whole" in done.stderr and (parts / "resume-peagle" / "resume-peagle.json").exists()


def _carry_pieces(home: Path, folder: Path, m: str) -> None:
    import subprocess

    for old in home.glob(f"carry-{m}.tar.*"):
        old.unlink()
    subprocess.run(f"tar cf - -C {folder.parent} {folder.name} | split -b 20000 -d -a 1 - {home}/carry-{m}.tar.",
                   shell=True, check=True)


def test_keep_carry_takes_only_a_folder_whose_export_and_keys_are_whole(tmp_path):
    """A carry folder that unpacks but lacks its key file, or whose weights file is cut short, leaves the last
    good resume folder in place; a whole one replaces it."""
    import subprocess

    from safetensors.torch import save_file

    keep, env = ROOT / "benchmarks" / "gpu" / "keep_carry.sh", {**os.environ, "RESUME_PARTS": str(tmp_path / "p")}
    src, home = tmp_path / "src" / "carry-eagle", tmp_path / "home"
    (src / "eagle-1.0M").mkdir(parents=True)
    home.mkdir()
    save_file({"w": torch.arange(40_000, dtype=torch.float32)}, str(src / "eagle-1.0M" / "model.safetensors"))
    (src / "eagle-1.0M" / "config.json").write_text("{}")
    (src / "resume-eagle.json").write_text(json.dumps({"eagle": {"export": "eagle-1.0M", "steps": 7,
                                                                 "seen_file": "seen-eagle.pt"}}))
    torch.save(torch.tensor([1, 2, 3]), src / "seen-eagle.pt")

    def run() -> subprocess.CompletedProcess:
        _carry_pieces(home, src, "eagle")
        return subprocess.run(["bash", str(keep), str(home)], capture_output=True, text=True, env=env)

    assert run().returncode == 0
    kept = tmp_path / "p" / "resume-eagle"
    good = (kept / "eagle-1.0M" / "model.safetensors").read_bytes()
    (src / "seen-eagle.pt").unlink()
    assert "did not unpack whole" in run().stderr
    torch.save(torch.tensor([1, 2, 3, 4]), src / "seen-eagle.pt")
    weights = src / "eagle-1.0M" / "model.safetensors"
    weights.write_bytes(good[:-1000])                     # a weights file cut short, as a tar of a moving folder
    assert "did not unpack whole" in run().stderr
    assert (kept / "eagle-1.0M" / "model.safetensors").read_bytes() == good
    assert torch.load(kept / "seen-eagle.pt").tolist() == [1, 2, 3]
    weights.write_bytes(good)
    assert run().returncode == 0 and torch.load(kept / "seen-eagle.pt").tolist() == [1, 2, 3, 4]


def test_write_carry_leaves_one_whole_folder_and_nothing_beside_it(tmp_path):
    ds = _module()
    a, samples, cfg, target, ids = _trained(tmp_path, steps=1)
    out = tmp_path / "dsout"
    out.mkdir()
    ds.write_carry(out, a, "peagle", 75, torch.tensor([5]))
    a.train_step()
    ds.write_carry(out, a, "peagle", 150, torch.tensor([5, 6]))
    assert sorted(p.name for p in out.iterdir()) == ["carry-peagle"]
    record = json.loads((out / "carry-peagle" / "resume-peagle.json").read_text())["peagle"]
    assert record["steps"] == 2 and record["reply_tokens_seen"] == 150
    assert sorted(p.name for p in (out / "carry-peagle").iterdir()) == ["peagle-0.0M", "resume-peagle.json",
                                                                        "seen-peagle.pt"]


def test_a_resume_folder_without_this_method_stops_the_trainer_with_the_fix(tmp_path, monkeypatch):
    """--resume given but holding nothing for the method: starting from zero would export milestones named like
    the resumed run's, so the trainer stops at once, saying what to park."""
    import types

    ds = _module()
    monkeypatch.setattr(ds, "DEVICE", "cpu")
    (tmp_path / "resume").mkdir()
    (tmp_path / "resume" / "resume-eagle.json").write_text(json.dumps({"eagle": {"export": "eagle-1.0M"}}))
    args = types.SimpleNamespace(work=str(tmp_path / "work"), resume=str(tmp_path / "resume"), train_s=60,
                                 batch_size=4)
    with pytest.raises(SystemExit) as stop:
        ds.stage_stream(args, tmp_path / "out", "peagle")
    assert "cannot go on" in str(stop.value) and "park parts/resume-peagle" in str(stop.value)


def test_carry_folders_kept_in_history_come_back_in_a_fresh_clone(tmp_path):
    """resume_parts.sh keep: two commits, the folders in the first and out of the tree after the second;
    restore in a fresh clone gives back the same bytes."""
    import shutil
    import subprocess

    repo = tmp_path / "repo"
    (repo / "benchmarks" / "gpu").mkdir(parents=True)
    for f in ("resume_parts.sh", "history_budget.py"):
        shutil.copy(ROOT / "benchmarks" / "gpu" / f, repo / "benchmarks" / "gpu")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C"]
    subprocess.run([*git, str(repo), "init", "-q"], check=True)
    subprocess.run([*git, str(repo), "add", "."], check=True)
    subprocess.run([*git, str(repo), "commit", "-qm", "start"], check=True)
    for m in ("peagle", "eagle"):
        d = repo / "parts" / f"resume-{m}"
        (d / f"{m}-1.0M").mkdir(parents=True)
        (d / f"{m}-1.0M" / "model.safetensors").write_bytes(bytes(range(256)) * 40)
        (d / f"resume-{m}.json").write_text(json.dumps({m: {"export": f"{m}-1.0M", "steps": 3}}))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    script = ["bash", "benchmarks/gpu/resume_parts.sh"]
    subprocess.run([*script, "keep", "a test"], cwd=repo, check=True, env=env, capture_output=True)
    tracked = subprocess.run([*git, str(repo), "ls-files"], capture_output=True, text=True).stdout.split()
    assert tracked == ["benchmarks/gpu/history_budget.py", "benchmarks/gpu/resume_parts.sh"]  # out of the tree again
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    subprocess.run([*script, "restore"], cwd=clone, check=True, capture_output=True)
    for m in ("peagle", "eagle"):
        a, b = repo / "parts" / f"resume-{m}", clone / "parts" / f"resume-{m}"
        weights = f"{m}-1.0M/model.safetensors"
        assert (b / weights).read_bytes() == (a / weights).read_bytes()
        assert json.loads((b / f"resume-{m}.json").read_text())[m]["steps"] == 3
    bad = subprocess.run([*script, "restore", "HEAD"], cwd=clone, capture_output=True, text=True)
    assert bad.returncode != 0 and "commits that do" in bad.stderr


def test_collect_keeps_the_rows_an_earlier_allocation_replayed(tmp_path):
    """A continued run's collect adds its milestones to the curve: rows it replayed again (the shipped pair) are
    replaced, the earlier run's one-pass rows stay, and each command is listed."""
    ds = _module()
    out, dest = tmp_path / "out", tmp_path / "data_scaling.json"
    out.mkdir()
    per = [0.4, 0.1, 0.02, 0.0, 0.0, 0.0, 0.0]
    ev = {"prompts": "mt-bench:80", "max_new_tokens": 128,
          "by_k": {k: {n: {"acceptance_length": al, "acceptance_per_position": per[:int(k)]}
                       for n, al in (("peagle-shipped", 1.94), ("peagle-35.0M", 1.75))} for k in ("3", "5", "7")}}
    (out / "eval.json").write_text(json.dumps(ev))
    row = {"method": "peagle", "reply_tokens": 35_000_001, "steps": 2900, "planned_steps": 3300, "lr_factor": 0.5,
           "drafter": "/tmp/ds/exports/peagle-35.0M", "continued_from": "x/stream-peagle.pt"}
    (out / "train_peagle.json").write_text(json.dumps({"samples": 9, "reply_tokens": 36_000_000, "streamed": True,
                                                       "rows": [row]}))
    earlier = {"what": "by hand", "commands": ["the first run"], "rows": [
        {"series": "one pass", "method": "peagle", "name": "peagle-20.0M", "reply_tokens": 20_007_911, "al": {}},
        {"series": "shipped", "method": "peagle", "name": "peagle-shipped", "reply_tokens": 3_687_185, "al": {}}]}
    dest.write_text(json.dumps(earlier))
    result = ds.collect(out, dest, "the second run", keep=True)
    rows = {r["name"]: r for r in result["rows"]}
    assert rows["peagle-20.0M"] == earlier["rows"][0]                     # kept as it was
    assert rows["peagle-shipped"]["al"]["7"] == 1.94                      # replayed again: replaced
    assert rows["peagle-35.0M"]["continued_from"] == "x/stream-peagle.pt" and rows["peagle-35.0M"]["steps"] == 2900
    assert result["commands"] == ["the first run", "the second run"] and result["what"] == "by hand"
    assert [n for n in rows if n.startswith("peagle-")] == ["peagle-20.0M", "peagle-35.0M", "peagle-shipped"]


def test_a_second_run_of_the_recipe_is_its_own_series_beside_the_first(tmp_path):
    """The same milestone names from another run land as their own rows, named by series: the first run's stay."""
    ds = _module()
    out, dest = tmp_path / "out", tmp_path / "data_scaling.json"
    out.mkdir()
    per = [0.4, 0.1, 0.02, 0.0, 0.0, 0.0, 0.0]
    ev = {"prompts": "mt-bench:80", "max_new_tokens": 128,
          "by_k": {k: {"peagle-2.0M": {"acceptance_length": 1.31, "acceptance_per_position": per[:int(k)]}}
                   for k in ("3", "5", "7")}}
    (out / "eval.json").write_text(json.dumps(ev))
    row = {"method": "peagle", "reply_tokens": 2_000_100, "steps": 166, "planned_steps": 1200, "lr_factor": 1.0,
           "drafter": "/tmp/ds/exports/peagle-2.0M"}
    (out / "train_peagle.json").write_text(json.dumps({"samples": 9, "reply_tokens": 9, "streamed": True,
                                                       "rows": [row]}))
    first = {"series": "one pass", "method": "peagle", "name": "peagle-2.0M", "reply_tokens": 2_001_015, "al": {}}
    first_regen = {"main": {"reply_tokens": 23_900_000}}
    dest.write_text(json.dumps({"commands": ["first"], "rows": [first], "regeneration": first_regen}))
    (out / "regen_throughput.json").write_text(json.dumps({"main": {"reply_tokens": 29_000_000}}))
    result = ds.collect(out, dest, "second", keep=True, series="one pass, repeat")
    rows = {r["name"]: r for r in result["rows"]}
    assert rows["peagle-2.0M"] == first
    assert rows["one pass, repeat/peagle-2.0M"]["series"] == "one pass, repeat"
    assert rows["one pass, repeat/peagle-2.0M"]["al"]["7"] == 1.31
    # every allocation's regeneration record stays: the first where it was, later ones after it, each once
    assert result["regeneration"] == first_regen
    again = ds.collect(out, dest, "second, collected again", keep=True, series="one pass, repeat")
    assert again["regeneration"] == first_regen
    assert again["later_regenerations"] == [{"main": {"reply_tokens": 29_000_000}, "series": "one pass, repeat"}]
    (out / "regen_throughput.json").write_text(json.dumps(first_regen))       # the first one, collected again:
    once = ds.collect(out, dest, "first, again", keep=True, series="one pass")  # it is not kept twice
    regens = [once["regeneration"], *once.get("later_regenerations", [])]
    assert sum(r["main"] == first_regen["main"] for r in regens) == 1 and len(regens) == 2


def test_record_keeps_an_allocation_whole_and_refuses_an_unfinished_eval(tmp_path):
    """The raw record is made from what results.tgz brought back: logs without progress bars, the driver's log
    split at the eval, every JSON as written; an eval.json that has not reached K=7 yet is refused."""
    ds = _module()
    out = tmp_path / "results"
    out.mkdir()
    log = ("[10:00:00] stage stream\n[10:11:00] regeneration: 29000000 reply tokens\n"
           "[10:22:00] stage eval\n[10:23:00] K=7: peagle-5.0M 1.450\n")
    (out / "driver.log").write_text(log)          # still running: eval-live writes K=7 long before the end
    (out / "train_peagle.log").write_text("[10:01:00] stage stream-peagle\r 12%|##   | 5/40 [00:01<00:07, 4.9it/s]"
                                          "\r\n[10:20:00] peagle: 5000000 reply tokens in 424 steps\n")
    for m, n in (("peagle", 5_000_000), ("eagle", 5_100_000)):
        (out / f"train_{m}.json").write_text(json.dumps({"rows": [{"reply_tokens": n}], "streamed": True,
                                                         "reply_tokens": 27_500_000}))
    (out / "regen_throughput.json").write_text(json.dumps({"main": {"reply_tokens": 29_000_000}}))
    ev = {"by_k": {k: {"peagle-5.0M": {"acceptance_length": 1.45}} for k in ("3", "5", "7")},
          "prompts": "mt-bench:80"}
    (out / "eval.json").write_text(json.dumps(ev))
    dest = tmp_path / "raw.json"
    with pytest.raises(SystemExit, match="had not finished"):
        ds.record(out, dest, "START=1 ... bash benchmarks/gpu/data_scale.sh", "NVIDIA H200", "a test")
    assert not dest.exists()
    (out / "driver.log").write_text(log + "[10:23:01] done\n")
    rec = ds.record(out, dest, "START=1 ... bash benchmarks/gpu/data_scale.sh", "NVIDIA H200", "a test")
    assert json.loads(dest.read_text()) == rec
    assert rec["driver_log"] == ["[10:00:00] stage stream", "[10:11:00] regeneration: 29000000 reply tokens"]
    assert rec["eval_log"][0].endswith("stage eval") and rec["eval_log"][-1].endswith("done")
    assert rec["train_logs"]["peagle"] == ["[10:01:00] stage stream-peagle",
                                           "[10:20:00] peagle: 5000000 reply tokens in 424 steps"]
    assert rec["train"]["peagle"]["rows"][0]["reply_tokens"] == 5_000_000 and rec["train_logs"]["eagle"] == []
    assert rec["regeneration"]["main"]["reply_tokens"] == 29_000_000 and rec["eval"] == ev
    assert rec["command"].startswith("START=1") and rec["machine"] == "NVIDIA H200" and rec["what"] == "a test"
    assert "memory" not in rec
    # the GPU is the one the memory plan names, and the plan and nvidia-smi's samples are kept
    with pytest.raises(SystemExit, match="names no GPU .*--machine"):
        ds.record(out, tmp_path / "other.json", "START=1 ...", None, "a test")
    plan = {"total_gib": 79.6, "engines": 4, "micro": 2, "kv_gib": 8.0, "gpu": "NVIDIA H100 80GB HBM3"}
    (out / "memory_plan_stream.json").write_text(json.dumps(plan))
    (out / "gpu_memory.log").write_text('{"time": "10:05:00", "used_mib": 70000, "total_mib": 81559, "by_pid": {}}\n'
                                        '{"time": "10:05:30", "used_mib": 71000, "total_mib": 81559, "by_pid": {}}\n'
                                        '{"max_used_mib": 71000}\n{"time": "10:')
    rec = ds.record(out, dest, "START=1 ... bash benchmarks/gpu/data_scale.sh", None, "a test")
    assert rec["machine"] == "NVIDIA H100 80GB HBM3" and rec["memory"]["plans"] == {"stream": plan}
    assert rec["memory"]["max_used_mib"] == 71000 and len(rec["memory"]["samples"]) == 3
    spec = importlib.util.spec_from_file_location("make_results", ROOT / "benchmarks" / "make_results.py")
    make_results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_results)          # RESULTS.md's headline for such a record
    assert make_results.stream_run(rec) == ("27.5M reply tokens in the pool; seen by the end, one pass: P-EAGLE "
                                            "5.0M, EAGLE-3 5.1M")


def test_the_serving_crosscheck_names_the_fix_for_a_bad_drafter_argument(tmp_path):
    import subprocess
    import sys

    for bad in ("peagle", "medusa=" + str(tmp_path), "peagle=" + str(tmp_path / "missing")):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vllm_cpu_crosscheck.py"), "--drafter", bad],
                              capture_output=True, text=True)
        assert done.returncode != 0 and "give METHOD=DIR with METHOD eagle or peagle" in done.stderr, done.stderr


def _git_repo(path: Path) -> list[str]:
    import subprocess

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(path)]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "README").write_text("start\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "start"], check=True)
    return git


def test_history_budget_counts_a_file_added_and_removed_twice(tmp_path):
    """The oracle is the sizes written: a 3,000-byte file added then removed weighs 6,000 bytes of diff, a
    change of a 100-byte file into 150 bytes weighs both sides, and the base defaults to where the branch
    started (its reflog's oldest entry)."""
    import subprocess

    budget = _load("history_budget")
    git = _git_repo(tmp_path)
    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (tmp_path / "big.bin").write_bytes(os.urandom(3000))
    (tmp_path / "note.txt").write_bytes(b"a" * 100)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "add"], check=True)
    (tmp_path / "note.txt").write_bytes(b"b" * 150)
    subprocess.run([*git, "rm", "-q", "big.bin"], check=True)
    subprocess.run([*git, "commit", "-qam", "change and remove"], check=True)
    total, parts = budget.diff_bytes(base, cwd=str(tmp_path))
    assert total == 3000 + 100 + 3000 + 100 + 150
    assert parts[0][0] == 3000 and parts[0][2] == "big.bin"
    assert budget.session_base(cwd=str(tmp_path)) == base
    ok, report = budget.check(base, adding=0, limit_mib=1, cwd=str(tmp_path))
    assert ok and "0.0 MiB committed" in report
    ok, report = budget.check(base, adding=2 * 2**20, limit_mib=1, cwd=str(tmp_path))
    assert not ok and "too heavy to submit" in report and "never regenerated data" in report


def test_keep_refuses_carry_folders_that_would_make_the_submission_too_heavy(tmp_path):
    """resume_parts.sh keep over the budget: a clear refusal and no commit at all."""
    import shutil
    import subprocess

    git = _git_repo(tmp_path)
    (tmp_path / "benchmarks" / "gpu").mkdir(parents=True)
    for f in ("resume_parts.sh", "history_budget.py"):
        shutil.copy(ROOT / "benchmarks" / "gpu" / f, tmp_path / "benchmarks" / "gpu")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "scripts"], check=True)
    for m in ("peagle", "eagle"):
        (tmp_path / "parts" / f"resume-{m}").mkdir(parents=True)
        (tmp_path / "parts" / f"resume-{m}" / "w.bin").write_bytes(os.urandom(400_000))
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    env = {**os.environ, "HISTORY_LIMIT_MIB": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    r = subprocess.run(["bash", "benchmarks/gpu/resume_parts.sh", "keep", "too big"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1 and "too heavy to submit" in r.stderr and "nothing kept" in r.stderr
    assert subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head


def test_eval_replays_each_export_once_as_it_lands_and_an_identical_drafter_scores_the_same(tmp_path, monkeypatch):
    """Stage eval-live beside the trainers: an export that lands while it waits is replayed and written to
    eval.json before training ends; the stage stops once train.done is there; the eval after it replays
    nothing again. The oracle: an export that is a copy of a shipped drafter gets that drafter's numbers."""
    import shutil
    import threading
    import types

    from peagle_lab.drafters_registry import shipped

    ds = _module()
    monkeypatch.setattr(ds, "DEVICE", "cpu")
    monkeypatch.setenv("PEAGLE_SHIPPED", str(shipped()["eagle-smollm2"].parent))
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "exports").mkdir(parents=True)
    out.mkdir()
    shutil.copytree(shipped()["eagle-smollm2"], work / "exports" / "eagle-1.0M")
    args = types.SimpleNamespace(work=str(work), replies=None, eval_prompts=2, eval_new_tokens=8, eval_poll_s=0.2)
    replayed = []
    real = ds.stage_eval.__globals__["log"]
    monkeypatch.setattr(ds, "log", lambda msg: (replayed.append(msg), real(msg)))
    live = threading.Thread(target=ds.stage_eval, args=(args, out), kwargs={"live": True})
    live.start()
    for _ in range(600):                        # the first pass: the shipped pair and the first export
        if (out / "eval.json").exists() and "7" in json.loads((out / "eval.json").read_text())["by_k"]:
            break
        ds.time.sleep(0.1)
    shutil.copytree(shipped()["peagle-smollm2"], work / "exports" / "peagle-2.0M.tmp-x")  # being written:
    ds.time.sleep(0.5)                                                                      # not an export yet
    (work / "exports" / "peagle-2.0M.tmp-x").rename(work / "exports" / "peagle-2.0M")      # lands while it waits
    (out / "train.done").touch()
    live.join(timeout=300)
    assert not live.is_alive()
    ev = json.loads((out / "eval.json").read_text())
    assert sorted(ev["by_k"]) == ["3", "5", "7"]
    for k in ev["by_k"]:
        got = ev["by_k"][k]
        assert sorted(got) == ["eagle-1.0M", "eagle-shipped", "peagle-2.0M", "peagle-shipped"]
        assert got["eagle-1.0M"] == got["eagle-shipped"] and got["peagle-2.0M"] == got["peagle-shipped"]
    k7 = [m for m in replayed if m.startswith("K=7")]
    assert len(k7) == 2 and "peagle-2.0M" in k7[1] and "eagle-shipped" not in k7[1]   # each drafter once
    replayed.clear()
    ds.stage_eval(args, out)                    # the eval after training: nothing left
    assert replayed == ["eval: every drafter is replayed already"]
    # an export written again under its name (the end of a run a few tokens past a milestone): replayed again
    shutil.copytree(shipped()["peagle-smollm2"], work / "exports" / "eagle-1.0M.tmp-y")
    shutil.rmtree(work / "exports" / "eagle-1.0M")
    (work / "exports" / "eagle-1.0M.tmp-y").rename(work / "exports" / "eagle-1.0M")
    replayed.clear()
    ds.stage_eval(args, out)
    assert [m.startswith("K=") and "eagle-1.0M" in m and "shipped" not in m for m in replayed] == [True] * 3
    ev = json.loads((out / "eval.json").read_text())
    assert all(ev["by_k"][k]["eagle-1.0M"] == ev["by_k"][k]["peagle-shipped"] for k in ev["by_k"])


def test_the_memory_plan_keeps_the_h200_run_and_fits_an_80_gb_card():
    """An H200 (nvidia-smi: 143,771 MiB) keeps the measured configuration: one pass a step, 16 GiB of KV cache per
    engine. An 80 GB H100 (81,559 MiB) splits each step in two and gives the engines what is left, and everything
    planned fits the card; the trainers alone, or the engines alone, need no split."""
    ds = _module()
    h200, h100 = 143771 / 1024, 81559 / 1024
    plan = ds.memory_plan(h200, 4, trainers=True, eval_live=True)
    assert (plan["micro"], plan["kv_gib"]) == (1, 16.0)
    plan = ds.memory_plan(h100, 4, trainers=True, eval_live=True)
    assert plan["micro"] == 2 and 8 <= plan["kv_gib"] < 16
    used = plan["trainers_and_eval_gib"] + 4 * (plan["kv_gib"] + ds.ENGINE_GIB) + ds.MARGIN_GIB
    assert used <= h100
    assert ds.memory_plan(h100, 0, trainers=True, eval_live=True)["micro"] == 1
    assert ds.memory_plan(h100, 4, trainers=False, eval_live=False)["kv_gib"] == 16.0
    # given sizes are kept, or refused with the fix when they cannot fit
    assert ds.memory_plan(h100, 4, trainers=True, eval_live=True, micro=4)["micro"] == 4
    assert ds.memory_plan(h100, 4, trainers=True, eval_live=True, kv=10.0) == {**ds.memory_plan(
        h100, 4, trainers=True, eval_live=True, micro=4), "kv_gib": 10.0}
    with pytest.raises(SystemExit, match="use fewer engines .*--kv-cache-gib"):
        ds.memory_plan(h100, 4, trainers=True, eval_live=True, kv=14.0)
    with pytest.raises(SystemExit, match="1.5 GiB of KV cache"):
        ds.memory_plan(39.4, 4, trainers=True, eval_live=True)
    # the trainers alone take the fewest micro-batches that fit the card; never more than the batch holds
    assert ds.memory_plan(39.4, 0, trainers=True, eval_live=True)["micro"] == 2
    assert ds.memory_plan(h100, 4, trainers=True, eval_live=True, batch=1)["micro"] == 1


def test_every_process_of_the_stream_stage_gets_the_plan_the_driver_made(tmp_path, monkeypatch):
    """The driver sizes the stage once and passes its micro-batches to the trainers, whose own stages
    (stream-peagle, without eval) would otherwise plan without eval-live's share."""
    ds = _module()
    monkeypatch.setattr(ds, "gpu_total_gib", lambda: 81559 / 1024)
    monkeypatch.setattr(ds, "gpu_info", lambda: ("NVIDIA H100 80GB HBM3", 81559 / 1024))
    monkeypatch.setattr(ds, "DEVICE", "cuda")
    args = SimpleNamespace(slices="0:9,0:9,0:9,0:9", stages=["stream", "eval"], batch_size=64, micro_batches=0,
                           kv_cache_gib=None)
    driver = ds.plan_for(args, "stream")
    trainer_args = SimpleNamespace(**{**vars(args), "stages": ["stream-peagle"], "micro_batches": driver["micro"]})
    assert ds.plan_for(trainer_args, "stream")["micro"] == driver["micro"] == 2
    assert ds.plan_for(args, "regen")["kv_gib"] == 16.0 and ds.plan_for(args, "train")["micro"] == 1
    # the driver hands its plan to the processes it starts
    started = []

    class Started:
        def __init__(self, argv, **kw):
            started.append(argv)
            self.pid = len(started)

        def wait(self):
            return 0

    monkeypatch.setattr(ds.subprocess, "Popen", Started)
    monkeypatch.setattr(ds, "MemorySampler", lambda path: SimpleNamespace(stop=lambda: None))
    monkeypatch.setattr(ds.sys, "argv", ["data_scale.py", "train", "eval", "--out", str(tmp_path), "--device", "cuda",
                                         "--slices", "0:9,0:9,0:9,0:9", "--micro-batches", "0"])
    monkeypatch.setattr(ds, "stage_eval", lambda *a, **k: None)
    ds.main()
    assert [a[2] for a in started] == ["train-peagle", "train-eagle", "eval-live"]
    assert all(a[-2:] == ["--micro-batches", "1"] for a in started)      # the trainers alone fit in one pass
    assert json.loads((tmp_path / "memory_plan_train.json").read_text())["micro"] == 1
    assert json.loads((tmp_path / "memory_plan_train.json").read_text())["gpu"] == "NVIDIA H100 80GB HBM3"
    # the stream stage: two micro-batches beside the engines, one once they are done
    started.clear()
    monkeypatch.setattr(ds, "stage_regen", lambda *a, **k: None)
    monkeypatch.setattr(ds, "pack", lambda *a, **k: None)
    monkeypatch.setattr(ds.sys, "argv", ["data_scale.py", "stream", "--out", str(tmp_path), "--device", "cuda",
                                         "--slices", "0:9,0:9,0:9,0:9"])
    ds.main()
    assert [a[2] for a in started] == ["stream-peagle", "stream-eagle"]
    assert all(a[-4:] == ["--micro-batches", "2", "--micro-after-regen", "1"] for a in started)
    plan = json.loads((tmp_path / "memory_plan_stream.json").read_text())
    assert (plan["micro"], plan["micro_after_regen"]) == (2, 1)
    # a GPU nvidia-smi says nothing about: refused unless the sizes are given
    monkeypatch.setattr(ds, "gpu_total_gib", lambda: None)
    monkeypatch.setattr(ds, "gpu_info", lambda: None)
    with pytest.raises(SystemExit, match="give --micro-batches and --kv-cache-gib"):
        ds.plan_for(args, "stream")
    given = SimpleNamespace(**{**vars(args), "micro_batches": 2, "kv_cache_gib": 8.0})
    assert (ds.plan_for(given, "stream")["micro"], ds.plan_for(given, "stream")["kv_gib"]) == (2, 8.0)
