"""Reference answers for notebook 02's exercises (open this after trying)."""
import torch


def my_draft_parallel(drafter, cache, ctx_tokens, ctx_aux, k):
    T = ctx_tokens.shape[0]
    masks = torch.full((k - 1,), drafter.cfg.mask_token_id, dtype=ctx_tokens.dtype, device=ctx_tokens.device)
    ids = torch.cat([ctx_tokens, masks])[None]                                       # (1, T+K-1)
    hidden = torch.cat([drafter.project(ctx_aux), drafter.projected_mask_hidden().expand(k - 1, -1)])[None]
    _, logits = drafter(ids, hidden, cache)                                          # (1, T+K-1, Vd)
    return drafter.to_target_ids(logits[0, T - 1:].argmax(-1))                       # (K,)


def my_verify_sampling(drafts, draft_probs, target_probs, generator):
    for i, x in enumerate(drafts.tolist()):
        p, q = float(target_probs[i, x]), float(draft_probs[i, x])
        if q > 0 and float(torch.rand(1, generator=generator)) * q <= p:   # accept with probability min(1, p/q)
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp_min(0)
        residual = residual / residual.sum() if residual.sum() > 0 else target_probs[i]
        return i, int(torch.multinomial(residual, 1, generator=generator))
    return len(drafts), int(torch.multinomial(target_probs[len(drafts)], 1, generator=generator))
