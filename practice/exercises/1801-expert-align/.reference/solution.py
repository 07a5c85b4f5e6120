"""Reference solution of exercise 1801."""


def align_to_experts(topk_ids: list[list[int]], num_experts: int, block_m: int) -> dict:
    if block_m < 1 or num_experts < 1:
        raise ValueError("block_m and num_experts must be at least 1")
    top_k = len(topk_ids[0]) if topk_ids else 0
    if any(len(row) != top_k for row in topk_ids):
        raise ValueError("every token needs the same number of experts")
    flat = [e for row in topk_ids for e in row]
    if any(not 0 <= e < num_experts for e in flat):
        raise ValueError("expert id out of range")
    num_pairs = len(flat)
    worst = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    rows = -(-worst // block_m) * block_m
    by_expert: list[list[int]] = [[] for _ in range(num_experts)]
    for pair, expert in enumerate(flat):
        by_expert[expert].append(pair)
    sorted_pairs: list[int] = []
    block_expert: list[int] = []
    for expert, pairs in enumerate(by_expert):
        if pairs:
            padding = -len(pairs) % block_m
            sorted_pairs += pairs + [num_pairs] * padding
            block_expert += [expert] * ((len(pairs) + padding) // block_m)
    sorted_pairs += [num_pairs] * (rows - len(sorted_pairs))
    block_expert += [-1] * (rows // block_m - len(block_expert))
    return {"sorted_pairs": sorted_pairs, "block_expert": block_expert}
