"""Reference solution of exercise 2701."""


def cache_aware_route(texts, num_workers, loads=None, cache_threshold=0.5, balance_abs=32,
                      balance_rel=1.5):
    if num_workers < 1:
        raise ValueError("num_workers must be >= 1")
    loads = [[0] * num_workers for _ in texts] if loads is None else loads
    if len(loads) != len(texts) or any(len(row) != num_workers for row in loads):
        raise ValueError("loads must have one row of num_workers loads per request")
    if not 0 <= cache_threshold <= 1:
        raise ValueError("cache_threshold must be in [0, 1]")
    root: dict = {"kids": {}, "seen": {}}
    size = [0] * num_workers
    out = []
    for i, (text, load) in enumerate(zip(texts, loads)):
        if max(load) - min(load) > balance_abs and max(load) > balance_rel * min(load):
            worker = load.index(min(load))
        else:
            node, depth = root, 0
            for ch in text:
                if ch not in node["kids"]:
                    break
                node, depth = node["kids"][ch], depth + 1
            rate = depth / len(text) if text else 0.0
            if rate > cache_threshold:
                worker = max(node["seen"], key=node["seen"].get)
            else:
                worker = size.index(min(size))
        node = root
        for ch in text:
            node = node["kids"].setdefault(ch, {"kids": {}, "seen": {}})
            if worker not in node["seen"]:
                size[worker] += 1
            node["seen"][worker] = i
        out.append(worker)
    return out
