"""benchmarks/gpu/data_scale.py's CPU-side parts: packed data unpacks to the very samples training read, the
newest export is found by its reply-token count, and the recorded curve is what `collect` makes."""
import importlib.util
import json
from pathlib import Path

import torch

from peagle_lab.train.data import load_samples

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("data_scale", ROOT / "benchmarks" / "gpu" / "data_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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


def test_turn_files_are_read_once_and_a_broken_one_again_later(tmp_path):
    from helpers import learnable_samples

    ds = _module()
    files = ds.TurnFiles(tmp_path)
    (tmp_path / "data-0").mkdir()
    (tmp_path / "data-0" / "shard-00000-t0.pt").write_bytes(b"not yet")
    assert files.fresh() == []
    _turn_file(tmp_path / "data-0", "shard-00000-t0.pt", learnable_samples(n=2))
    assert len(files.fresh()) == 2 and files.fresh() == []
