"""P-EAGLE training oracles: the mask, COD invariants, and partitioned == single-pass gradients."""
import pytest
import torch

from helpers import random_drafter, tiny_target
from peagle_lab.train.cod import cod_sample, partition, peagle_mask, peagle_mask_bruteforce
from peagle_lab.train.loss import SeqData, sequence_loss, supervised_mask


def test_mask_equals_bruteforce():
    g = torch.Generator().manual_seed(0)
    doc = torch.tensor([0] * 10 + [1] * 13)                                 # two packed conversations
    el = cod_sample(23, 5, 0.7, generator=g, doc=doc)
    mask = peagle_mask(el, el)
    assert torch.equal(mask, peagle_mask_bruteforce(el, el))
    assert not mask[el.doc[:, None] != el.doc[None, :]].any()
    assert set(el.anchor[el.depth == 0].tolist()) == set(range(22)) - {9}   # no anchor reads the next conversation


def test_cod_invariants():
    g = torch.Generator().manual_seed(1)
    sup = torch.zeros(200, dtype=torch.bool)
    sup[60:] = True
    el = cod_sample(200, 8, 0.7, supervised=sup, generator=g)
    assert torch.equal(el.anchor[el.depth == 0], torch.arange(199))          # depth 0: every anchor
    assert (el.depth[1:] >= el.depth[:-1]).all()                             # depth-major order
    pairs = set(zip(el.anchor.tolist(), el.depth.tolist()))
    for a, d in pairs:
        if d > 0:
            assert (a, d - 1) in pairs                                       # every element has its parent
            assert a + 2 + d < 200 and sup[a + 2 + d]                        # and a supervised target
    sizes = [int((el.depth == d).sum()) for d in range(8)]
    for d in range(2, 8):
        assert abs(sizes[d] - round(sizes[d - 1] * 0.7)) <= 1               # keeps ~r of the parents


def _problem(dtype, method, seq_len=40, max_depth=4, seed=0, head_dim=8):
    tgt = tiny_target(vocab=50, seed=seed, head_dim=head_dim)
    drafter = random_drafter(tgt, parallel=method == "peagle", num_layers=2, seed=seed).to(dtype).train()
    for p in drafter.parameters():
        p.requires_grad_(True)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 50, (seq_len,), generator=g)
    out = tgt.forward(tokens, tgt.new_cache())
    sup = torch.ones(seq_len, dtype=torch.bool)
    sup[:6] = False                                                         # a "prompt" that is not supervised
    data = SeqData(tokens, out.aux[0].to(dtype), out.logits[0].to(dtype), sup)
    el = cod_sample(seq_len, max_depth, 0.7, supervised=sup, generator=g)
    return drafter, data, el


def _grads(drafter, el, data, method, segments):
    drafter.zero_grad()
    n = int(supervised_mask(el, data).sum())
    parts = sequence_loss(drafter, el, data, method=method, max_depth=4, num_segments=segments,
                          normalizer=n, backward=True)
    return parts.loss_sum / n, {k: p.grad.clone() for k, p in drafter.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_partition_gradients_equal_single_pass(method):
    drafter, data, el = _problem(torch.float64, method)
    segs = partition(el, 40, 4)
    assert len(segs) == 4
    # the plan puts depth >= 2 children of boundary anchors with their parents
    starts = torch.linspace(0, 40, 5).round().long()[1:-1].tolist()      # first position of segments 1..3
    crossing = [((el.depth[s.own] >= 2) & (el.anchor[s.own] == b - 1)).any() for s, b in zip(segs[1:], starts)]
    assert any(crossing), "some depth >= 2 chain should hang off an anchor in the previous segment" 
    loss1, g1 = _grads(drafter, el, data, method, 1)
    loss4, g4 = _grads(drafter, el, data, method, 4)
    assert torch.allclose(loss1, loss4, rtol=1e-10)
    assert g1.keys() == g4.keys() and {"fc.weight"} <= g1.keys()
    if method == "peagle":
        assert "mask_hidden" in g1 and g1["mask_hidden"].abs().sum() > 0
    for k in g1:
        rel = (g1[k] - g4[k]).norm() / g1[k].norm().clamp_min(1e-30)
        assert rel <= 1e-10, f"{k}: relative gradient error {rel:.2e}"


def test_partition_covers_every_element_once():
    el = cod_sample(101, 6, 0.7, generator=torch.Generator().manual_seed(2))
    segs = partition(el, 101, 5)
    owned = torch.cat([s.own for s in segs])
    assert torch.equal(owned.sort().values, torch.arange(len(el)))
    for s in segs:
        ctx = el.select(s.context)
        assert (ctx.depth == 0).all()
        own = el.select(s.own)
        # every depth-0 key an owned query may see is owned or in the context
        need = {int(a) for a in torch.arange(int(own.anchor.max()) + 1)}
        have = set(ctx.anchor.tolist()) | set(own.anchor[own.depth == 0].tolist())
        assert need <= have


@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_packed_conversations_as_a_padded_batch_equal_one_pass(method):
    """Packed conversations run as a padded batch give the packed pass's loss and gradients."""
    from peagle_lab.train.loss import padded_loss

    drafter, data, _ = _problem(torch.float64, method, seq_len=40)
    # conversation 1 is so short it has no element at depths 2 and 3: all-padding rows there
    data.doc = torch.tensor([0] * 17 + [1] * 5 + [2] * 18)
    el = cod_sample(40, 4, 0.7, supervised=data.supervised, doc=data.doc, generator=torch.Generator().manual_seed(3))
    per_doc = torch.stack([torch.bincount(el.doc[el.depth == d], minlength=3) for d in range(4)])   # (depth, doc)
    assert (per_doc.min(1).values < per_doc.max(1).values).all()            # padding at every depth
    assert (per_doc == 0).any() and (per_doc[0] > 0).all()
    n = int(supervised_mask(el, data).sum())
    results = []
    for fn in (sequence_loss, padded_loss):
        drafter.zero_grad()
        parts = fn(drafter, el, data, method=method, max_depth=4, normalizer=n, backward=True)
        results.append((parts, {k: p.grad.clone() for k, p in drafter.named_parameters() if p.grad is not None}))
    ref, ref_grads = results[0]
    assert {"fc.weight", "layers.0.self_attn.q_proj.weight"} <= ref_grads.keys()
    for parts, grads in results[1:]:
        assert torch.allclose(ref.loss_sum, parts.loss_sum, rtol=1e-10)
        assert parts.count == ref.count
        assert torch.equal(parts.correct, ref.correct) and torch.equal(parts.total, ref.total)
        assert grads.keys() == ref_grads.keys()
        for k, g in ref_grads.items():
            rel = (g - grads[k]).norm() / g.norm().clamp_min(1e-30)
            assert rel <= 1e-10, f"{k}: relative gradient error {rel:.2e}"


def test_block_mask_equals_dense_mask():
    """The flex-attention BlockMask encodes exactly the dense P-EAGLE mask (also across documents)."""
    from peagle_lab.train.cod import peagle_block_mask

    doc = torch.tensor([0] * 90 + [1] * 150)
    el = cod_sample(240, 6, 0.7, generator=torch.Generator().manual_seed(4), doc=doc)
    q = el.select((el.depth == 2).nonzero().squeeze(-1))                     # a sequential-TTT query set
    for qq in (el, q):
        bm = peagle_block_mask(qq, el, block=32)
        dense = bm.to_dense()[0, 0].bool()                                   # (Eq/32, Ek/32) tiles kept
        want = peagle_mask(qq, el)
        pad = torch.zeros(dense.shape[0] * 32, dense.shape[1] * 32, dtype=torch.bool)
        pad[: len(qq), : len(el)] = want
        tiles = pad.view(dense.shape[0], 32, dense.shape[1], 32).any(3).any(1)
        assert torch.equal(dense, tiles)                                     # exactly the non-empty tiles
        # and, evaluated elementwise, the mask_mod is the mask
        qi, ki = torch.meshgrid(torch.arange(len(qq)), torch.arange(len(el)), indexing="ij")
        assert torch.equal(bm.mask_mod(0, 0, qi, ki), want)


@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_flex_attention_loss_equals_dense(method):
    """The flex-attention path gives the dense path's loss (forward only: PyTorch has no flex backward on
    CPU; the GPU gradient check is test_flex_gradients_equal_dense_on_cuda, its H200 log in benchmarks/results)."""
    drafter, data, _ = _problem(torch.float64, method, seq_len=40)
    data.doc = torch.tensor([0] * 15 + [1] * 12 + [2] * 13)
    el = cod_sample(40, 4, 0.7, supervised=data.supervised, doc=data.doc, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        for segments in (1, 3):
            common = dict(method=method, max_depth=4, num_segments=segments)
            dense = sequence_loss(drafter, el, data, **common, attention="dense")
            flex = sequence_loss(drafter, el, data, **common, attention="flex")
            assert torch.allclose(dense.loss_sum, flex.loss_sum, rtol=1e-10)
            assert torch.equal(dense.correct, flex.correct) and dense.count == flex.count
    with pytest.raises(ValueError, match="attention backend"):
        sequence_loss(drafter, el, data, method=method, max_depth=4, attention="sdpa")


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="flex attention has a backward on CUDA only (run on the H200)")
@pytest.mark.parametrize("method", ["peagle", "eagle"])
def test_flex_gradients_equal_dense_on_cuda(method):
    """On a GPU, the compiled flex-attention path gives the dense path's loss and gradients, also partitioned."""
    drafter, data, _ = _problem(torch.float32, method, seq_len=40, head_dim=16)   # Triton's flex needs head_dim >= 16
    data.doc = torch.tensor([0] * 15 + [1] * 12 + [2] * 13)
    el = cod_sample(40, 4, 0.7, supervised=data.supervised, doc=data.doc, generator=torch.Generator().manual_seed(6))
    drafter.cuda()
    drafter.share_embedding(drafter._shared_embed.cuda()) if drafter._shared_embed is not None else None
    data = SeqData(*(t.cuda() for t in (data.tokens, data.aux, data.target_logits, data.supervised, data.doc)))
    el.anchor, el.depth, el.doc = el.anchor.cuda(), el.depth.cuda(), el.doc.cuda()
    n = int(supervised_mask(el, data).sum())
    results = {}
    for attention in ("dense", "flex"):               # "flex" is used as asked, also for eagle
        for segments in (1, 3):
            drafter.zero_grad()
            parts = sequence_loss(drafter, el, data, method=method, max_depth=4, num_segments=segments,
                                  normalizer=n, backward=True, attention=attention)
            results[attention, segments] = (parts.loss_sum, {k: p.grad.clone() for k, p in drafter.named_parameters()
                                                             if p.grad is not None})
    ref_loss, ref = results["dense", 1]
    report, bad = [], []                              # every number in one message: a log tail keeps it whole
    for key, (loss, grads) in results.items():
        loss_rel = float((loss - ref_loss).abs() / ref_loss.abs())
        worst = max(((float((g - grads[k]).norm() / g.norm().clamp_min(1e-30)), k) for k, g in ref.items()))
        report.append(f"{key}: loss rel {loss_rel:.1e}, worst grad rel {worst[0]:.1e} ({worst[1]})")
        bad += [key] if loss_rel > 1e-4 or worst[0] > 1e-3 else []
    assert not bad, "flex vs dense on CUDA: " + "; ".join(report)
