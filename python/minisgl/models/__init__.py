"""Model definitions (Llama, Qwen2, Qwen3) and what they need: config, weights, registry."""
