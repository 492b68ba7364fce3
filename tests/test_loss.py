"""The chunked head + KL loss equals the plain formula (loss, hits and gradients), chunks or not."""
import pytest
import torch
import torch.nn.functional as F

from peagle_lab.train import loss as loss_mod
from peagle_lab.train.loss import head_kl


def _plain(normed, weight, target, rows):
    logq = F.log_softmax(normed @ weight.t(), dim=-1)
    logp = F.log_softmax(target[rows], dim=-1)
    return (logp.exp() * (logp - logq)).sum(), (logq.argmax(-1) == logp.argmax(-1))


@pytest.mark.parametrize("chunk_elements", [1 << 27, 7 * 50, 50])   # one chunk, uneven chunks, one row each
@pytest.mark.parametrize("trainable_head", [True, False])
def test_head_kl_equals_plain_formula(monkeypatch, chunk_elements, trainable_head):
    monkeypatch.setattr(loss_mod, "HEAD_CHUNK_ELEMENTS", chunk_elements)
    g = torch.Generator().manual_seed(0)
    U, H, V, N = 23, 16, 50, 31
    normed = torch.randn(U, H, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(V, H, dtype=torch.float64, generator=g, requires_grad=trainable_head)
    target = 3 * torch.randn(N, V, dtype=torch.float64, generator=g)
    rows = torch.randint(0, N, (U,), generator=g)
    scale = torch.tensor(0.37, dtype=torch.float64)             # the trainer divides by a global count

    loss, hits = head_kl(normed, weight, target, rows)
    (loss * scale).backward()
    got = (loss.detach(), hits, normed.grad.clone(), None if weight.grad is None else weight.grad.clone())
    normed.grad = None
    weight.grad = None

    ref_loss, ref_hits = _plain(normed, weight, target, rows)
    (ref_loss * scale).backward()
    torch.testing.assert_close(got[0], ref_loss.detach(), rtol=1e-12, atol=0)
    assert torch.equal(got[1], ref_hits)
    torch.testing.assert_close(got[2], normed.grad, rtol=1e-10, atol=1e-13)
    if trainable_head:
        torch.testing.assert_close(got[3], weight.grad, rtol=1e-10, atol=1e-13)
    else:
        assert got[3] is None and weight.grad is None               # the target's head stays frozen


def test_head_kl_without_grad_makes_no_gradient():
    normed = torch.randn(5, 4, requires_grad=True)
    weight = torch.randn(9, 4, requires_grad=True)
    target = torch.randn(5, 9)
    with torch.no_grad():
        loss, hits = head_kl(normed, weight, target, torch.arange(5))
    assert not loss.requires_grad and hits.shape == (5,)
    torch.testing.assert_close(loss, _plain(normed, weight, target, torch.arange(5))[0].detach())
