"""Reference solution of exercise 2301."""


def decode_step(cfg, batch, context, dtype_bytes, bytes_per_s, flops_per_s):
    if batch < 1 or context < 0 or dtype_bytes < 1 or bytes_per_s < 1 or flops_per_s < 1:
        raise ValueError("batch, dtype_bytes and the hardware limits must be >= 1, context >= 0")
    h, d, layers = cfg["hidden_size"], cfg["head_dim"], cfg["num_layers"]
    qo, kv = cfg["num_qo_heads"], cfg["num_kv_heads"]
    per_layer = h * (qo + 2 * kv) * d + qo * d * h + 3 * h * cfg["intermediate_size"]
    params = layers * per_layer + cfg["vocab_size"] * h
    step_bytes = params * dtype_bytes + batch * context * 2 * layers * kv * d * dtype_bytes
    step_flops = batch * (2 * params + 4 * layers * qo * d * context)
    bound = "memory" if step_flops * bytes_per_s < flops_per_s * step_bytes else "compute"
    return {"params": params, "step_bytes": step_bytes, "step_flops": step_flops, "bound": bound}
