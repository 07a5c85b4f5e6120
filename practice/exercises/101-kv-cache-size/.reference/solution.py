"""Reference solution of exercise 101."""

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def kv_cache_budget(config: dict, budget_bytes: int, page_size: int, request_len: int) -> dict:
    num_heads = config["num_attention_heads"]
    num_kv_heads = config.get("num_key_value_heads") or num_heads
    head_dim = config.get("head_dim") or config["hidden_size"] // num_heads
    dtype = config.get("torch_dtype") or config.get("dtype") or "float32"
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unsupported dtype {dtype!r}")
    bytes_per_token = 2 * config["num_hidden_layers"] * num_kv_heads * head_dim * DTYPE_BYTES[dtype]
    num_pages = budget_bytes // (bytes_per_token * page_size)
    pages_per_request = (request_len + page_size - 1) // page_size
    return {
        "bytes_per_token": bytes_per_token,
        "num_pages": num_pages,
        "num_tokens": num_pages * page_size,
        "pages_per_request": pages_per_request,
        "max_requests": num_pages // pages_per_request,
    }
