"""Serving in real vLLM (CPU build): lossless, accepted, the same acceptance as the teaching engine,
and no process left behind. The vLLM tests start servers, so they run one after another."""
import os
import shutil

import pytest

from peagle_lab.serving.metrics import acceptance_from_diff, diff, parse_spec_decode
from peagle_lab.serving.server import ServeConfig, VLLMServer, check_drafter_config, serve_command

RECORDED = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 141.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 705.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 49.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 40.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 1.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_metrics_parser_on_recorded_text():
    after = parse_spec_decode(RECORDED)
    before = {"num_drafts": 41.0, "num_draft_tokens": 205.0, "num_accepted_tokens": 9.0, "accepted_per_pos[0]": 10.0}
    st = acceptance_from_diff(diff(after, before), k=5)
    assert st.num_drafts == 100 and st.num_draft_tokens == 500 and st.num_accepted_tokens == 40
    assert st.accepted_per_pos == [30, 6, 2, 1, 0]
    assert st.acceptance_length == 1.4
    assert st.per_position == [0.3, 0.06, 0.02, 0.01, 0.0]


def test_command_uses_this_python_and_the_speculative_config(tmp_path):
    cfg = ServeConfig(target="T", method="peagle", drafter="D", k=7)
    cmd = serve_command(cfg, 8123)
    assert cmd[0].endswith("python") or "python" in os.path.basename(cmd[0])
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    spec = cmd[cmd.index("--speculative-config") + 1]
    assert '"parallel_drafting": true' in spec and '"num_speculative_tokens": 7' in spec
    assert '"method": "eagle3"' in spec
    assert "--speculative-config" not in serve_command(ServeConfig(target="T"), 8123)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--dtype") + 1] == "float32"


def test_mismatched_drafter_is_refused_before_vllm_starts(target, tmp_path):
    from peagle_lab.assets import smollm2_dir
    from peagle_lab.drafters_registry import shipped

    good = shipped()["peagle-smollm2"]
    check_drafter_config(str(good), str(smollm2_dir()), "peagle", 8)
    with pytest.raises(ValueError, match="K=9 exceeds"):
        check_drafter_config(str(good), str(smollm2_dir()), "peagle", 9)
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    cfg = (bad / "config.json").read_text().replace('"vocab_size": 49152', '"vocab_size": 32000')
    (bad / "config.json").write_text(cfg.replace('"ptd_token_id"', '"unused_id"'))
    with pytest.raises(ValueError, match="vocab 32000 != target vocab 49152.*mask token id"):
        VLLMServer(ServeConfig(target=str(smollm2_dir()), method="peagle", drafter=str(bad), k=3))


def learned_row_drafter(target, folder):
    """The shipped P-EAGLE drafter re-labelled the way the recipe stores one: mask id 16 (unused) and a learned
    mask row (here: the target's row 0, the embedding the shipped drafter was trained with)."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from peagle_lab.drafters_registry import shipped
    from peagle_lab.materialise import FINGERPRINT_KEY, embedding_fingerprint

    src = shipped()["peagle-smollm2"]
    table = target.model.get_input_embeddings().weight
    tensors = load_file(str(src / "model.safetensors"))
    tensors["mask_embedding"] = table[0:1].detach().cpu().to(tensors["mask_hidden"].dtype)
    config = json.loads((src / "config.json").read_text())
    config.update(ptd_token_id=16, **{FINGERPRINT_KEY: embedding_fingerprint(table)})
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.vllm
@pytest.mark.parametrize("method", [pytest.param("eagle", marks=pytest.mark.slow),   # the shipped P-EAGLE: the sweep
                                    "peagle-learned-row"])                         # (slow, test_serving_bench)
def test_real_vllm_is_lossless_and_agrees_with_teaching_engine(target, mtbench_ids, method, tmp_path):
    from peagle_lab.assets import smollm2_dir
    from peagle_lab.checkpoint import load_drafter
    from peagle_lab.drafters_registry import drafter_for, shipped
    from peagle_lab.engines.teaching import generate
    from peagle_lab.stats import AcceptanceStats

    k, n_tokens = 3, 24
    if method == "peagle-learned-row":                # stored as one row, served materialised (in the cache)
        folder = learned_row_drafter(target, tmp_path / "stored")
        method, drafter = "peagle", load_drafter(folder, target)
    else:
        folder = shipped()[f"{method}-smollm2"]
        drafter, _ = drafter_for(target, method)
    cfg = ServeConfig(target=str(smollm2_dir()), method=method, drafter=str(folder), k=k)
    ours = AcceptanceStats(k)
    with pytest.raises(KeyboardInterrupt):            # an interrupt inside the block still stops vLLM
        with VLLMServer(cfg) as server:
            before = server.spec_counters()
            for ids in mtbench_ids[:2]:
                got = server.complete(ids, n_tokens)
                assert got == target.generate(ids, n_tokens).tokens           # lossless in vLLM
                mine = generate(target, ids, method=method, drafter=drafter, k=k, max_new_tokens=n_tokens)
                ours = ours.merge(mine.acceptance)
            theirs = acceptance_from_diff(diff(server.spec_counters(), before), k)
            pgid = server.proc.pid
            raise KeyboardInterrupt
    assert theirs.num_accepted_tokens > 0
    for a, b in zip(theirs.per_position, ours.per_position):                 # cross-check within 0.05
        assert abs(a - b) <= 0.05, (theirs.per_position, ours.per_position)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)                                                    # no vLLM process left
