"""Bad input is refused, clearly and early (issue 33): every flag out of range, every missing folder and every
impossible combination exits 2 with one line naming the flag and what it accepts, before any model loads;
`check` names what is broken in a damaged drafter folder; every engine refuses a request longer than the
target's context; a refusal from the library reaches the shell as one line, not a traceback."""
import json
import os
import shutil

import pytest
import torch

from helpers import random_drafter, tiny_target
from peagle_lab.cli import main
from peagle_lab.drafters_registry import shipped

# (argv, the flag named, the range named). One case per flag of every command that takes a number.
RANGES = [
    (["generate", "hi", "--temperature", "-1"], "--temperature", ">= 0"),
    (["generate", "hi", "--temperature", "nan"], "--temperature", ">= 0"),
    (["generate", "hi", "--temperature", "warm"], "--temperature", ">= 0"),
    (["generate", "hi", "--top-p", "0"], "--top-p", "(0, 1]"),
    (["generate", "hi", "--top-p", "1.5"], "--top-p", "(0, 1]"),
    (["generate", "hi", "--max-new-tokens", "-5"], "--max-new-tokens", ">= 1"),
    (["generate", "hi", "--k", "0"], "--k", "[1, 128]"),
    (["generate", "hi", "--seed", "-1"], "--seed", "[0, 9223372036854775807]"),
    (["bench", "--num-prompts", "-3"], "--num-prompts", ">= 1"),
    (["bench", "--max-new-tokens", "-5"], "--max-new-tokens", ">= 1"),
    (["bench", "--k", "0"], "--k", "[1, 128]"),
    (["bench", "--k", "3,0,7"], "--k", "[1, 128]"),
    (["bench", "--k", "3,x"], "--k", "[1, 128]"),
    (["bench", "--batch-size", "0"], "--batch-size", ">= 1"),
    (["bench", "--temperature", "-0.5"], "--temperature", ">= 0"),
    (["bench", "--time-budget", "0"], "--time-budget", "> 0"),
    (["bench", "--hbm-gbps", "-1"], "--hbm-gbps", "> 0"),
    (["vllm-bench", "--dry-run", "--k", "-1"], "--k", "[1, 128]"),
    (["vllm-bench", "--dry-run", "--concurrency", "0"], "--concurrency", ">= 1"),
    (["vllm-bench", "--dry-run", "--num-prompts", "0"], "--num-prompts", ">= 1"),
    (["vllm-bench", "--dry-run", "--max-model-len", "0"], "--max-model-len", ">= 1"),
    (["vllm-bench", "--dry-run", "--gpu-memory-utilization", "0"], "--gpu-memory-utilization", "(0, 1]"),
    (["vllm-bench", "--dry-run", "--gpu-memory-utilization", "1.2"], "--gpu-memory-utilization", "(0, 1]"),
    (["regenerate", "--out", "x", "--num-prompts", "-3"], "--num-prompts", ">= 1"),
    (["regenerate", "--out", "x", "--skip-prompts", "-1"], "--skip-prompts", ">= 0"),
    (["regenerate", "--out", "x", "--max-prompt-tokens", "0"], "--max-prompt-tokens", ">= 1"),
    (["regenerate", "--out", "x", "--max-new-tokens", "0"], "--max-new-tokens", ">= 1"),
    (["regenerate", "--out", "x", "--batch-size", "0"], "--batch-size", ">= 1"),
    (["regenerate", "--out", "x", "--shard-size", "0"], "--shard-size", ">= 1"),
    (["regenerate", "--out", "x", "--temperature", "-1"], "--temperature", ">= 0"),
    (["train", "--data", "d", "--out", "o", "--steps", "0"], "--steps", ">= 1"),
    (["train", "--data", "d", "--out", "o", "--set", "checkpoint_every=0"], "--set",
     "checkpoint_every=0: expected a whole number >= 1"),
    (["train", "--data", "d", "--out", "o", "--lr", "0"], "--lr", "> 0"),
    (["train", "--data", "d", "--out", "o", "--set", "cod_ratio=1.5"], "--set", "a number in [0, 1]"),
    (["train", "--data", "d", "--out", "o", "--set", "cod_ratio=-0.1"], "--set", "a number in [0, 1]"),
    (["train", "--data", "d", "--out", "o", "--set", "cod_ratio=nan"], "--set", "a number in [0, 1]"),
    (["train", "--data", "d", "--out", "o", "--batch-size", "0"], "--batch-size", ">= 1"),
    (["train", "--data", "d", "--out", "o", "--num-layers", "0"], "--num-layers", ">= 1"),
    (["train", "--data", "d", "--out", "o", "--set", "intermediate_size=0"], "--set", ">= 1 (or none)"),
    (["train", "--data", "d", "--out", "o", "--draft-vocab-size", "0"], "--draft-vocab-size", ">= 1"),
    (["train", "--data", "d", "--out", "o", "--set", "max_depth=0"], "--set", "[1, 128]"),
    (["train", "--data", "d", "--out", "o", "--max-len", "1"], "--max-len", ">= 2"),
    (["train", "--data", "d", "--out", "o", "--segments", "0"], "--segments", ">= 1"),
    (["train", "--data", "d", "--out", "o", "--set", "warmup_steps=-1"], "--set", ">= 0"),
    (["train", "--data", "d", "--out", "o", "--max-minutes", "0"], "--max-minutes", "> 0"),
    (["train", "--data", "d", "--out", "o", "--stop-after", "0"], "--stop-after", ">= 1"),
    (["train", "--data", "d", "--out", "o", "--set", "mask_token_id=-1"], "--set", ">= 0"),
    (["train", "--data", "d", "--out", "o", "--set", "hidden_noise=-0.05"], "--set", ">= 0"),
    (["train", "--data", "d", "--out", "o", "--set", "share_lm_head=maybe"], "--set", "true or false"),
    (["train", "--data", "d", "--out", "o", "--set", "layout=diagonal"], "--set", "padded or packed"),
    (["train", "--data", "d", "--out", "o", "--set", "export_dtype=int8"], "--set", "bfloat16 or float16"),
    (["train", "--data", "d", "--out", "o", "--val-prompts", "-1"], "--val-prompts", ">= 0"),
    (["train", "--data", "d", "--out", "o", "--set", "val_tokens=0"], "--set", ">= 1"),
    (["train", "--data", "d", "--out", "o", "--set", "val_k=0"], "--set", "[1, 128]"),
    (["train", "--data", "d", "--out", "o", "--set", "cod_ratio"], "--set", "KEY=VALUE"),
    (["train", "--data", "d", "--out", "o", "--set", "cod=0.8"], "--set", "valid keys: method, num_layers"),
    (["train", "--data", "d", "--out", "o", "--preset", "medusa"], "--preset", "'peagle', 'eagle'"),
    (["check", "somewhere", "--k", "0"], "--k", "[1, 128]"),
    (["eval", "peagle-smollm2", "--k", "0"], "--k", "[1, 128]"),
    (["eval", "peagle-smollm2", "--num-prompts", "0"], "--num-prompts", ">= 1"),
    (["eval", "peagle-smollm2", "--max-new-tokens", "-1"], "--max-new-tokens", ">= 1"),
    (["export-speculators", "d", "o", "--k", "0"], "--k", "[1, 128]"),
    (["generate", "hi", "--seed", str(2**64)], "--seed", "[0, 9223372036854775807]"),
    (["generate", "hi", "--device", "tpu"], "--device", "auto, cpu, cuda or cuda:N"),
    (["eval", "peagle-smollm2", "--device", "CUDA:x"], "--device", "auto, cpu, cuda or cuda:N"),
    (["bench", "--methods", ","], "--methods", "like ar,eagle,peagle"),
]


@pytest.fixture()
def no_model_loads(monkeypatch):
    """Loading a target or building a drafter fails the test: these refusals must come first. (Class attributes
    are patched, never a module's function: a module importing it by name would keep the stand-in.)"""
    from peagle_lab.drafter import Eagle3Drafter
    from peagle_lab.target import Target

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(Target, "load", classmethod(refuse))
    monkeypatch.setattr(Eagle3Drafter, "__init__", refuse)


def _exit_2(argv, capsys) -> str:
    """Run the CLI, expect exit 2 and return its one line on stderr."""
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2, err.value.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert captured.out == ""
    return lines[0]


@pytest.mark.parametrize("argv, flag, allowed", RANGES, ids=[" ".join(c[0]) for c in RANGES])
def test_out_of_range_values_exit_2_naming_flag_and_range(no_model_loads, argv, flag, allowed, capsys):
    line = _exit_2(argv, capsys)
    assert f"argument {flag}:" in line and allowed in line and f"peagle-lab {argv[0]}" in line


# Rules that join flags, and folders that must exist ({tmp}: the test's temp dir; it holds no drafter).
COMBINED = [
    (["generate", "hi", "--method", "eagle", "--target", "{tmp}"], ["--method eagle", "--target", "--drafter"]),
    (["generate", "hi", "--method", "peagle", "--drafter", "{tmp}/missing"], ["--drafter", "no such folder"]),
    (["generate", "hi", "--method", "peagle", "--drafter", "{tmp}"], ["--drafter", "no config.json"]),
    (["materialise", "{tmp}/missing"], ["drafter", "no such folder"]),
    (["materialise", "{tmp}"], ["drafter", "no config.json"]),
    (["check", "{tmp}/missing"], ["drafter", "no such folder"]),
    (["export-speculators", "{tmp}/missing", "{tmp}/out"], ["drafter", "no such folder"]),
    (["vllm-bench", "--dry-run", "--drafter", "peagle={tmp}/missing"], ["--drafter peagle=", "no such folder"]),
    (["vllm-bench", "--dry-run", "--methods", "eagle", "--drafter", "eagle=./not-here"],
     ["--drafter eagle=./not-here", "no such folder"]),
    (["vllm-bench", "--drafter", "peagle=not-here"], ["--drafter peagle=not-here", "no such folder"]),
    (["bench", "--drafter", "peagle={tmp}/missing"], ["--drafter peagle=", "no such folder"]),
    (["bench", "--drafter", "{tmp}/missing"], ["--drafter", "METHOD=DIR", "eagle, peagle or dspark"]),
    (["vllm-bench", "--dry-run", "--drafter", "medusa=x"], ["--drafter", "METHOD=DIR"]),
    (["bench", "--drafter", "eagle={tmp}", "--drafter", "eagle={tmp}"], ["--drafter eagle=", "twice"]),
    (["bench", "--prompts", "{tmp}/missing.jsonl"], ["--prompts", "missing.jsonl"]),
    (["regenerate", "--out", "{tmp}/o", "--prompts", "{tmp}/missing.jsonl"], ["--prompts"]),
    (["train", "--data", "{tmp}/missing", "--out", "{tmp}/o"], ["--data", "regenerate"]),
    (["train", "--data", "{tmp}", "--out", "{tmp}/o"], ["--data", "shard-*.pt"]),
    (["train", "--data", "{tmp}/data", "--out", "{tmp}/o", "--init-from", "{tmp}/missing"],
     ["--init-from", "no such folder"]),
    (["train", "--data", "{tmp}/data", "--out", "{tmp}/o", "--val-prompts", "2", "--set", "val_k=9"],
     ["val_k 9", "max_depth 8", "--set val_k="]),
    (["train", "--data", "{tmp}/data", "--out", "{tmp}/o", "--set", "steps=9"], ["--set steps", "use --steps"]),
    # eval's positional drafters: FOLDER, a shipped name or LABEL=FOLDER
    (["eval", "{tmp}/nowhere"], ["peagle-lab eval", "nowhere", "neither a drafter folder", "shipped: ",
                                 "pass FOLDER, a shipped name or NAME=FOLDER"]),
    (["eval", "mine={tmp}/nowhere"], ["'mine={tmp}/nowhere'", "neither a drafter folder", "NAME=FOLDER"]),
    (["eval", "mine={tmp}"], ["neither a drafter folder (with config.json)"]),
    (["eval", "=peagle-smollm2"], ["'=peagle-smollm2'", "label before '=' is empty", "NAME=FOLDER with a name"]),
    (["eval", " =peagle-smollm2"], ["label before '=' is empty"]),
    (["eval", "x=peagle-smollm2", "x=eagle-smollm2"], ["the label 'x' names two drafters", "NAME=FOLDER"]),
    # outputs: a folder where a file goes, a file where a folder goes, the sweep's own prompt file
    (["bench", "--json", "{tmp}"], ["--json", "is a folder", "result.json"]),
    (["eval", "peagle-smollm2", "--json", "{tmp}/data"], ["--json", "is a folder"]),
    (["regenerate", "--out", "{tmp}/data/shard-00000.pt"], ["--out", "is a file", "give a folder"]),
    (["train", "--data", "{tmp}/data", "--out", "{tmp}/data/shard-00000.pt"], ["--out", "is a file"]),
    (["vllm-bench", "--dry-run", "--prompts", "{tmp}/prompts.jsonl", "--logs", "{tmp}"],
     ["--prompts", "writes its own prompts.jsonl", "another --logs"]),
    (["regenerate", "--out", "{tmp}/o", "--all-turns", "--prompts", "mt-bench"], ["--all-turns", "held out"]),
    (["generate", "hi", "--drafter", "peagle-smollm2"], ["--drafter is for --method eagle, peagle or dspark"]),
    (["check", "{tmp}/data/shard-00000.pt"], ["is a file, not a drafter folder"]),
    (["train", "--data", "{tmp}/data", "--out", "{tmp}/o", "--draft-vocab-size", "64", "--set", "share_lm_head=true"],
     ["--draft-vocab-size 64", "share_lm_head=true", "drop one"]),
    (["train", "--data", "{tmp}/data", "--out", "{tmp}/o", "--init-from", "no-such-drafter"],
     ["no such folder", "nor a shipped drafter: dspark-smollm2, eagle-smollm2, peagle-smollm2"]),
]


@pytest.mark.parametrize("argv, named", COMBINED, ids=[" ".join(c[0]) for c in COMBINED])
def test_missing_folders_and_impossible_combinations_exit_2(no_model_loads, argv, named, tmp_path, capsys,
                                                           monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "shard-00000.pt").write_bytes(b"")   # only its name is looked at before the refusal
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "mine"}\n')
    monkeypatch.chdir(tmp_path)
    line = _exit_2([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert all(part.replace("{tmp}", str(tmp_path)) in line for part in named), line


def test_a_damaged_drafter_is_refused_before_the_target_loads(no_model_loads, tmp_path, capsys):
    """generate, bench, eval, export-speculators and train --init-from read the drafter's weights: a truncated file or a
    config that does not describe them is named at once (exit 2), not as a traceback after the target loads."""
    folder = tmp_path / "d"
    shutil.copytree(shipped()["eagle-smollm2"], folder)
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    for argv in (["generate", "hi", "--method", "eagle", "--drafter", str(folder)],
                 ["bench", "--methods", "eagle", "--drafter", f"eagle={folder}"], ["eval", str(folder)],
                 ["export-speculators", str(folder), str(tmp_path / "out")]):
        line = _exit_2(argv, capsys)
        assert "model.safetensors" in line and "truncated or corrupt" in line, line
    shutil.copy(shipped()["eagle-smollm2"] / "model.safetensors", folder / "model.safetensors")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "hidden_size": 1024}))
    assert "hidden_size 1024" in _exit_2(["generate", "hi", "--method", "eagle", "--drafter", str(folder)], capsys)


def test_dry_run_still_takes_hugging_face_ids(no_model_loads, capsys):
    assert main(["vllm-bench", "--dry-run", "--methods", "peagle", "--k", "3", "--target", "openai/gpt-oss-20b",
                 "--drafter", "peagle=amazon/gpt-oss-20b-p-eagle"]) == 0
    assert "amazon/gpt-oss-20b-p-eagle" in capsys.readouterr().out


# --------------------------------------------------------------------------- check names a broken folder
@pytest.fixture()
def eagle_copy(tmp_path):
    dst = tmp_path / "eagle"
    shutil.copytree(shipped()["eagle-smollm2"], dst)
    return dst


def _check_cli(folder, capsys) -> str:
    """`peagle-lab check FOLDER` on a broken folder: exit 1, PROBLEM lines, no traceback, no model loaded."""
    assert main(["check", str(folder)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("PROBLEM: ") and "ok:" not in out
    return out


def test_check_names_truncated_weights(no_model_loads, eagle_copy, capsys):
    weights = eagle_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    out = _check_cli(eagle_copy, capsys)
    assert str(weights) in out and "truncated or corrupt" in out
    weights.write_bytes(b"")                                                  # an empty file, too
    assert "truncated or corrupt" in _check_cli(eagle_copy, capsys)


def test_check_names_a_wrong_hidden_size(no_model_loads, eagle_copy, capsys):
    cfg = json.loads((eagle_copy / "config.json").read_text())
    (eagle_copy / "config.json").write_text(json.dumps({**cfg, "hidden_size": 1024}))
    out = _check_cli(eagle_copy, capsys)
    assert "hidden_size 1024" in out and "576" in out


@pytest.mark.parametrize("damage, named", [
    (lambda d: (d / "config.json").write_text("{not json"), "not valid JSON"),
    (lambda d: (d / "config.json").unlink(), "no config.json"),
    (lambda d: (d / "model.safetensors").unlink(), "no .safetensors"),
    (lambda d: (d / "config.json").write_text(json.dumps(
        {k: v for k, v in json.loads((d / "config.json").read_text()).items() if k != "vocab_size"})), "vocab_size"),
    (lambda d: (d / "config.json").write_text(json.dumps(
        {**json.loads((d / "config.json").read_text()), "num_hidden_layers": 2})), "num_hidden_layers 2"),
], ids=["bad-json", "no-config", "no-weights", "no-vocab-size", "wrong-layer-count"])
def test_check_names_other_damage(no_model_loads, eagle_copy, damage, named, capsys):
    damage(eagle_copy)
    assert named in _check_cli(eagle_copy, capsys)


def test_check_drafter_reports_instead_of_raising(no_model_loads, eagle_copy):
    """The library call too: a report with the fault, whatever target is passed (it is never reached)."""
    from peagle_lab.check import check_drafter

    (eagle_copy / "model.safetensors").write_bytes(b"\0" * 100)
    report = check_drafter(str(eagle_copy), target=None)
    assert report["probe"] is None and "model.safetensors" in report["problems"][0]


# --------------------------------------------------------------------------- the context length, every engine
@pytest.fixture(scope="module")
def tiny():
    tgt = tiny_target(vocab=16, context=64)                           # max_position_embeddings 64
    return tgt, random_drafter(tgt, parallel=True, trained_depth=8)


def test_teaching_engine_refuses_a_request_past_the_context(tiny):
    from peagle_lab.engines.teaching import generate

    tgt, drafter = tiny
    past = r"prompt \(60 tokens\) \+ max_new_tokens \(10\) = 70 positions .*max_position_embeddings 64"
    with pytest.raises(ValueError, match=past):
        generate(tgt, [1] * 60, method="ar", max_new_tokens=10)
    with pytest.raises(ValueError, match=r"\+ K \(5\) draft slots = 65 .*max_position_embeddings 64"):
        generate(tgt, [1] * 50, method="peagle", drafter=drafter, k=5, max_new_tokens=10)
    assert len(generate(tgt, [1] * 50, method="peagle", drafter=drafter, k=4, max_new_tokens=10,
                        stop_at_eos=False).tokens) == 10                 # exactly at the limit: runs


def test_batched_engine_refuses_a_request_past_the_context(tiny):
    from peagle_lab.engines.batched import generate_batch

    tgt, drafter = tiny
    with pytest.raises(ValueError, match=r"request 1: prompt \(60 tokens\).*max_position_embeddings 64"):
        generate_batch(tgt, [[1] * 5, [1] * 60], method="ar", max_new_tokens=10)
    with pytest.raises(ValueError, match=r"request 0: .*K \(3\)"):
        generate_batch(tgt, [[1] * 55, [1] * 5], method="eagle", drafter=drafter, k=3, max_new_tokens=[8, 8])


def test_fast_engine_refuses_a_request_past_the_context(tiny):
    from peagle_lab.engines.fast.engine import generate_fast

    tgt, drafter = tiny
    with pytest.raises(ValueError, match=r"prompt \(60 tokens\).*max_position_embeddings 64"):
        generate_fast(tgt, [1] * 60, method="ar", max_new_tokens=10, capture=False, max_len=128)
    with pytest.raises(ValueError, match=r"K \(5\).*max_position_embeddings 64"):
        generate_fast(tgt, [1] * 50, method="peagle", drafter=drafter, k=5, max_new_tokens=10, capture=False)


@pytest.mark.parametrize("kw, named", [(dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
                                       (dict(max_new_tokens=-5), "max_new_tokens must be >= 1"),
                                       (dict(temperature=-1.0), "temperature must be >= 0"),
                                       (dict(temperature=0.7, top_p=0.0), r"top_p must be in \(0, 1\]")])
def test_engines_refuse_bad_sampling_settings(tiny, kw, named):
    from peagle_lab.engines.teaching import generate
    from peagle_lab.engines.fast.engine import generate_fast

    tgt, drafter = tiny
    for run in (generate, generate_fast):
        with pytest.raises(ValueError, match=named):
            run(tgt, [1, 2, 3], method="peagle", drafter=drafter, k=3, **{"max_new_tokens": 4, **kw})


# --------------------------------------------------------------------------- library refusals through the CLI
def test_a_prompt_past_the_context_is_one_line_from_the_cli(target, monkeypatch, capsys):
    from peagle_lab.target import Target

    monkeypatch.setattr(Target, "load", classmethod(lambda cls, *a, **kw: target))   # this test may load the target
    line = _exit_2(["generate", "Say hi.", "--max-new-tokens", "8190"], capsys)
    assert line.startswith("peagle-lab generate: prompt (") and "max_position_embeddings 8192" in line


def test_library_refusals_are_one_line_and_bugs_still_raise(monkeypatch, capsys):
    from peagle_lab import cli

    def refuse(args):
        raise ValueError("the drafter and the target disagree\n  on the vocabulary")

    monkeypatch.setattr(cli, "cmd_info", refuse)
    assert _exit_2(["info"], capsys) == "peagle-lab info: the drafter and the target disagree on the vocabulary"
    monkeypatch.setenv("PEAGLE_TRACEBACK", "1")                   # the traceback when asked for
    with pytest.raises(ValueError, match="disagree"):
        main(["info"])

    def bug(args):
        raise RuntimeError("a genuine bug")

    monkeypatch.delenv("PEAGLE_TRACEBACK")
    monkeypatch.setattr(cli, "cmd_info", bug)
    with pytest.raises(RuntimeError, match="genuine bug"):                # not swallowed
        main(["info"])


def test_single_drafter_commands_take_a_shipped_name_as_eval_does(capsys, monkeypatch, tmp_path):
    """`materialise peagle-smollm2` reads the shipped folder (which stores no learned row, so it is its own vLLM
    folder); an export pointed at the package's drafters folder is still refused before anything is written; a
    folder of that name in the working directory comes first."""
    from peagle_lab.drafters_registry import shipped

    monkeypatch.chdir(tmp_path)
    assert main(["materialise", "peagle-smollm2"]) == 0
    assert capsys.readouterr().out.strip() == str(shipped()["peagle-smollm2"])
    line = _exit_2(["export-speculators", "eagle-smollm2", str(shipped()["eagle-smollm2"].parent)], capsys)
    assert "the drafter folder" in line and "would delete it" in line
    (tmp_path / "peagle-smollm2").mkdir()                       # a local folder of that name, with no drafter
    assert main(["check", "peagle-smollm2"]) == 1
    assert "PROBLEM: peagle-smollm2 has no config.json" in capsys.readouterr().out


def test_a_cuda_device_without_a_gpu_is_refused_before_loading(no_model_loads, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = _exit_2(["generate", "hi", "--device", "cuda"], capsys)
    assert "--device cuda" in line and "no CUDA GPU" in line and "--device cpu" in line


def test_a_result_is_printed_before_its_file_is_written(tmp_path, capsys, monkeypatch):
    """bench's --json is written after the result is on stdout, whole or not at all: a file that cannot be
    written never costs the run."""
    from peagle_lab.bench import write_json

    write_json({"a": 1}, str(tmp_path / "sub" / "r.json"))
    assert json.loads(capsys.readouterr().out) == {"a": 1}
    assert json.loads((tmp_path / "sub" / "r.json").read_text()) == {"a": 1}
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    if os.access(tmp_path / "ro", os.W_OK):                     # root writes anywhere: nothing to show then
        pytest.skip("this user can write into a read-only folder")
    with pytest.raises(PermissionError):
        write_json({"b": 2}, str(tmp_path / "ro" / "r.json"))
    assert json.loads(capsys.readouterr().out) == {"b": 2} and not list((tmp_path / "ro").iterdir())


def test_damaged_data_and_prompt_files_are_one_line_naming_the_file(tmp_path, capsys):
    """A shard or a checkpoint that is not torch's, a .gz that is not gzip, a prompt file that is not UTF-8: each is
    a one-line refusal (exit 2) naming the file and the fix, never torch's advice to load it unsafely."""
    from peagle_lab.prompts import PromptFileError, read_jsonl
    from peagle_lab.train.data import load_samples

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "shard-00000.pt").write_bytes(b"not a torch file at all")
    with pytest.raises(ValueError, match=r"shard-00000.pt is truncated or not a file torch wrote.*regenerate") as e:
        load_samples(tmp_path / "data")
    assert "weights_only" not in str(e.value)
    (tmp_path / "p.jsonl.gz").write_text('{"prompt": "plain text, not gzip"}\n')
    with pytest.raises(PromptFileError, match="p.jsonl.gz: named .gz but not a whole gzip file"):
        read_jsonl(tmp_path / "p.jsonl.gz")
    (tmp_path / "bin.jsonl").write_bytes(b"\xa9\xff\x00")
    with pytest.raises(PromptFileError, match="bin.jsonl: not UTF-8 text"):
        read_jsonl(tmp_path / "bin.jsonl")
    (tmp_path / "bom.jsonl").write_text('\ufeff{"prompt": "with a byte-order mark"}\n', encoding="utf-8")
    assert read_jsonl(tmp_path / "bom.jsonl") == ["with a byte-order mark"]
    line = _exit_2(["bench", "--methods", "ar", "--prompts", str(tmp_path / "bin.jsonl")], capsys)
    assert line.startswith("peagle-lab bench: ") and "bin.jsonl: not UTF-8 text" in line


def test_a_damaged_checkpoint_is_named_and_a_killed_saves_leftover_removed(tmp_path):
    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.data import Sample
    from peagle_lab.train.trainer import Trainer

    tgt = tiny_target(vocab=50)
    samples = [Sample(torch.arange(20) % 50, 5)] * 4
    (tmp_path / "checkpoint.pt.tmp-abc123").write_bytes(b"\0" * 1000)           # a save killed mid-write
    (tmp_path / "checkpoint.pt").write_bytes(b"PK\x03\x04 cut short")
    cfg = TrainConfig(method="peagle", num_layers=1, draft_vocab_size=16, max_depth=2, steps=2, batch_size=2,
                      max_len=20)
    with pytest.warns(UserWarning, match="removed checkpoint.pt.tmp-abc123, half of a save that was killed"):
        with pytest.raises(ValueError, match=r"checkpoint.pt is truncated or not a file torch wrote.*move it away"):
            Trainer(tgt, samples, cfg, tmp_path, torch.arange(16))
    assert not list(tmp_path.glob("*.tmp-*")) and (tmp_path / "checkpoint.pt").exists()


def test_an_interrupted_command_says_what_was_kept(monkeypatch, capsys):
    import peagle_lab.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_info", interrupted)
    monkeypatch.delenv("PEAGLE_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as err:
        main(["info"])
    assert err.value.code == 130 and "peagle-lab info: interrupted." in capsys.readouterr().err


def test_regenerate_refuses_skipping_every_prompt_before_any_model_loads(no_model_loads, tmp_path, capsys):
    (tmp_path / "two.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    line = _exit_2(["regenerate", "--prompts", str(tmp_path / "two.jsonl"), "--skip-prompts", "5",
                    "--out", str(tmp_path / "o")], capsys)
    assert "--skip-prompts 5 skips all 2 prompts" in line and not (tmp_path / "o").exists()


def test_a_mask_token_id_outside_the_vocabulary_is_named():
    from peagle_lab.drafter import DrafterConfig

    with pytest.raises(ValueError, match="mask token id 99999 is outside the target's vocabulary of 50.*mask_token_id"):
        DrafterConfig.for_target(tiny_target(vocab=50), parallel_drafting=True, mask_token_id=99999)


def test_export_speculators_refuses_a_k_past_the_trained_depth(target, monkeypatch, capsys, tmp_path):
    """vLLM would draft untrained slots: the export refuses K past the depth, as generate and check do."""
    from peagle_lab.target import Target

    monkeypatch.setattr(Target, "load", classmethod(lambda cls, *a, **kw: target))
    line = _exit_2(["export-speculators", "peagle-smollm2", str(tmp_path / "out"), "--k", "20"], capsys)
    assert "K=20 exceeds the depth this P-EAGLE drafter was trained for (8)" in line
    assert not (tmp_path / "out").exists()


def test_a_target_that_cannot_load_is_one_line_naming_the_fix(tmp_path, monkeypatch, capsys):
    """--target: an id Hugging Face cannot give (offline here) or a drafter's folder is named as such (exit 2)."""
    from peagle_lab.target import Target

    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)    # read once, when it was imported
    with pytest.raises(ValueError, match="target nosuch-org/nosuch: no such folder here.*pass a local model folder"):
        Target.load("nosuch-org/nosuch")
    drafter = tmp_path / "d"
    shutil.copytree(shipped()["eagle-smollm2"], drafter)
    line = _exit_2(["generate", "hi", "--target", str(drafter), "--method", "ar"], capsys)
    assert "holds a drafter, not a target model" in line


def test_shipped_names_work_for_every_drafter_flag_and_the_dry_run_checks_them(no_model_loads, capsys):
    """bench's and vllm-bench's --drafter METHOD=NAME and train --init-from NAME take a shipped name as eval does;
    the dry run refuses what the real sweep would (an EAGLE-3 drafter given for P-EAGLE, K past the depth)."""
    from peagle_lab.cli import build_parser, check_args

    parser = build_parser()
    for argv, get in ((["bench", "--drafter", "peagle=peagle-smollm2"], lambda a: dict(a.drafter)["peagle"]),
                      (["vllm-bench", "--dry-run", "--drafter", "eagle=eagle-smollm2"],
                       lambda a: dict(a.drafter)["eagle"]),
                      (["generate", "hi", "--target", "smollm2", "--method", "peagle"], lambda a: a.method)):
        args = parser.parse_args(argv)
        args.argv = argv
        check_args(parser, args)                      # accepted, no exit
        assert get(args) in (str(shipped()["peagle-smollm2"]), str(shipped()["eagle-smollm2"]), "peagle")
    for argv, said in ((["--methods", "peagle", "--k", "3", "--drafter", "peagle=eagle-smollm2"],
                        "pass it as --drafter eagle="),
                       (["--methods", "peagle", "--k", "9", "--drafter", "peagle=peagle-smollm2"],
                        "K=9 exceeds the depth")):
        with pytest.raises(SystemExit, match=said):
            main(["vllm-bench", "--dry-run", *argv])
