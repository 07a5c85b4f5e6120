"""Cases of exercise 301. Expected merged tensors are built by writing each shard into its row
range of a preallocated tensor (the shard offsets), not by concatenation."""

import torch
from judgekit.case import Case

SHARDS = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def expected_merge(sd: dict) -> dict:
    out = {}
    claimed = set()
    for key in sd:
        if key.count(".") < 2:
            continue  # e.g. lm_head.weight: never part of a group
        head, module, suffix = key.rsplit(".", 2)
        for merged, shards in SHARDS.items():
            if module == shards[0]:
                names = [f"{head}.{s}.{suffix}" for s in shards]
                rows = [sd[n].shape[0] for n in names]
                first = sd[names[0]]
                result = torch.empty((sum(rows), *first.shape[1:]), dtype=first.dtype)
                offset = 0
                for name, n in zip(names, rows):
                    result[offset:offset + n] = sd[name]
                    offset += n
                out[f"{head}.{merged}.{suffix}"] = result
                claimed.update(names)
    for key, value in sd.items():
        if key not in claimed:
            out[key] = value.clone()
    return out


def llama_like(gen, layers=2, hidden=16, heads=4, kv_heads=2, inter=24, bias=False,
               dtype=torch.float32, prefix="model") -> dict:
    head_dim = hidden // heads

    def rand(*shape):
        return torch.randn(shape, generator=gen).to(dtype)

    sd = {f"{prefix}.embed_tokens.weight": rand(32, hidden)}
    for i in range(layers):
        p = f"{prefix}.layers.{i}"
        sd[f"{p}.input_layernorm.weight"] = rand(hidden)
        for name, rows in (("q_proj", heads * head_dim), ("k_proj", kv_heads * head_dim),
                           ("v_proj", kv_heads * head_dim)):
            sd[f"{p}.self_attn.{name}.weight"] = rand(rows, hidden)
            if bias:
                sd[f"{p}.self_attn.{name}.bias"] = rand(rows)
        sd[f"{p}.self_attn.o_proj.weight"] = rand(hidden, heads * head_dim)
        sd[f"{p}.post_attention_layernorm.weight"] = rand(hidden)
        sd[f"{p}.mlp.gate_proj.weight"] = rand(inter, hidden)
        sd[f"{p}.mlp.up_proj.weight"] = rand(inter, hidden)
        sd[f"{p}.mlp.down_proj.weight"] = rand(hidden, inter)
    sd[f"{prefix}.norm.weight"] = rand(hidden)
    return sd


def _case(name, sd, visible=False) -> Case:
    return Case(name, {"state_dict": sd}, expected_merge(sd), visible=visible)


def cases() -> list:
    gen = torch.Generator().manual_seed(301)
    example = {
        "model.layers.0.self_attn.q_proj.weight": torch.full((4, 2), 1.0),
        "model.layers.0.self_attn.k_proj.weight": torch.full((2, 2), 2.0),
        "model.layers.0.self_attn.v_proj.weight": torch.full((2, 2), 3.0),
        "model.layers.0.self_attn.o_proj.weight": torch.zeros(2, 4),
        "model.layers.0.mlp.gate_proj.weight": torch.full((3, 2), 4.0),
        "model.layers.0.mlp.up_proj.weight": torch.full((3, 2), 5.0),
        "model.norm.weight": torch.ones(2),
    }
    shuffled = llama_like(gen, layers=3)
    order = torch.randperm(len(shuffled), generator=gen).tolist()
    keys = list(shuffled)
    shuffled = {keys[i]: shuffled[keys[i]] for i in order}
    moe = llama_like(gen, layers=1)
    del moe["model.layers.0.mlp.gate_proj.weight"], moe["model.layers.0.mlp.up_proj.weight"]
    for e in range(3):
        moe[f"model.layers.0.mlp.experts.{e}.gate_proj.weight"] = torch.randn(8, 16, generator=gen)
        moe[f"model.layers.0.mlp.experts.{e}.up_proj.weight"] = torch.randn(8, 16, generator=gen)
        moe[f"model.layers.0.mlp.experts.{e}.down_proj.weight"] = torch.randn(16, 8, generator=gen)
    missing = llama_like(gen, layers=2)
    del missing["model.layers.1.self_attn.v_proj.weight"]
    missing_up = llama_like(gen, layers=1)
    del missing_up["model.layers.0.mlp.up_proj.weight"]
    bad_shape = llama_like(gen, layers=1)
    bad_shape["model.layers.0.self_attn.k_proj.weight"] = torch.randn(8, 12, generator=gen)
    bad_dtype = llama_like(gen, layers=1)
    bad_dtype["model.layers.0.mlp.up_proj.weight"] = bad_dtype["model.layers.0.mlp.up_proj.weight"].half()
    only_bias = llama_like(gen, layers=1, bias=True)
    del only_bias["model.layers.0.self_attn.k_proj.bias"]
    return [
        _case("示例：一层，QKV 与 gate/up", example, visible=True),
        Case("示例：缺了 v_proj", {"state_dict": {"a.q_proj.weight": torch.zeros(2, 2),
                                                "a.k_proj.weight": torch.zeros(2, 2)}},
             raises="ValueError", visible=True),
        _case("Llama 式两层，GQA", llama_like(gen)),
        _case("Qwen2 式：q/k/v 带 bias", llama_like(gen, layers=2, bias=True)),
        _case("bfloat16，多一层前缀", llama_like(gen, layers=2, dtype=torch.bfloat16,
                                              prefix="model.language_model")),
        _case("键的顺序打乱", shuffled),
        _case("MoE：每个专家一组 gate/up", moe),
        _case("MHA：k、v 和 q 一样大", llama_like(gen, layers=1, heads=4, kv_heads=4)),
        _case("只有 norm 和 embedding", {"model.norm.weight": torch.randn(16, generator=gen),
                                       "lm_head.weight": torch.randn(32, 16, generator=gen)}),
        Case("第二层缺 v_proj", {"state_dict": missing}, raises="ValueError"),
        Case("缺 up_proj", {"state_dict": missing_up}, raises="ValueError"),
        Case("缺 k_proj.bias", {"state_dict": only_bias}, raises="ValueError"),
        Case("k_proj 的列数不对", {"state_dict": bad_shape}, raises="ValueError"),
        Case("up_proj 的 dtype 不对", {"state_dict": bad_dtype}, raises="ValueError"),
    ]
