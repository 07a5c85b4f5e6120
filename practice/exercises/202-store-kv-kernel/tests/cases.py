"""Cases of exercise 202. Each case is a self-checking CUDA program in this folder: it includes the
learner's store_kv.cu, launches store_kv_kernel<V> on random data in a pool poisoned with random
bytes, and compares the pool byte for byte with plain host-side row copies (store_kv_check.h). The
CPU emulator runs it and reports out-of-bounds reads and writes."""

from judgekit.case import Case


def _case(name: str, driver: str, visible: bool = False) -> Case:
    return Case(name, {"driver": f"tests/{driver}"}, visible=visible)


def cases() -> list:
    return [
        _case("示例 1：uint4，每行 2 KB，37 个 token", "uint4_2kb.cu", visible=True),
        _case("示例 2：uint16_t，每行 6 字节", "uint16_6bytes.cu", visible=True),
        _case("k、v、池子的行步长各不相同", "strides.cu"),
        _case("n = 1，写到池子的最后一个槽位", "one_token.cu"),
        _case("n = 13，每块 3 个 warp", "ragged.cu"),
        _case("按字节搬运，每行 7 字节", "odd_bytes.cu"),
        _case("256 个 token 的 prefill 分块", "many_tokens.cu"),
        _case("槽位号 × 行步长超过 2^31", "big_slots.cu"),
    ]
