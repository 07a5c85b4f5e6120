"""Reference solution of exercise 2101."""


def keep_workloads(calls, dedup_axes, cap):
    if cap < 0:
        raise ValueError("cap must be >= 0")
    kept, seen, counts = [], set(), {}
    for i, (name, axes) in enumerate(calls):
        if any(v < 0 for v in axes.values()):
            raise ValueError(f"call {i}: negative axis")
        if counts.get(name, 0) >= cap:
            continue
        key = (name, *((1 << (axes[a] - 1).bit_length()) if axes[a] > 0 else 0
                       for a in dedup_axes.get(name, []) if a in axes))
        if key in seen:
            continue
        seen.add(key)
        counts[name] = counts.get(name, 0) + 1
        kept.append(i)
    return kept
