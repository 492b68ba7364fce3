"""The fused kernel equals its torch reference (and vLLM's worked example) on odd ragged batches.

On CPU the Triton kernel runs in Triton's interpreter, so shapes stay small; on a GPU the same
test runs the compiled kernel.
"""
import pytest
import torch

from peagle_lab.kernels import copy_and_expand_eagle_inputs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def make_batch(query_lens, rejected, seed=0):
    g = torch.Generator().manual_seed(seed)
    qsl = torch.tensor([0] + list(torch.tensor(query_lens).cumsum(0)), dtype=torch.int32)
    qel = (qsl[1:] - 1 - torch.tensor(rejected, dtype=torch.int32)).to(torch.int32)
    n = int(qsl[-1])
    tokens = torch.randint(1, 50_000, (n,), generator=g, dtype=torch.int32)
    positions = torch.cat([int(torch.randint(0, 1000, (1,), generator=g)) + torch.arange(L) for L in query_lens])
    bonus = torch.randint(1, 50_000, (len(query_lens),), generator=g, dtype=torch.int32)
    return dict(target_token_ids=tokens.to(DEVICE), target_positions=positions.to(DEVICE),
                next_token_ids=bonus.to(DEVICE), query_start_loc=qsl.to(DEVICE), query_end_loc=qel.to(DEVICE),
                padding_token_id=0, parallel_drafting_token_id=-7)


CASES = {
    "one decode": ([4], [0]),
    "one long prefill": ([301], [0]),
    "no rejections": ([3, 5, 1, 9], [0, 0, 0, 0]),
    "all but one rejected": ([6, 4, 8], [5, 3, 7]),
    "mixed, many requests": ([1, 7, 2, 130, 3, 3, 9, 1, 5], [0, 3, 1, 0, 2, 0, 8, 0, 4]),
}


@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("case", list(CASES))
def test_kernel_equals_reference(case, k, shift, monkeypatch):
    monkeypatch.setenv("PEAGLE_KERNEL_POISON", "1")      # outputs start as garbage: every slot must be written
    lens, rej = CASES[case]
    if not shift:
        rej = [min(r, L - 1) for r, L in zip(rej, lens)]
    batch = make_batch(lens, rej, seed=k)
    layout = dict(num_padding_slots_per_request=k, shift_input_ids=shift)
    ref = copy_and_expand_eagle_inputs(**batch, **layout, backend="torch")
    out = copy_and_expand_eagle_inputs(**batch, **layout, backend="triton")
    n_in, n_req = sum(lens), len(lens)
    assert out.input_ids.numel() == n_in + n_req * (k - 1 if shift else k)
    for name in ("input_ids", "positions", "is_rejected_token_mask", "is_masked_token_mask", "new_token_indices"):
        a, b = getattr(ref, name), getattr(out, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    if shift:
        assert torch.equal(ref.hidden_state_mapping, out.hidden_state_mapping)
    assert out.is_masked_token_mask.sum() == n_req * (k - 1)
    assert out.is_rejected_token_mask.sum() == sum(rej)


@pytest.mark.parametrize("launch", [(16, 1), (32, 1), (128, 4)])
def test_every_launch_shape_gives_the_reference(launch, monkeypatch):
    """The grid follows BLOCK: programs of 16, 32 or 128 slots cover prefills and decodes alike."""
    from peagle_lab.kernels import launch_config

    monkeypatch.setenv("PEAGLE_KERNEL_POISON", "1")
    lens, rej = CASES["mixed, many requests"]
    batch = make_batch(lens, rej, seed=11)
    ref = copy_and_expand_eagle_inputs(**batch, num_padding_slots_per_request=5, backend="torch")
    out = copy_and_expand_eagle_inputs(**batch, num_padding_slots_per_request=5, backend="triton", launch=launch)
    for name in ("input_ids", "positions", "is_rejected_token_mask", "is_masked_token_mask", "new_token_indices",
                 "hidden_state_mapping"):
        assert torch.equal(getattr(ref, name), getattr(out, name)), name
    assert launch_config(8 + 7) == (16, 1) and launch_config(130 + 7) == (128, 4) and launch_config(40) == (64, 2)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_vllm_worked_example(backend):
    """vLLM's own test case: K=3, shift on, mask id -2, padding 0, request 0 rejected one token."""
    out = copy_and_expand_eagle_inputs(
        target_token_ids=torch.tensor([10, 11, 12, 13, 20, 21, 22, 23], dtype=torch.int32, device=DEVICE),
        target_positions=torch.tensor([5, 6, 7, 8, 10, 11, 12, 13], device=DEVICE),
        next_token_ids=torch.tensor([100, 200], dtype=torch.int32, device=DEVICE),
        query_start_loc=torch.tensor([0, 4, 8], dtype=torch.int32, device=DEVICE),
        query_end_loc=torch.tensor([2, 7], dtype=torch.int32, device=DEVICE),
        padding_token_id=0, parallel_drafting_token_id=-2, num_padding_slots_per_request=3, backend=backend)
    assert out.input_ids.tolist() == [11, 12, 100, -2, -2, 0, 21, 22, 23, 200, -2, -2]
    assert out.positions.tolist() == [5, 6, 7, 8, 9, 0, 10, 11, 12, 13, 14, 15]
    assert out.new_token_indices.tolist() == [2, 3, 4, 9, 10, 11]
    assert out.is_masked_token_mask.tolist() == [False] * 3 + [True] * 2 + [False] * 5 + [True] * 2
    assert out.is_rejected_token_mask.tolist() == [False] * 5 + [True] + [False] * 6
    assert out.hidden_state_mapping.tolist() == [0, 1, 2, 3, 6, 7, 8, 9]


def test_bad_k_is_refused():
    with pytest.raises(ValueError, match="K\\) must be >= 1"):
        copy_and_expand_eagle_inputs(**make_batch([3], [0]), num_padding_slots_per_request=0)


def test_batched_parallel_drafting_equals_each_request_alone(target):
    """Kernel + scatter + torch.where + one packed drafter pass == draft_parallel per request."""
    from helpers import random_drafter
    from peagle_lab.engines.drafting import draft_parallel
    from peagle_lab.kernels.batched import draft_parallel_batched

    drafter = random_drafter(target, parallel=True, num_layers=2, draft_vocab_size=4096, seed=7)
    k = 4
    g = torch.Generator().manual_seed(0)
    lens, rejected = [9, 14, 5], [2, 0, 4]
    ids = [torch.randint(0, 40_000, (L,), generator=g) for L in lens]
    aux = [torch.randn(L, 3 * target.hidden_size, generator=g) for L in lens]
    bonus = torch.randint(0, 40_000, (len(lens),), generator=g)
    qsl = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    qel = (qsl[1:] - 1 - torch.tensor(rejected, dtype=torch.int32)).to(torch.int32)
    dev = target.device                                          # the compiled kernel with PEAGLE_TEST_DEVICE=cuda
    ids, aux, bonus = [x.to(dev) for x in ids], [a.to(dev) for a in aux], bonus.to(dev)
    batched = draft_parallel_batched(drafter, torch.cat(ids).to(torch.int32),
                                     torch.cat([torch.arange(L) for L in lens]).to(dev), torch.cat(aux),
                                     bonus.to(torch.int32), qsl.to(dev), qel.to(dev), k)
    for r, L in enumerate(lens):
        keep = L - rejected[r]                                   # tokens 0..keep-1 were accepted
        ctx = torch.cat([ids[r][1:keep], bonus[r: r + 1]])       # token at t+1 for features at t
        alone = draft_parallel(drafter, drafter.new_cache(), ctx, aux[r][:keep], k)
        assert batched[r].tolist() == alone.tokens.tolist(), r
