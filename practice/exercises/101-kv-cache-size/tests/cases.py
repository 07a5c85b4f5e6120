"""Cases of exercise 101. Expected values come from the plain model below, which walks the layers
and pages one by one instead of using the closed-form formulas of the statement."""

import random

from judgekit.case import Case

ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def model(config: dict, budget_bytes: int, page_size: int, request_len: int) -> dict:
    heads = config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"] if config.get("num_key_value_heads") is not None else heads
    head_dim = config["head_dim"] if config.get("head_dim") is not None else config["hidden_size"] // heads
    dtype = "float32"
    for key in ("dtype", "torch_dtype"):  # later keys win: torch_dtype over dtype
        if config.get(key) is not None:
            dtype = config[key]
    per_layer = 0
    for _tensor in ("k", "v"):
        per_layer += kv_heads * head_dim * ELEMENT_BYTES[dtype]
    per_token = per_layer * config["num_hidden_layers"]
    pages = divmod(budget_bytes, per_token * page_size)[0]
    full, rest = divmod(request_len, page_size)
    per_request = full + (1 if rest else 0)
    return {
        "bytes_per_token": per_token,
        "num_pages": pages,
        "num_tokens": pages * page_size,
        "pages_per_request": per_request,
        "max_requests": divmod(pages, per_request)[0],
    }


def _case(name, config, budget, page, length, visible=False) -> Case:
    args = {"config": config, "budget_bytes": budget, "page_size": page, "request_len": length}
    return Case(name, args, model(**args), visible=visible)


def cases() -> list:
    qwen3 = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
             "head_dim": 128, "num_hidden_layers": 28, "torch_dtype": "bfloat16"}
    smollm = {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
              "num_hidden_layers": 30, "torch_dtype": "bfloat16"}
    tiny = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    out = [
        _case("示例 1：Qwen3-0.6B，8 GiB", qwen3, 8 * 2**30, 16, 1000, visible=True),
        _case("示例 2：SmolLM2-135M，没有 head_dim", smollm, 4 * 2**30, 16, 2048, visible=True),
        _case("示例 3：一页都放不下", tiny, 1000, 4, 5, visible=True),
        _case("新版 transformers 的 dtype 键", {**qwen3, "torch_dtype": None, "dtype": "float16"},
              80 * 10**9, 64, 4096),
        _case("torch_dtype 优先于 dtype", {**smollm, "dtype": "float32"}, 10**10, 1, 77),
        _case("head_dim 为 None", {**qwen3, "head_dim": None}, 3 * 2**30 + 12345, 128, 128),
        _case("num_key_value_heads 为 None", {**smollm, "num_key_value_heads": None},
              2**33 - 1, 32, 33),
        Case("不认识的 dtype 要抛 ValueError", {"config": {**tiny, "torch_dtype": "int4"},
             "budget_bytes": 2**20, "page_size": 1, "request_len": 1}, raises="ValueError"),
    ]
    rng = random.Random(101)
    for i in range(12):
        heads = rng.choice([8, 12, 16, 32, 40, 64])
        config = {
            "hidden_size": heads * rng.choice([64, 80, 128]),
            "num_attention_heads": heads,
            "num_hidden_layers": rng.randint(1, 96),
        }
        if rng.random() < 0.8:
            config["num_key_value_heads"] = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
        if rng.random() < 0.5:
            config["head_dim"] = rng.choice([64, 96, 128, 256])
        key = rng.choice(["torch_dtype", "dtype", None])
        if key:
            config[key] = rng.choice(list(ELEMENT_BYTES))
        budget = rng.randint(0, 141 * 10**9)
        page = rng.choice([1, 2, 16, 64, 256])
        length = page * rng.randint(1, 64) + rng.choice([0, 0, 1, page - 1])
        out.append(_case(f"随机配置 {i + 1}", config, budget, page, max(length, 1)))
    return out
