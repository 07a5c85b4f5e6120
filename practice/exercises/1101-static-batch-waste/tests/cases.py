"""Cases of exercise 1101. Expected values come from the model below, which builds the static
batch's token grid row by row (left padding, then the prompt, then generated tokens, then the
positions a finished row keeps computing) and counts its cells, instead of using the formula."""

import random

from judgekit.case import Case

PAD, PROMPT, OUTPUT, WASTED = "pad", "prompt", "output", "wasted"


def model(requests: list[list[int]], elapsed_s: float):
    if not requests or not elapsed_s > 0:
        return "ValueError"
    width_in = max(r[0] for r in requests)
    width_out = max(r[1] for r in requests)
    grid = []
    for inp, out in requests:
        row = [PAD] * (width_in - inp) + [PROMPT] * inp + [OUTPUT] * out
        row += [WASTED] * (width_in + width_out - len(row))
        grid.append(row)
    cells = [c for row in grid for c in row]
    useful = cells.count(PROMPT) + cells.count(OUTPUT)
    return {
        "output_tokens": cells.count(OUTPUT),
        "throughput": cells.count(OUTPUT) / elapsed_s,
        "static_positions": len(cells),
        "continuous_positions": useful,
        "ratio": len(cells) / useful,
    }


def _case(name, requests, elapsed_s, visible=False) -> Case:
    args = {"requests": [list(r) for r in requests], "elapsed_s": elapsed_s}
    expected = model(args["requests"], elapsed_s)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible, rtol=1e-12)


def cases() -> list:
    rng = random.Random(1101)
    out = [
        _case("示例 1：三个长短不一的请求", [[2, 3], [4, 1], [1, 2]], 0.5, visible=True),
        _case("示例 2：长度都一样，没有浪费", [[8, 8], [8, 8]], 4.0, visible=True),
        _case("示例 3：没有请求", [], 1.0, visible=True),
        _case("只有一个请求", [[100, 20]], 3.0),
        _case("一个长输出拖住整个批次", [[16, 512]] + [[16, 4]] * 31, 12.5),
        _case("一个长 prompt 让其他请求都要补齐", [[4000, 16]] + [[50, 16]] * 15, 2.0),
        _case("elapsed_s 为 0", [[1, 1]], 0.0),
        _case("elapsed_s 为负", [[1, 1]], -1.0),
    ]
    for i in range(10):
        n = rng.randint(1, 64)
        requests = [[rng.randint(16, 256), rng.randint(16, 128)] for _ in range(n)]
        out.append(_case(f"随机 {i + 1}（benchmark 默认的长度范围）", requests,
                         round(rng.uniform(0.1, 60.0), 3)))
    return out
