"""Reference answers for notebook 04's exercises (open this after trying)."""


def my_input_ids(b):
    tokens, qsl, qel = b["target_token_ids"].tolist(), b["query_start_loc"].tolist(), b["query_end_loc"].tolist()
    k, out = b["num_padding_slots_per_request"], []
    for r, next_token in enumerate(b["next_token_ids"].tolist()):
        start, last, stop = qsl[r], qel[r], qsl[r + 1]        # last = index of the last accepted token
        out += tokens[start + 1: last + 1] + [next_token] + [b["parallel_drafting_token_id"]] * (k - 1)
        out += [b["padding_token_id"]] * (stop - 1 - last)   # one padding slot per rejected token
    return out
