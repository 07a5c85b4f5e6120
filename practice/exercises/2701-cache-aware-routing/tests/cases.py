"""Cases of exercise 2701. Expected values come from the model below, which keeps every routed
text in a list and compares the new one with each of them (os.path.commonprefix), instead of a
tree: slow, but with nothing in common with a tree's code."""

import os
import random

from judgekit.case import Case


def model(texts, num_workers, loads, cache_threshold, balance_abs, balance_rel):
    if num_workers < 1:
        return "ValueError"
    loads = [[0] * num_workers for _ in texts] if loads is None else loads
    if len(loads) != len(texts) or any(len(row) != num_workers for row in loads):
        return "ValueError"
    if not 0 <= cache_threshold <= 1:
        return "ValueError"
    routed = []  # (text, worker, request index), in order
    out = []
    for i, (text, load) in enumerate(zip(texts, loads)):
        if max(load) - min(load) > balance_abs and max(load) > balance_rel * min(load):
            worker = min(range(num_workers), key=lambda w: (load[w], w))
        else:
            best, owners = 0, {}
            for old, w, j in routed:
                n = len(os.path.commonprefix([old, text]))
                if n > best:
                    best, owners = n, {}
                if n == best and n > 0:
                    owners[w] = j  # later requests overwrite: the most recent toucher
            rate = best / len(text) if text else 0.0
            if rate > cache_threshold:
                worker = max(owners, key=owners.get)
            else:
                sizes = []
                for w in range(num_workers):
                    mine = [old for old, ww, _ in routed if ww == w]
                    sizes.append(len({old[:k] for old in mine for k in range(1, len(old) + 1)})
                                 if len(mine) < 60 else _size(mine))
                worker = min(range(num_workers), key=lambda w: (sizes[w], w))
        routed.append((text, worker, i))
        out.append(worker)
    return out


def _size(texts):
    """Distinct non-empty prefixes of `texts`: sorted, each adds what it does not share with the
    one before it (the longest shared prefix with any other is with a neighbour)."""
    texts = sorted(set(texts))
    total, prev = 0, ""
    for t in texts:
        total += len(t) - len(os.path.commonprefix([prev, t]))
        prev = t
    return total


def _case(name, texts, num_workers, loads=None, cache_threshold=0.5, balance_abs=32,
          balance_rel=1.5, visible=False) -> Case:
    args = {"texts": texts, "num_workers": num_workers, "loads": loads,
            "cache_threshold": cache_threshold, "balance_abs": balance_abs,
            "balance_rel": balance_rel}
    expected = model(**args)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def _groups(rng, groups, per_group, prefix_len, alphabet="abcdefghij"):
    prefixes = [f"g{g}:" + "".join(rng.choice(alphabet) for _ in range(prefix_len))
                for g in range(groups)]
    texts = [p + f" q{rng.randrange(10**6)}" for p in prefixes for _ in range(per_group)]
    rng.shuffle(texts)
    return texts


def cases() -> list:
    rng = random.Random(2701)
    example = ["hello world", "hello there", "goodbye", "hello world!"]
    shared = _groups(rng, 6, 5, 60)
    busy = [[rng.randrange(0, 80) for _ in range(3)] for _ in shared]
    skewed = [[100, 2, 50] if i % 3 == 0 else [5, 5, 5] for i in range(len(shared))]
    big = _groups(rng, 40, 8, 1200)
    return [
        _case("示例", example, 2, visible=True),
        _case("一个服务", example, 1),
        _case("分组的共享前缀，2 个服务", shared, 2),
        _case("分组的共享前缀，4 个服务", shared, 4),
        _case("阈值 0：任何一点匹配都算", example + ["h", "good", "x"], 3, cache_threshold=0.0),
        _case("阈值 1：从不按匹配选", shared[:12], 3, cache_threshold=1.0),
        _case("空文本", ["", "a", "", "ab"], 2),
        _case("同一个前缀先后给了两个服务：最近的那个", ["abcdef", "abcdef", "abcdeX"], 2,
              loads=[[0, 0], [40, 0], [0, 0]]),
        _case("负载失衡：最短队列，但树照样记", shared, 3, loads=skewed),
        _case("随机负载", shared, 3, loads=busy, balance_abs=20, balance_rel=1.2),
        _case("中文文本", ["系统提示：你是助手。问题一", "系统提示：你是助手。问题二", "别的"], 2),
        _case("几百个上千字符的请求", big, 4),
        _case("num_workers = 0", ["a"], 0),
        _case("loads 少一行", ["a", "b"], 2, loads=[[0, 0]]),
        _case("loads 一行的长度不对", ["a"], 2, loads=[[0, 0, 0]]),
        _case("cache_threshold = 1.5", ["a"], 2, cache_threshold=1.5),
    ]
