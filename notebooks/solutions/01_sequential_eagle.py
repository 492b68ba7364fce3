"""Reference answers for notebook 01's exercises (open this after trying)."""
import torch


def my_draft_sequential(drafter, cache, ctx_tokens, ctx_aux, k):
    ids = ctx_tokens[None]                                     # (1, T)
    hidden = drafter.project(ctx_aux)[None]                    # (1, T, H)
    drafts = []
    for _ in range(k):
        prenorm, logits = drafter(ids, hidden, cache)          # (1, t, H), (1, t, Vd)
        tok = drafter.to_target_ids(logits[:, -1].argmax(-1))  # (1,)
        drafts.append(tok)
        ids, hidden = tok[None], prenorm[:, -1:]               # the next pass sees one new slot
    return torch.cat(drafts)


def my_verify_greedy(drafts, logits):
    choice = logits.argmax(-1)                                 # (K+1,)
    n = 0
    while n < len(drafts) and int(drafts[n]) == int(choice[n]):
        n += 1
    return n, int(choice[n])
