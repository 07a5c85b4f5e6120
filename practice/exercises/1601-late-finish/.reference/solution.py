"""Reference solution of exercise 1601: the scheduler's loop, on lists instead of tensors."""


def overlap_timeline(max_tokens: list[int], sampled: list[list[int]], eos: int) -> dict:
    n = len(max_tokens)
    if n == 0 or len(sampled) != n:
        raise ValueError("one max_tokens and one sample list per request, at least one request")
    if any(m < 1 or len(s) < m for m, s in zip(max_tokens, sampled)):
        raise ValueError("max_tokens must be >= 1 and each request needs max_tokens samples")
    outputs: list[list[int]] = [[] for _ in range(n)]
    reasons: list[str | None] = [None] * n
    launched = [0] * n  # tokens launched per request: what the host knows without the values
    running: set[int] = set()
    batches: list[list[int]] = []
    in_flight: list[tuple[int, int]] | None = None  # (request, token) of the unread batch
    dropped = 0

    def launch(reqs: list[int]) -> list[tuple[int, int]]:
        batch = []
        for r in reqs:
            batch.append((r, sampled[r][launched[r]]))
            launched[r] += 1
            if launched[r] < max_tokens[r]:
                running.add(r)
            else:
                running.discard(r)  # finished by length: known at launch
        batches.append(list(reqs))
        return batch

    in_flight = launch(list(range(n)))  # step 0: the prefill
    while in_flight is not None:
        done = in_flight
        in_flight = launch(sorted(running)) if running else None
        for r, token in done:
            if reasons[r] is not None:
                dropped += 1  # sampled after the request had stopped
                continue
            outputs[r].append(token)
            if token == eos:
                reasons[r] = "stop"
                running.discard(r)
            elif len(outputs[r]) == max_tokens[r]:
                reasons[r] = "length"
    return {"outputs": outputs, "reasons": reasons, "batches": batches, "dropped": dropped}
