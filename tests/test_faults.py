"""Faults (issue 53): a kill at any instant of a write, damaged data, a second writer, a device the machine lacks,
a full or unwritable disk, and SIGINT / SIGTERM each end in one line naming the problem and the fix, and nothing the
user had is lost or left half-written.

The kill tests kill a forked child at every line the write runs (a line tracer on the modules that write), not at
one chosen moment, and check what is on disk after each kill. Every model here is tiny and made in code.
"""
import errno
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
import torch

from helpers import random_drafter, tiny_target
from peagle_lab.atomic import Unwritable, atomic_file, clean_leftovers
from peagle_lab.checkpoint import load_drafter, save_drafter
from peagle_lab.cli import main
from peagle_lab.lock import FolderInUse, hold, holder

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "peagle_lab"


def _exit_2(argv, capsys) -> str:
    """Run the CLI, expect exit 2 and return its one line on stderr."""
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2, err.value.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _last_line(argv, capsys) -> str:
    """Run the CLI, expect exit 2 and return its last line on stderr (progress lines may come before it)."""
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2, err.value.code
    said = capsys.readouterr().err
    assert "Traceback" not in said
    return said.strip().splitlines()[-1]


@pytest.fixture()
def no_model_loads(monkeypatch):
    from peagle_lab.drafter import Eagle3Drafter
    from peagle_lab.target import Target

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the fault was refused")

    monkeypatch.setattr(Target, "load", classmethod(refuse))
    monkeypatch.setattr(Eagle3Drafter, "__init__", refuse)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or ".replaced-" in p.name)


def chat_target(vocab: int = 50):
    """A tiny target that renders a prompt as token ids (no tokenizer): enough for regenerate."""
    tgt = tiny_target(vocab=vocab)
    tgt.chat_ids = lambda text: [1 + ord(c) % (vocab - 10) for c in text][:12]
    tgt.chat_history_ids = lambda turns, replies: sum(([1 + ord(c) % (vocab - 10) for c in t][:6] + r
                                                       for t, r in zip(turns, replies + [[]])), [])
    return tgt


class CannedEngine:
    """Replies without a model (each reply: the prompt's last three ids): regenerate's writing, nothing else."""

    name, dtype, reply_tokens, seconds = "canned", "float32", 0, 0.0

    def answer(self, asks, *, max_new_tokens, temperature, seed, tick=None):
        from peagle_lab.train.data import reply_sample

        return [reply_sample(a, a[-3:], ()) for a in asks]

    def close(self):
        pass


# ----------------------------------------------------------------------------- a kill at every line of a write
def _killed_at(n: int, write, files: set[str]) -> int:
    """Run ``write`` in a forked child killed (``os._exit``: no cleanup runs, as with SIGKILL) at the ``n``-th line
    it executes in ``files``. Returns the number of such lines when it finished before that, else 0."""
    read, put = os.pipe()
    pid = os.fork()
    if pid == 0:                                            # the child
        os.close(read)
        torch.set_num_threads(1)                            # the parent's OpenMP pool does not survive a fork
        seen = [0]

        def local(frame, event, arg):
            if event == "line":
                seen[0] += 1
                if seen[0] == n:
                    os._exit(137)
            return local

        sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename in files else None)
        try:
            write()
        except BaseException:                               # a bug, not a kill: tell the parent
            os.write(put, ("error " + traceback.format_exc()).encode())
            os._exit(3)
        sys.settrace(None)
        os.write(put, str(seen[0]).encode())
        os._exit(0)
    os.close(put)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert not said.startswith("error"), said
    return int(said) if os.waitstatus_to_exitcode(status) == 0 else 0


def kill_at_every_line(write, files, after_kill, reset) -> int:
    """Kill ``write`` at each line it runs in ``files`` in turn; ``after_kill()`` checks the disk, ``reset()`` puts
    the state before the write back (a normal run: the next run, which must clean what the kill left)."""
    files = {str(f) for f in files}
    total = _killed_at(10**9, write, files)
    reset()
    assert total > 5, total
    for n in range(1, total + 1):
        assert _killed_at(n, write, files) == 0
        after_kill(n)
        reset()
    return total


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="kills a forked child")


@needs_fork
def test_an_export_killed_at_any_line_leaves_the_old_drafter_or_the_new_one(tmp_path):
    """The reported bug: a kill between the swap's two renames left no drafter/ (the old one under .replaced-*)."""
    tgt = tiny_target(vocab=50)
    old, new = random_drafter(tgt, parallel=True, seed=1), random_drafter(tgt, parallel=True, seed=2)
    run = tmp_path / "run"
    dest = run / "drafter"
    save_drafter(old, dest)
    weights = {name: d.state_dict()["fc.weight"] for name, d in (("old", old), ("new", new))}
    seen = set()

    def after_kill(n):
        assert dest.is_dir(), f"killed at line {n}: no drafter folder ({sorted(os.listdir(run))})"
        back = load_drafter(dest, tgt).state_dict()["fc.weight"]
        which = [name for name, w in weights.items() if torch.equal(back, w)]
        assert which, f"killed at line {n}: the drafter is neither the old one nor the new one"
        seen.add(which[0])

    def reset():
        save_drafter(old, dest)                              # the next run: cleans what the kill left
        assert sorted(os.listdir(run)) == ["drafter"], os.listdir(run)

    kill_at_every_line(lambda: save_drafter(new, dest), [PKG / "atomic.py", PKG / "checkpoint.py"],
                       after_kill, reset)
    assert seen == {"old", "new"}                            # the kills fell on both sides of the swap


@needs_fork
def test_a_checkpoint_killed_at_any_line_is_the_old_one_or_the_new_one(tmp_path):
    path = tmp_path / "checkpoint.pt"
    old, new = {"step": 1, "w": torch.zeros(64)}, {"step": 2, "w": torch.ones(64)}

    def write(state):
        with atomic_file(path) as tmp:
            torch.save(state, tmp)

    def after_kill(n):
        assert torch.load(path)["step"] in (1, 2), n

    def reset():
        write(old)
        assert os.listdir(tmp_path) == ["checkpoint.pt"], os.listdir(tmp_path)

    reset()
    kill_at_every_line(lambda: write(new), [PKG / "atomic.py", Path(__file__)], after_kill, reset)


@needs_fork
def test_a_materialise_killed_at_any_line_leaves_nothing_or_the_whole_folder(tmp_path, monkeypatch):
    from peagle_lab.checkpoint import with_learned_mask_row
    from peagle_lab.materialise import materialise_for_vllm

    monkeypatch.setenv("PEAGLE_CACHE", str(tmp_path / "cache"))
    tgt = tiny_target(vocab=50)
    src = save_drafter(with_learned_mask_row(random_drafter(tgt, parallel=True), tgt), tmp_path / "d")
    made = materialise_for_vllm(src, tgt)
    cache = made.parent

    def after_kill(n):
        if made.exists():
            assert load_drafter(made, tgt) is not None, n    # whole: config and weights
        assert not (cache / made.name).exists() or (made / "config.json").exists()

    def reset():
        import shutil

        assert materialise_for_vllm(src, tgt) == made and (made / "model.safetensors").exists()
        assert leftovers(cache) == [], leftovers(cache)
        shutil.rmtree(made)                                  # the next write starts from nothing again

    reset()
    kill_at_every_line(lambda: materialise_for_vllm(src, tgt), [PKG / "atomic.py", PKG / "materialise.py"],
                       after_kill, reset)


@needs_fork
def test_a_regenerate_killed_at_any_line_keeps_whole_shards_and_the_next_run_finishes(tmp_path):
    from peagle_lab.train.data import load_samples, regenerate

    tgt, out = chat_target(), tmp_path / "data"
    prompts = ["hello there", "what now", "and this"]

    def run():
        regenerate(tgt, prompts, out, shard_size=2, max_new_tokens=3, progress=False, engine=CannedEngine())

    run()
    whole = {p.name: p.read_bytes() for p in out.glob("shard-*.pt")}
    (out / "shard-00001.pt").unlink()

    def after_kill(n):
        json.loads((out / "regenerate.json").read_text())
        for p in out.glob("shard-*.pt"):
            assert p.read_bytes() == whole[p.name], f"killed at line {n}: {p.name} is not whole"

    def reset():
        run()                                                # the next run finishes the folder
        assert load_samples(out, vocab_size=50) and leftovers(out) == [] and holder(out) is None
        (out / "shard-00001.pt").unlink()

    kill_at_every_line(run, [PKG / "atomic.py", PKG / "lock.py"], after_kill, reset)


def test_the_next_write_cleans_a_killed_writers_leftovers_and_never_a_live_ones(tmp_path):
    """Leftovers carry their writer's pid: a dead one's are removed (or, an old folder whose destination is gone,
    put back); a live one's and look-alike names stay."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    (tmp_path / "drafter").mkdir()
    for name in (f"drafter.tmp-{dead}-0badc0de", f"drafter.replaced-{dead}-0badc0de", f"other.replaced-{dead}-12345678",
                 f"drafter.tmp-{os.getpid()}-00000000", "drafter.tmp-mine"):
        (tmp_path / name).mkdir()
    (tmp_path / f"gone.replaced-{dead}-abcdef01").mkdir()    # killed between the two renames: the old folder
    (tmp_path / f"gone.replaced-{dead}-abcdef01" / "config.json").write_text("{}")
    clean_leftovers(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["drafter", f"drafter.tmp-{os.getpid()}-00000000", "drafter.tmp-mine",
                                            "gone", "other"]
    assert (tmp_path / "gone" / "config.json").exists()


# ----------------------------------------------------------------------------- damaged data
def test_regenerate_rewrites_a_shard_that_does_not_read_back(tmp_path):
    from peagle_lab.train.data import load_samples, regenerate

    tgt, out = chat_target(), tmp_path / "data"
    prompts = ["one prompt", "two prompts", "three"]
    regenerate(tgt, prompts, out, shard_size=2, max_new_tokens=3, progress=False)
    good = (out / "shard-00000.pt").read_bytes()
    (out / "shard-00000.pt").write_bytes(good[: len(good) // 2])            # truncated (a copy cut short)
    with pytest.warns(UserWarning, match=r"shard-00000.pt does not read back .*writing it again"):
        regenerate(tgt, prompts, out, shard_size=2, max_new_tokens=3, progress=False)
    assert len(load_samples(out, vocab_size=50)) == 3
    bad = torch.load(out / "shard-00001.pt")
    bad[0]["ids"][1] = 999                                                 # a token id past the vocabulary
    torch.save(bad, out / "shard-00001.pt")
    with pytest.warns(UserWarning, match=r"shard-00001.pt does not read back \(conversation 0 holds token id 999"):
        regenerate(tgt, prompts, out, shard_size=2, max_new_tokens=3, progress=False)
    assert len(load_samples(out, vocab_size=50)) == 3


def test_regenerate_all_turns_rewrites_a_damaged_turn_and_the_turns_after_it(tmp_path):
    from peagle_lab.train.data import regenerate_conversations

    tgt, out = chat_target(), tmp_path / "conv"
    convs = [["hi", "more", "again"], ["yo", "next"]]
    regenerate_conversations(tgt, convs, out, shard_size=2, max_new_tokens=3, progress=False)
    before = {p.name: p.read_bytes() for p in out.glob("shard-*.pt")}
    (out / "shard-00000-t0.pt").write_bytes(b"PK\x03\x04 cut")
    later = (out / "shard-00000-t1.pt").stat().st_mtime_ns
    with pytest.warns(UserWarning, match="shard-00000-t0.pt does not read back"):
        regenerate_conversations(tgt, convs, out, shard_size=2, max_new_tokens=3, progress=False)
    assert {p.name: p.read_bytes() for p in out.glob("shard-*.pt")}.keys() == before.keys()
    assert (out / "shard-00000-t1.pt").stat().st_mtime_ns != later           # built on the rewritten turn


def test_a_shard_with_corrupted_token_ids_is_named_by_train_not_an_index_error(tmp_path, monkeypatch, capsys):
    from peagle_lab.target import Target

    tgt = tiny_target(vocab=50)
    monkeypatch.setattr(Target, "load", classmethod(lambda cls, *a, **k: tgt))
    (tmp_path / "data").mkdir()
    samples = [{"ids": torch.arange(20, dtype=torch.int32), "prompt_len": 5} for _ in range(3)]
    samples[1]["ids"][7] = 70000
    torch.save(samples, tmp_path / "data" / "shard-00000.pt")
    line = _last_line(["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--steps", "1"],
                      capsys)
    assert "shard-00000.pt conversation 1 holds token id 70000, outside the target's vocabulary of 50" in line
    assert "regenerate" in line
    samples[1]["ids"][7] = 3
    samples[2] = {"ids": torch.arange(4, dtype=torch.int32), "prompt_len": 9}
    torch.save(samples, tmp_path / "data" / "shard-00000.pt")
    assert "conversation 2 has prompt_len 9, outside its 4 tokens" in _last_line(
        ["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--steps", "1"], capsys)


@pytest.mark.parametrize("line, named", [('{"prompt": ""}', '"prompt" is empty'),
                                         ('{"prompt": " \\n\\t "}', '"prompt" is empty (only whitespace)'),
                                         ('{"turns": ["fine", 3]}', "turn 2 is a number, not a string"),
                                         ('{"turns": [null]}', "turn 1 is null, not a string"),
                                         ('{"turns": ["ok", "   "]}', "turn 2 is empty")])
def test_empty_prompts_and_turns_that_are_not_strings_are_named_by_file_and_line(tmp_path, line, named, capsys):
    from peagle_lab.prompts import PromptFileError, load_conversations, read_jsonl

    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a real question"}\n' + line + "\n")
    for load in (read_jsonl, load_conversations):
        with pytest.raises(PromptFileError, match=f"{path}:2: " + named.replace("(", r"\(").replace(")", r"\)")):
            load(path)
    assert f"p.jsonl:2: {named}" in _exit_2(["bench", "--methods", "ar", "--prompts", str(path)], capsys)


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t"])
def test_generate_refuses_an_empty_prompt_before_the_model_loads(no_model_loads, prompt, capsys):
    line = _exit_2(["generate", prompt], capsys)
    assert "the prompt is empty" in line and "give the model some text" in line


def test_a_drafter_config_without_num_key_value_heads_names_the_key(tmp_path, monkeypatch, capsys):
    from peagle_lab.target import Target

    tgt = tiny_target(vocab=50)
    d = random_drafter(tgt, parallel=False)
    assert d.cfg.num_kv_heads != d.cfg.num_heads
    path = save_drafter(d, tmp_path / "d")
    raw = json.loads((path / "config.json").read_text())
    del raw["num_key_value_heads"]
    (path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=rf'config.json has no num_key_value_heads .* add "num_key_value_heads": '
                                         rf'{d.cfg.num_kv_heads}'):
        load_drafter(path, tgt)
    monkeypatch.setattr(Target, "load", classmethod(lambda cls, *a, **k: tgt))
    line = _exit_2(["generate", "hi", "--method", "eagle", "--drafter", str(path), "--target", "tiny"], capsys)
    assert "num_key_value_heads" in line


def test_damaged_drafter_files_are_named_by_file_and_line_or_key(tmp_path):
    tgt = tiny_target(vocab=50)
    path = save_drafter(random_drafter(tgt, parallel=True), tmp_path / "d")
    good = (path / "config.json").read_text()
    (path / "config.json").write_text(good[: len(good) // 2])               # truncated
    with pytest.raises(ValueError, match=r"d/config.json:\d+: not valid JSON"):
        load_drafter(path, tgt)
    raw = json.loads(good)
    del raw["hidden_size"]
    (path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="config.json has no 'hidden_size'"):
        load_drafter(path, tgt)
    (path / "config.json").write_text(good)
    weights = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(ValueError, match="model.safetensors is truncated or damaged"):
        load_drafter(path, tgt)


# ----------------------------------------------------------------------------- one writer per folder
HOLDER = "import sys, time\nfrom peagle_lab.lock import hold\nheld = hold(sys.argv[1], 'train')\n" \
         "held.__enter__()\nprint('held', flush=True)\ntime.sleep(120)\n"


def _holding(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    proc.stdout.close()
    return proc


def test_a_second_train_or_regenerate_is_refused_at_once_naming_the_holder(tmp_path, no_model_loads, capsys):
    out = tmp_path / "busy"
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi"}\n')
    data = tmp_path / "data"
    data.mkdir()
    torch.save([{"ids": torch.arange(10, dtype=torch.int32), "prompt_len": 3}], data / "shard-00000.pt")
    proc = _holding(out)
    try:
        for argv in (["regenerate", "--prompts", str(tmp_path / "p.jsonl"), "--out", str(out)],
                     ["train", "--data", str(data), "--out", str(out)]):
            line = _exit_2(argv, capsys)
            assert f"{out} is in use by peagle-lab train (pid {proc.pid})" in line and "another folder" in line
        assert holder(out) == {"pid": proc.pid, "command": "train"}
    finally:
        proc.kill()
        proc.wait()
    with hold(out, "regenerate"):                            # its holder was killed: the lock is free
        assert holder(out) == {"pid": os.getpid(), "command": "regenerate"}
        other = subprocess.run([sys.executable, "-c", "from peagle_lab.lock import hold; import sys; "
                                "hold(sys.argv[1], 'x').__enter__()", str(out)], cwd=ROOT, capture_output=True,
                               text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert f"FolderInUse: {out} is in use by peagle-lab regenerate (pid {os.getpid()})" in other.stderr
    assert holder(out) is None


def test_a_stale_lock_is_taken_over_and_its_runs_leftovers_cleaned(tmp_path):
    out = tmp_path / "run"
    proc = _holding(out)
    (out / "drafter").mkdir()
    (out / f"drafter.replaced-{proc.pid}-0123abcd").mkdir()                # what its kill will leave
    (out / f"checkpoint.pt.tmp-{proc.pid}-0123abcd").write_bytes(b"\0" * 64)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((out / ".peagle-lab.lock").read_text())["pid"] == proc.pid   # the stale record is still there
    with hold(out, "train"):
        assert sorted(os.listdir(out)) == [".peagle-lab.lock", "drafter"]


def test_only_one_of_several_processes_asking_at_once_gets_the_folder(tmp_path):
    script = ("import sys, time\nfrom peagle_lab.lock import FolderInUse, hold\nwhile time.time() < float(sys.argv[2]):"
              "\n    pass\ntry:\n    with hold(sys.argv[1], 'train'):\n        print('got', flush=True)\n"
              "        time.sleep(1.5)\nexcept FolderInUse:\n    print('refused')\n")
    start = str(time.time() + 2.0)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "out"), start], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT) for _ in range(4)]
    said = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert said == ["got", "refused", "refused", "refused"], said


# ----------------------------------------------------------------------------- a device the machine lacks
DEVICE_COMMANDS = [["generate", "hi"], ["bench"], ["vllm-bench"], ["regenerate", "--out", "x"],
                   ["train", "--data", "d", "--out", "o"], ["check", "somewhere"], ["eval", "peagle-smollm2"]]


@pytest.mark.parametrize("argv", DEVICE_COMMANDS, ids=[a[0] for a in DEVICE_COMMANDS])
def test_every_command_refuses_a_cuda_device_without_a_gpu_the_same_way(argv, no_model_loads, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = _exit_2([*argv, "--device", "cuda"], capsys)
    assert line == (f"peagle-lab {argv[0]}: error: --device cuda: torch sees no CUDA GPU here (use --device cpu, or "
                    f"auto) (see peagle-lab {argv[0]} --help)")


def test_a_gpu_index_past_the_gpus_there_are_is_refused(monkeypatch):
    from peagle_lab.device import device_problem

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device_problem("cuda:1") is None
    assert device_problem("cuda:2") == "--device cuda:2: this machine has 2 CUDA GPUs (cuda:0 to cuda:1)"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_vllm_bench_on_cuda_without_a_gpu_is_refused_in_about_a_second():
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "peagle_lab", "vllm-bench", "--device", "cuda"], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - t0
    assert done.returncode == 2 and "torch sees no CUDA GPU" in done.stderr and "Traceback" not in done.stderr
    assert seconds < 5, seconds                             # ~0.3 s on an idle machine: torch is never imported


# ----------------------------------------------------------------------------- full or unwritable destinations
def test_a_full_disk_during_an_export_is_one_line_and_the_old_drafter_stays(tmp_path, monkeypatch, capsys):
    import peagle_lab.checkpoint as checkpoint
    from peagle_lab.target import Target

    tgt = tiny_target(vocab=50)
    old = save_drafter(random_drafter(tgt, parallel=True, seed=1), tmp_path / "out")
    before = {p.name: p.read_bytes() for p in old.iterdir()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "save_file", full)
    with pytest.raises(Unwritable, match=rf"no space left on {tmp_path}.*free space there or write elsewhere"):
        save_drafter(random_drafter(tgt, parallel=True, seed=2), old)
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before and leftovers(tmp_path) == []
    monkeypatch.setattr(Target, "load", classmethod(lambda cls, *a, **k: tgt))
    monkeypatch.setattr(checkpoint, "save_file", lambda *a, **k: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    drafter = tmp_path / "src"
    import shutil

    shutil.copytree(old, drafter)
    line = _exit_2(["export-speculators", str(drafter), str(old), "--target", "tiny"], capsys)
    assert line.startswith("peagle-lab export-speculators: no space left on ") and "nothing already there" in line
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before


def test_a_full_disk_during_a_checkpoint_keeps_the_last_one(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    torch.save({"step": 1}, path)

    def full(obj, f, *a, **k):
        Path(f).write_bytes(b"PK half")
        raise RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(Unwritable, match="no space left on .* while writing checkpoint.pt"):
        with atomic_file(path) as tmp:
            torch.save({"step": 2}, tmp)
    monkeypatch.undo()
    assert torch.load(path) == {"step": 1} and os.listdir(tmp_path) == ["checkpoint.pt"]


def test_an_unwritable_cache_or_destination_names_the_place_and_the_fix(tmp_path, monkeypatch):
    from peagle_lab.assets import cache_dir

    real_mkdir = Path.mkdir

    def forbidden(self, *a, **k):
        if str(self).startswith(str(tmp_path / "cache")):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setenv("PEAGLE_CACHE", str(tmp_path / "cache" / "peagle"))
    monkeypatch.setattr(Path, "mkdir", forbidden)
    with pytest.raises(Unwritable, match=rf"{tmp_path}: permission denied while writing peagle: .*PEAGLE_CACHE"):
        cache_dir()
    monkeypatch.undo()
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    if os.access(tmp_path / "ro", os.W_OK):                 # root writes anywhere: simulate what a user would meet
        monkeypatch.setattr(os, "mkdir", lambda *a, **k: (_ for _ in ()).throw(
            PermissionError(errno.EACCES, "Permission denied")))
    with pytest.raises(Unwritable, match=r"ro: permission denied while writing d: choose a folder"):
        save_drafter(random_drafter(tiny_target(vocab=50), parallel=False), tmp_path / "ro" / "d")
    assert isinstance(Unwritable(errno.ENOSPC, "x"), ValueError)   # the command line prints it as one line


# ----------------------------------------------------------------------------- interrupts
BLOCKED = r"""
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)   # as a terminal gives, even when started in the background
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_DFL)
import peagle_lab.cli as cli
from peagle_lab.atomic import atomic_file
from peagle_lab.lock import hold
folder, what = Path(sys.argv[1]), sys.argv[2]


def blocked(args):
    with hold(folder, "info"), atomic_file(folder / "result.json") as tmp:
        tmp.write_text("half of it")
        if what == "server":
            from peagle_lab.serving.server import ServerProcess, free_port
            slow = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
            server = ServerProcess([sys.executable, "-c", slow], free_port(), "m", startup_timeout=300)
            (folder / "started").write_text("")
            server.start()                                  # a vLLM that takes its time to start and to stop
        (folder / "started").write_text("")
        time.sleep(120)


cli.cmd_info = blocked
cli.main(["info"])
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize("what", ["command", "server"])
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupt_ends_a_command_in_seconds_with_one_line_and_no_orphans(tmp_path, how, what):
    from test_nothing_lost import alive_in_group

    proc = subprocess.Popen([sys.executable, "-c", BLOCKED, str(tmp_path), what], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0 if what == "server" else 0.2)           # the server's process is up, waiting to be healthy
    children = [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
                if p.read_text().rsplit(")", 1)[1].split()[1] == str(proc.pid)]
    t0 = time.monotonic()
    proc.send_signal(getattr(signal, how))
    try:
        err = proc.communicate(timeout=8)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - t0 < 8
    assert proc.returncode == 128 + getattr(signal, how), (proc.returncode, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == \
        "peagle-lab info: interrupted. Nothing was half-written.", err
    assert not (tmp_path / "result.json").exists() and leftovers(tmp_path) == [] and holder(tmp_path) is None
    for child in children:                                  # the server's group, and anything else it started
        assert not alive_in_group(child), f"process group {child} outlived the command"
