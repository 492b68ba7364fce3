"""Reference answers for notebook 03's exercises (open this after trying)."""


def my_peagle_mask(q, k):
    qa, qd = q.anchor[:, None], q.depth[:, None]
    ka, kd = k.anchor[None, :], k.depth[None, :]
    same_doc = q.doc[:, None] == k.doc[None, :]
    earlier_real = (kd == 0) & (ka <= qa)          # the real token stream up to the query's anchor
    own_chain = (ka == qa) & (kd <= qd)            # the query's own anchor, shallower depths
    return same_doc & (earlier_real | own_chain)


def my_partition(el, seq_len, num_segments):
    bounds = [round(s * seq_len / num_segments) for s in range(num_segments + 1)]
    seg_of_pos = lambda pos: max(s for s in range(num_segments) if bounds[s] <= pos)
    home = [seg_of_pos(a if d == 0 else a + 1) for a, d in zip(el.anchor.tolist(), el.depth.tolist())]
    plan = []
    for s in range(num_segments):
        own = [i for i, h in enumerate(home) if h == s]
        context = [i for i, (h, d) in enumerate(zip(home, el.depth.tolist())) if h < s and d == 0]
        if own:
            plan.append((own, context))
    return plan
