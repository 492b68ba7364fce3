"""Nothing a user has is lost: exports never delete files peagle-lab did not write, a resumed run or a rerun of
regeneration refuses work made from something else, and no server outlives the process that started it.

Most oracles here need no real model: a tiny target made in code, a fake server script standing in for vLLM.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import random_drafter, tiny_target
from peagle_lab.atomic import MARKER, DestinationInUse, atomic_dir, check_replaceable
from peagle_lab.checkpoint import export_speculators, load_drafter, save_drafter
from peagle_lab.cli import main
from peagle_lab.train.data import (SETTINGS_FILE, RegenerationMismatch, Sample, claim_output, load_samples,
                                   regenerate, regenerate_conversations, shard_plan, target_identity)
from peagle_lab.train.trainer import ResumeMismatch, TrainConfig, Trainer
from peagle_lab.train.vocab import build_draft_vocab, token_counts


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes): the oracle for "nothing changed"."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def user_folder(path: Path) -> dict[str, bytes]:
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("my notes, kept here on purpose\n")
    (path / "sub").mkdir()
    (path / "sub" / "data.bin").write_bytes(os.urandom(256))
    return snapshot(path)


# ----------------------------------------------------------------------------- exports
def test_export_refuses_a_folder_of_the_users_files_and_changes_nothing(tmp_path):
    tgt = tiny_target(vocab=50)
    d = random_drafter(tgt, parallel=True)
    dest = tmp_path / "keep"
    before = user_folder(dest)
    with pytest.raises(DestinationInUse, match=rf"{dest}.*overwrite=True"):
        save_drafter(d, dest)
    with pytest.raises(DestinationInUse, match=rf"{dest}.*overwrite=True"):
        export_speculators(d, dest, verifier_name="tiny", verifier_architectures=["LlamaForCausalLM"])
    assert snapshot(dest) == before                                  # byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]    # no temp folder left beside it
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    with pytest.raises(DestinationInUse, match="is a file"):
        save_drafter(d, a_file)
    assert a_file.read_text() == "not a folder"
    save_drafter(d, dest, overwrite=True)                            # asked for: replaced, as a whole
    assert sorted(snapshot(dest)) == [MARKER, "config.json", "model.safetensors"]


def test_export_replaces_its_own_folder_atomically_and_keeps_every_sibling(tmp_path):
    tgt = tiny_target(vocab=50)
    empty = tmp_path / "empty"
    empty.mkdir()
    save_drafter(random_drafter(tgt, parallel=False), empty)          # an empty folder holds nothing to lose
    dest = save_drafter(random_drafter(tgt, parallel=False, seed=1), tmp_path / "d")
    marker = json.loads((dest / MARKER).read_text())
    assert marker["written_by"].startswith("peagle-lab") and marker["written_at"]
    siblings = {name: user_folder(tmp_path / name) for name in ("d.old", "d.tmp-mine")}
    newer = random_drafter(tgt, parallel=False, seed=2)
    save_drafter(newer, dest)                                         # ours (marker): replaced
    back = load_drafter(dest, tgt)
    assert all(torch.equal(back.state_dict()[k], newer.state_dict()[k].cpu()) for k in ("fc.weight", "d2t"))
    for name, files in siblings.items():
        assert snapshot(tmp_path / name) == files, name               # <dest>.old and the like: untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "d.old", "d.tmp-mine", "empty"]


def test_atomic_dir_checks_again_before_the_swap(tmp_path):
    dest = tmp_path / "out"
    with pytest.raises(DestinationInUse):
        with atomic_dir(dest) as tmp:
            (tmp / "x").write_text("new")
            before = user_folder(dest)                                # someone fills it while we write
    assert snapshot(dest) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    check_replaceable(tmp_path / "nowhere")                           # a new path: fine
    with pytest.raises(DestinationInUse, match="move it away first"):
        check_replaceable(dest, flag=None)


def test_the_export_marker_changes_neither_loading_nor_the_materialised_cache_name(tmp_path, monkeypatch):
    from peagle_lab.materialise import _digest, embedding_fingerprint

    monkeypatch.setenv("PEAGLE_CACHE", str(tmp_path / "cache"))
    tgt = tiny_target(vocab=50)
    path = save_drafter(random_drafter(tgt, parallel=True), tmp_path / "d")
    load_drafter(path, tgt)
    fp = embedding_fingerprint(tgt.model.get_input_embeddings().weight)
    first = _digest(path, fp)
    (path / MARKER).write_text('{"written_at": "another time"}')
    assert _digest(path, fp) == first                                 # the same drafter, the same cache folder


def test_cli_exports_refuse_the_users_folder_before_any_work(tmp_path, monkeypatch, capsys):
    import peagle_lab.target as target_module

    def no_load(*a, **k):
        raise AssertionError("the destination must be refused before the target loads")

    monkeypatch.setattr(target_module.Target, "load", no_load)
    data = _shards(tmp_path / "data", _samples(0))
    drafter = save_drafter(random_drafter(tiny_target(vocab=50), parallel=True), tmp_path / "drafter")
    dest = tmp_path / "mine"
    before = user_folder(dest)
    with pytest.raises(SystemExit, match=rf"peagle-lab train: {dest}.*--overwrite"):
        main(["train", "--data", str(data), "--out", str(tmp_path / "run"), "--export", str(dest)])
    with pytest.raises(SystemExit, match=rf"peagle-lab export-speculators: {dest}.*--overwrite"):
        main(["export-speculators", str(drafter), str(dest)])
    assert snapshot(dest) == before


def test_an_export_never_replaces_what_its_own_command_reads(tmp_path, monkeypatch, capsys):
    """export-speculators into the drafter it converts (ours, marked) and train --export over its own run folder
    are refused at once (exit 2, one line), before any model loads; the drafter stays byte for byte."""
    import peagle_lab.target as target_module

    monkeypatch.setattr(target_module.Target, "load", lambda *a, **k: pytest.fail("a model loaded"))
    drafter = save_drafter(random_drafter(tiny_target(vocab=50), parallel=True), tmp_path / "drafter")
    before = snapshot(drafter)
    data = _shards(tmp_path / "data", _samples(0))
    for argv, named in ((["export-speculators", str(drafter), str(drafter)], "drafter folder"),
                        (["export-speculators", str(drafter), str(tmp_path)], "drafter folder"),
                        (["train", "--data", str(data), "--out", str(tmp_path / "x" / "run"), "--export",
                          str(tmp_path / "x")], "checkpoint.pt")):
        with pytest.raises(SystemExit) as err:
            main(argv)
        line = capsys.readouterr().err.strip()
        assert err.value.code == 2 and len(line.splitlines()) == 1 and named in line and "--overwrite" in line
    assert snapshot(drafter) == before


# ----------------------------------------------------------------------------- resume
def _samples(low: int, n: int = 12, seed: int = 0) -> list[Sample]:
    """Runs of 25 token ids in [low, low + 25): two such sets share no token."""
    g = torch.Generator().manual_seed(seed)
    return [Sample(low + (int(torch.randint(0, 25, (1,), generator=g)) + (1 + i % 3) * torch.arange(30)) % 25, 5)
            for i in range(n)]


def _trainer(out, samples, tgt, ids=None, **kw):
    cfg = TrainConfig(method="peagle", num_layers=1, draft_vocab_size=16, max_depth=2, steps=4, batch_size=3,
                      max_len=30, warmup_steps=1, checkpoint_every=2, seed=1, layout="padded", **kw)
    if ids is None:
        ids, _ = build_draft_vocab(token_counts(samples, tgt.vocab_size), 16)
    return Trainer(tgt, samples, cfg, out, ids)


def test_resume_refuses_other_data_vocabulary_or_target_and_keeps_the_checkpoint(tmp_path):
    tgt, a, b = tiny_target(vocab=50), _samples(0), _samples(25)
    _trainer(tmp_path, a, tgt).run(progress=False, stop_after=2)
    ckpt = tmp_path / "checkpoint.pt"
    before = ckpt.read_bytes()
    with pytest.raises(ResumeMismatch, match=r"trained on data.*fingerprint.*draft vocabulary.*0 of 16 ids shared"):
        _trainer(tmp_path, b, tgt)                                    # refused at once, before any step
    ids_a, _ = build_draft_vocab(token_counts(a, 50), 16)
    with pytest.raises(ResumeMismatch, match="trained on data") as err:
        _trainer(tmp_path, b, tgt, ids=ids_a)                         # same vocabulary, other conversations
    assert "draft vocabulary" not in str(err.value)
    with pytest.raises(ResumeMismatch, match=r"another target.*weights"):
        _trainer(tmp_path, a, tiny_target(vocab=50, seed=1))
    with pytest.raises(ResumeMismatch, match=r"another training config \(differs in lr \S+ there, 0.005 now\)"):
        _trainer(tmp_path, a, tgt, lr=5e-3)
    assert ckpt.read_bytes() == before
    resumed = _trainer(tmp_path, a, tgt)                              # the same data and target resume
    resumed.run(progress=False)
    assert resumed.step == 4 and [r["step"] for r in resumed.history] == [1, 2, 3, 4]


def test_a_checkpoint_from_before_the_record_resumes_with_a_warning(tmp_path):
    tgt, a = tiny_target(vocab=50), _samples(0)
    _trainer(tmp_path, a, tgt).run(progress=False, stop_after=2)
    ckpt = tmp_path / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=False)
    del state["provenance"]                                           # as an older peagle-lab wrote it
    torch.save(state, ckpt)
    with pytest.warns(UserWarning, match="records neither its data nor its target"):
        t = _trainer(tmp_path, a, tgt)
        t.run(progress=False)
    assert t.step == 4
    torch.save(state, ckpt)
    with pytest.warns(UserWarning, match="records neither"):
        with pytest.raises(ResumeMismatch, match="draft vocabulary"):    # its draft vocabulary is still compared
            _trainer(tmp_path, _samples(25), tgt)


def _shards(folder: Path, samples: list[Sample]) -> Path:
    folder.mkdir()
    torch.save([{"ids": s.ids.to(torch.int32), "prompt_len": s.prompt_len} for s in samples], folder / "shard-00000.pt")
    return folder


def test_cli_resume_on_other_data_is_refused_and_coverage_is_the_trained_vocabularys(tmp_path, monkeypatch, capsys):
    import peagle_lab.target as target_module

    tgt = tiny_target(vocab=50)
    monkeypatch.setattr(target_module.Target, "load", lambda *a, **k: tgt)
    data_a, data_b = _shards(tmp_path / "a", _samples(0)), _shards(tmp_path / "b", _samples(25))
    run = tmp_path / "run"
    argv = ["train", "--out", str(run), "--method", "peagle", "--num-layers", "1", "--draft-vocab-size", "16",
            "--steps", "4", "--batch-size", "3", "--max-len", "30", "--device", "cpu", "--set", "max_depth=2",
            "--set", "warmup_steps=1", "--set", "checkpoint_every=2", "--set", "export_dtype=float32",
            "--set", "layout=padded"]
    assert main(argv + ["--data", str(data_a), "--stop-after", "2"]) == 0
    before = (run / "checkpoint.pt").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit, match=rf"peagle-lab train: .*trained on data {data_a}.*this run's data {data_b}") \
            as stop:
        main(argv + ["--data", str(data_b)])
    said = capsys.readouterr().err
    assert stop.value.code == 2 and said.strip().splitlines()[-1].startswith("peagle-lab train: ")   # bad input: 2
    assert "covers" not in said                                       # no coverage of a vocabulary it never trains
    assert (run / "checkpoint.pt").read_bytes() == before
    assert main(argv + ["--data", str(data_a)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    counts = token_counts(load_samples(data_a), 50)
    trained = torch.load(run / "checkpoint.pt", weights_only=False)["draft_ids"]
    assert result["steps"] == 4
    assert result["draft_vocab_coverage"] == pytest.approx(float(counts[trained].sum() / counts.sum()))
    export = run / "drafter"
    assert (export / MARKER).exists()
    assert main(argv + ["--data", str(data_a)]) == 0                  # its own export: replaced without a flag


# ----------------------------------------------------------------------------- regeneration
SETTINGS = {"format": 1, "engine": "hf", "all_turns": False, "max_new_tokens": 8, "max_prompt_tokens": 64,
            "shard_size": 2, "batch_size": 2, "temperature": 0.0, "seed": 0, "dtype": "float32",
            "target": {"name": "t", "vocab_size": 50, "hidden_size": 32, "num_layers": 5, "aux_layer_ids": [2, 2, 2],
                       "weights": "abc"}}


def test_claim_output_names_every_difference_and_writes_nothing(tmp_path):
    prompts = ["a", "b", "c"]
    claim_output(tmp_path, SETTINGS, shard_plan(prompts, 2), about={"prompts": "sharegpt", "skip_prompts": 0})
    for name in ("shard-00000.pt", "shard-00001.pt"):
        (tmp_path / name).write_bytes(os.urandom(64))                  # stand-ins for written shards
    before = snapshot(tmp_path)
    other = {**SETTINGS, "max_new_tokens": 16, "seed": 1, "temperature": 0.7,
             "target": {**SETTINGS["target"], "name": "u", "weights": "def"}}
    with pytest.raises(RegenerationMismatch, match=r"max_new_tokens 8 vs 16; seed 0 vs 1; temperature 0.0 vs 0.7; "
                                                   r"target t vs u \(weights\).*new --out"):
        claim_output(tmp_path, other, shard_plan(prompts, 2))
    with pytest.raises(RegenerationMismatch, match=r"shard-00000 answers other prompts.*'skip_prompts': 0.*'skip_pr"):
        claim_output(tmp_path, SETTINGS, shard_plan(["x", "b", "c"], 2),
                     about={"prompts": "sharegpt", "skip_prompts": 9})
    with pytest.raises(RegenerationMismatch, match=r"shard-00001 answers other prompts \(1 recorded, 2 now"):
        claim_output(tmp_path, SETTINGS, shard_plan(prompts + ["d"], 2))    # the short last shard would stay short
    hot = {**SETTINGS, "temperature": 0.7}
    claim_output(tmp_path / "hot", hot, shard_plan(prompts, 2))
    (tmp_path / "hot" / "shard-00000.pt").write_bytes(b"replies")
    with pytest.raises(RegenerationMismatch, match="batch_size 2 vs 4"):    # sampling: the seeds follow the batches
        claim_output(tmp_path / "hot", {**hot, "batch_size": 4}, shard_plan(prompts, 2))
    (tmp_path / "shard-00007-t0.pt").write_bytes(b"from elsewhere")
    with pytest.raises(RegenerationMismatch, match="shard-00007 is on disk but was not written"):
        claim_output(tmp_path, SETTINGS, shard_plan(prompts, 2))
    (tmp_path / "shard-00007-t0.pt").unlink()
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("hot/")} == before
    claim_output(tmp_path, {**SETTINGS, "batch_size": 4}, shard_plan(prompts, 2))   # greedy: same replies, resumes
    claim_output(tmp_path, SETTINGS, shard_plan(["a", "b"], 2))                    # fewer prompts: shards agree


def test_a_folder_from_before_the_record_is_kept_with_a_warning(tmp_path):
    (tmp_path / "shard-00000.pt").write_bytes(b"old")
    with pytest.warns(UserWarning, match="no regenerate.json"):
        claim_output(tmp_path, SETTINGS, shard_plan(["a"], 2))
    assert (tmp_path / "shard-00000.pt").read_bytes() == b"old"
    with pytest.raises(RegenerationMismatch, match="seed 0 vs 5"):      # from now on the folder knows its settings
        claim_output(tmp_path, {**SETTINGS, "seed": 5}, shard_plan(["a"], 2))


def test_target_identity_of_a_folder_is_the_loaded_targets(tmp_path):
    tgt = tiny_target(vocab=50)
    tgt.model.save_pretrained(tmp_path / "t")
    loaded, folder = target_identity(tgt), target_identity(tmp_path / "t")
    assert {k: v for k, v in loaded.items() if k != "name"} == {k: v for k, v in folder.items() if k != "name"}
    assert target_identity(tiny_target(vocab=50, seed=1))["weights"] != loaded["weights"]


def test_regenerate_reruns_with_other_settings_are_refused_and_keep_the_shards(target, tmp_path):
    prompts = ["Say yes.", "Say no."]
    kw = dict(max_new_tokens=3, batch_size=2, shard_size=1, progress=False)
    regenerate(target, prompts, tmp_path, **kw)
    before = snapshot(tmp_path)
    for change, named in ((dict(max_new_tokens=4), "max_new_tokens 3 vs 4"), (dict(temperature=0.7), "temperature"),
                          (dict(seed=3), "seed 0 vs 3"), (dict(max_prompt_tokens=100), "max_prompt_tokens 384 vs 100")):
        with pytest.raises(RegenerationMismatch, match=named):
            regenerate(target, prompts, tmp_path, **{**kw, **change})
    with pytest.raises(RegenerationMismatch, match="shard-00000 answers other prompts"):
        regenerate(target, ["Say maybe.", "Say no."], tmp_path, **kw)
    assert snapshot(tmp_path) == before
    regenerate(target, prompts, tmp_path, **kw)                         # the same settings resume: nothing redone
    assert snapshot(tmp_path) == before
    regenerate(target, prompts + ["Count to two."], tmp_path, **kw)     # more prompts: one new shard
    after = snapshot(tmp_path)
    assert {k: after[k] for k in before if k != SETTINGS_FILE} == {k: before[k] for k in before if k != SETTINGS_FILE}
    assert "shard-00002.pt" in after and len(load_samples(tmp_path)) == 3


def test_regenerate_all_turns_never_builds_on_another_runs_replies(target, tmp_path, monkeypatch):
    import peagle_lab.target as target_module

    convs = [["Say hi.", "Now say bye."]]
    regenerate_conversations(target, convs, tmp_path, max_new_tokens=3, batch_size=2, progress=False)
    before = snapshot(tmp_path)
    assert {"shard-00000-t0.pt", "shard-00000-t1.pt"} <= set(before)
    (tmp_path / "shard-00000-t1.pt").unlink()                          # interrupted after turn 0
    with pytest.raises(RegenerationMismatch, match="max_new_tokens 3 vs 5"):
        regenerate_conversations(target, convs, tmp_path, max_new_tokens=5, batch_size=2, progress=False)
    with pytest.raises(RegenerationMismatch, match="all_turns True vs False"):
        regenerate(target, ["Say hi."], tmp_path, max_new_tokens=3, batch_size=2, progress=False)
    assert not (tmp_path / "shard-00000-t1.pt").exists()
    monkeypatch.setattr(target_module.Target, "load", lambda *a, **k: target)
    out = tmp_path / "cli"
    argv = ["regenerate", "--prompts", "mt-bench", "--num-prompts", "1", "--max-new-tokens", "2", "--out", str(out)]
    assert main(argv) == 0
    with pytest.raises(SystemExit, match=r"peagle-lab regenerate: .*skip_prompts.*: 0.*1.*new --out") as stop:
        main(argv + ["--skip-prompts", "1"])
    assert stop.value.code == 2                                       # a refusal, as argparse's: exit 2


# ----------------------------------------------------------------------------- serving
FAKE_SERVER = r"""
import http.server, json, signal, subprocess, sys
port, model = int(sys.argv[1]), sys.argv[2]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) if "--child" in sys.argv else None


def leave(*_):
    if child is not None:
        child.terminate()
        child.wait()
    sys.exit(0)


signal.signal(signal.SIGTERM, leave)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": model}]}).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body if self.path == "/v1/models" else b"ok")

    def log_message(self, *a):
        pass


http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""

PARENT = r"""
import signal, sys, time
from peagle_lab.serving.server import ServerProcess, free_port
for sig in (signal.SIGTERM, signal.SIGHUP):   # started under nohup, a parent inherits SIGHUP ignored: the
    signal.signal(sig, signal.SIG_DFL)         # test wants the signal's default ending, as a terminal gives
fake, pid_file, mode = sys.argv[1:4]
port = free_port()
server = ServerProcess([sys.executable, fake, str(port), "m", "--child"], port, "m", startup_timeout=60).start()
open(pid_file, "w").write(str(server.pgid))
if mode == "exit":
    sys.stdin.readline()                 # exit when told, without stopping the server: atexit must
    sys.exit(0)
time.sleep(600)
"""


def alive_in_group(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (zombies waiting to be reaped do not count)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _wait_for(check, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def _answers(port: int) -> bool:
    """True once something on ``port`` answers ``/v1/models``."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def fake_server(tmp_path):
    path = tmp_path / "fake_server.py"
    path.write_text(FAKE_SERVER)
    return path


def test_another_process_on_the_port_is_not_taken_for_our_server(fake_server):
    from peagle_lab.serving.server import ServerProcess, free_port

    port = free_port()
    foreign = subprocess.Popen([sys.executable, str(fake_server), str(port), "m"])
    try:
        assert _wait_for(lambda: _answers(port), 30), "the foreign server never answered"   # the port is taken
        died = ServerProcess([sys.executable, "-c", "import sys; sys.exit(3)"], port, "m", startup_timeout=30)
        with pytest.raises(RuntimeError, match="exited with code 3"):   # the port answers, our process is dead
            died.start()
        assert died.health_problem().startswith("the server is not running")
        idle = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], port, "ours", startup_timeout=3)
        with pytest.raises(TimeoutError, match=rf"not 'ours': another process holds port {port}"):
            idle.start()                                                # alive, but the answer is someone else's
        assert idle.proc is None and not alive_in_group(idle.pgid)      # and it was stopped, group and all
        if Path("/proc/net/tcp").exists():                              # the same model name, someone else's socket
            quiet = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], port, "m", startup_timeout=3)
            with pytest.raises(TimeoutError, match=rf"no process of the server's group .* listens on port {port}"):
                quiet.start()
    finally:
        foreign.terminate()
        foreign.wait()


def test_our_server_is_healthy_until_its_process_dies(fake_server):
    from peagle_lab.serving.server import ServerProcess, free_port

    port = free_port()
    with ServerProcess([sys.executable, str(fake_server), str(port), "m"], port, "m", startup_timeout=30) as server:
        assert server.healthy()
        server.proc.kill()
        server.proc.wait()
        assert "exited with code" in server.health_problem()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "exit"])
def test_no_server_outlives_its_parent(fake_server, tmp_path, how):
    script, pid_file = tmp_path / "parent.py", tmp_path / "pgid"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(fake_server), str(pid_file), how],
                              cwd=Path(__file__).resolve().parents[1], stdin=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120), "the parent never started a server"
        pgid = int(pid_file.read_text())
        assert _wait_for(lambda: len(alive_in_group(pgid)) == 2, 60)  # the server and its child
        if how == "exit":
            parent.stdin.write("go\n")
            parent.stdin.flush()
        else:
            parent.send_signal(getattr(signal, how))
        code = parent.wait(timeout=60)
        assert code == (0 if how == "exit" else -getattr(signal, how))  # the signal's own ending, as without us
        assert _wait_for(lambda: not alive_in_group(pgid), 20), alive_in_group(pgid)
    finally:
        parent.kill()
        parent.wait()


def test_an_export_never_replaces_the_target_the_data_or_the_drafter_it_starts_from(tmp_path, monkeypatch, capsys):
    """train --export onto its --init-from or --data, export-speculators onto its --target: refused (exit 2, one
    line naming the flag) before any model loads, each folder byte for byte as it was."""
    import peagle_lab.target as target_module

    monkeypatch.setattr(target_module.Target, "load", lambda *a, **k: pytest.fail("a model loaded"))
    drafter = save_drafter(random_drafter(tiny_target(vocab=50), parallel=True), tmp_path / "drafter")
    data = _shards(tmp_path / "data", _samples(0))
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text("{}")
    before = {p: snapshot(p) for p in (drafter, data, target)}
    for argv, named in ((["train", "--data", str(data), "--out", str(tmp_path / "run"), "--init-from", str(drafter),
                          "--export", str(drafter)], "--init-from"),
                        (["train", "--data", str(data), "--out", str(tmp_path / "run"), "--export", str(data)],
                         "--data"),
                        (["export-speculators", str(drafter), str(target), "--target", str(target)], "--target")):
        with pytest.raises(SystemExit) as err:
            main(argv)
        line = capsys.readouterr().err.strip()
        assert err.value.code == 2 and len(line.splitlines()) == 1 and named in line and "--overwrite" in line
    assert {p: snapshot(p) for p in before} == before


def test_a_drafter_export_never_replaces_another_kind_of_folder_peagle_lab_wrote(tmp_path):
    """The marker names what wrote a folder: a drafter replaces a drafter, but a converted target or a materialised
    drafter stays unless overwrite is given; nothing is changed by the refusal."""
    from peagle_lab.atomic import DestinationInUse, atomic_dir, written_as

    drafter = random_drafter(tiny_target(vocab=50), parallel=True)
    with atomic_dir(tmp_path / "target", note="target converted from GGUF") as tmp:
        (tmp / "config.json").write_text("{}")
    assert written_as(tmp_path / "target") == "target converted"
    before = snapshot(tmp_path / "target")
    with pytest.raises(DestinationInUse, match="target converted peagle-lab wrote, not a drafter checkpoint"):
        save_drafter(drafter, tmp_path / "target")
    assert snapshot(tmp_path / "target") == before
    save_drafter(drafter, tmp_path / "target", overwrite=True)                        # said so: replaced
    assert written_as(tmp_path / "target") == "drafter checkpoint"
    save_drafter(drafter, tmp_path / "d")
    save_drafter(drafter, tmp_path / "d")                                             # a drafter over a drafter
    assert written_as(tmp_path / "d") == "drafter checkpoint"
