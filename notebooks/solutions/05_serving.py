"""Reference answers for notebook 05's exercises (open this after trying)."""


def my_speculative_config(method, drafter, k):
    # one checkpoint layout for both drafters: vLLM's method is "eagle3"; parallel_drafting selects P-EAGLE
    return {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": int(k),
            "parallel_drafting": method == "peagle"}
