"""Reference solution of exercise 901."""


def chunk_plan(remaining: list[int], budget: int) -> list[int]:
    chunks = []
    for left in remaining:
        if budget <= 0:
            break
        chunk = min(left, budget)
        chunks.append(chunk)
        budget -= chunk
        if chunk < left:
            break  # a chunked request must be the last of its batch
    return chunks


def num_prefill_batches(prompt_len: int, budget: int) -> int:
    return (prompt_len + budget - 1) // budget


def plan(remaining: list[int], budget: int) -> dict:
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    return {
        "chunks": chunk_plan(remaining, budget),
        "batches": [num_prefill_batches(n, budget) for n in remaining],
    }
