import os

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def target():
    """The real embedded target (SmolLM2-135M-Instruct, float32), loaded once: on the CPU, or on the
    device ``PEAGLE_TEST_DEVICE`` names (``cuda`` runs the engine's tests on a GPU)."""
    from peagle_lab.target import Target

    return Target.load(device=os.environ.get("PEAGLE_TEST_DEVICE", "cpu"))


@pytest.fixture(scope="session")
def mtbench_ids(target):
    from peagle_lab.prompts import load_prompts

    return [target.chat_ids(p) for p in load_prompts("mt-bench", 3)]


# The default tier's tests that take 4 s or more each on a 2-core CPU (measured with --durations): `make test` runs
# them, `make test-fast` (the development loop) leaves them out through the marker `heavy`. Each entry is a test
# function, or one case of it as "function[id]". The development loop keeps one real-target oracle per method
# (test_teaching's K=1 cases, test_dspark's K=3) and every tiny-target oracle.
HEAVY = {
    "test_acceptance_pins.py": ["test_shipped_drafter_acceptance_length_is_pinned"],
    "test_batched.py": ["test_bench_batch_size_rows", "test_batch_equals_each_request_alone_and_ar",
                        "test_bench_cli_batch_rows_beside_the_fast_engine"],
    "test_cache_attention.py": ["test_generate_fast_triton_equals_ar", "test_imports_without_triton",
                                "test_long_prompt_mixes_sdpa_prefill_and_kernel_steps"],
    "test_checkpoint.py": ["test_speculators_export_validates_with_speculators_config_classes",
                           "test_published_variants_load"],
    "test_dspark.py": ["test_replay_equals_the_engine", "test_greedy_dspark_equals_ar_on_the_real_target[1]",
                       "test_greedy_dspark_equals_ar_on_the_real_target[6]",
                       "test_checkpoint_round_trip_and_vllm_layout", "test_train_init_from_a_dspark_drafter",
                       "test_batched_dspark_equals_each_request_alone_and_ar[4]"],
    "test_fast_engine.py": ["test_fast_speculative_equals_ar_and_teaching_stats", "test_fast_ar_equals_ar"],
    "test_faults.py": ["test_an_export_killed_at_any_line_leaves_the_old_drafter_or_the_new_one",
                       "test_a_materialise_killed_at_any_line_leaves_nothing_or_the_whole_folder",
                       "test_a_regenerate_killed_at_any_line_keeps_whole_shards_and_the_next_run_finishes",
                       "test_an_interrupt_ends_a_command_in_seconds_with_one_line_and_no_orphans"],
    "test_nothing_lost.py": ["test_another_process_on_the_port_is_not_taken_for_our_server"],
    "test_recipe.py": ["test_ablation_eval_several_k_equals_one_eval_per_k"],
    "test_replay.py": ["test_evaluate_equals_the_engine_per_drafter_and_per_category"],
    "test_sampling.py": ["test_wrong_verifier_is_caught"],
    "test_target.py": ["test_greedy_ar_equals_transformers_generate", "test_sampling_is_seeded_and_respects_top_p"],
    "test_teaching.py": ["test_greedy_speculative_equals_ar[5-eagle]", "test_greedy_speculative_equals_ar[5-peagle]",
                         "test_shipped_drafters_are_lossless_and_accepted"],
    "test_vllm_engine.py": ["test_vllm_engine_writes_the_transformers_shards_and_resumes_without_starting"],
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = HEAVY.get(item.path.name, ())
        if item.originalname in names or item.name in names:
            item.add_marker(pytest.mark.heavy)
