"""Cases of exercise 1901, drawn fresh on every run. The judge gives each case's data to the test
program tests/store_kv_driver.cu on stdin (its format is described there); the program runs the
learner's kernel once on a pool whose compared slots hold random bytes and writes those slots back.
The expected bytes come from the plain row copies in `_case` below, never from the program: it is
linked with the learner's code, so it could print or write anything (see practice/README.md)."""

import random
import struct
from dataclasses import dataclass

from judgekit.case import Case

DRIVER = "tests/store_kv_driver.cu"
ELEMENT_BYTES = {"uint4": 16, "uint32_t": 4, "uint16_t": 2, "uint8_t": 1}


@dataclass
class Shape:
    """One launch of store_kv_kernel<V>; lengths and strides in elements of V, as in the statement."""

    v: str
    slots: int
    n: int
    row: int
    cache_stride: int
    k_stride: int
    v_stride: int
    threads: int = 128
    extra_blocks: int = 0
    v_offset: int | None = None  # k_cache and v_cache in one buffer: v_cache = k_cache + v_offset
    must: tuple = ()  # slots that must be among the targets
    whole_pool: bool = True  # compare every slot, or only the targets, their neighbours and the ends


def _targets(rng: random.Random, shape: Shape) -> list[int]:
    picked = list(dict.fromkeys(shape.must))
    seen = set(picked)
    while len(picked) < shape.n:
        slot = rng.randrange(shape.slots)
        if slot not in seen:
            seen.add(slot)
            picked.append(slot)
    rng.shuffle(picked)
    return picked


def _about(shape: Shape, targets: list[int]) -> str:
    layout = (f"k_cache 与 v_cache 共用一个缓冲区，v_cache = k_cache + {shape.v_offset}"
              if shape.v_offset is not None else "k_cache、v_cache 各一个缓冲区")
    shown = ", ".join(map(str, targets[:40])) + ("……" if len(targets) > 40 else "")
    return (f"V = {shape.v}，n = {shape.n}，row = {shape.row}，cache_stride = {shape.cache_stride}，"
            f"k_stride = {shape.k_stride}，v_stride = {shape.v_stride}，threads = {shape.threads}，"
            f"多给的 block = {shape.extra_blocks}；池子 {shape.slots} 个槽位，{layout}；"
            f"indices = [{shown}]")


def _case(name: str, shape: Shape, rng: random.Random, visible: bool = False) -> Case:
    size = ELEMENT_BYTES[shape.v]
    one_buffer = shape.v_offset is not None
    targets = _targets(rng, shape)
    k = rng.randbytes(((shape.n - 1) * shape.k_stride + shape.row) * size)
    v = rng.randbytes(((shape.n - 1) * shape.v_stride + shape.row) * size)
    if shape.whole_pool:
        checked = list(range(shape.slots))
    else:
        near = {s + d for s in targets for d in (-1, 0, 1)} | {0, shape.slots - 1}
        checked = sorted(s for s in near if 0 <= s < shape.slots)
    slot_bytes = shape.cache_stride * size
    buffers = [("KV 池（k_cache 与 v_cache 共用的缓冲区）", 0)] if one_buffer else [
        ("k_cache", 0), ("v_cache", slot_bytes)]
    entry = len(buffers) * slot_bytes
    before = rng.randbytes(len(checked) * entry)

    # The reference: copy each token's rows into its target slot, byte by byte.
    expected = bytearray(before)
    where = {slot: i * entry for i, slot in enumerate(checked)}
    row_bytes = shape.row * size
    v_start = shape.v_offset * size if one_buffer else slot_bytes
    for t, slot in enumerate(targets):
        base = where[slot]
        expected[base:base + row_bytes] = k[t * shape.k_stride * size:][:row_bytes]
        expected[base + v_start:base + v_start + row_bytes] = v[t * shape.v_stride * size:][:row_bytes]

    owner = {slot: f"第 {t} 个新 token 的目标" for t, slot in enumerate(targets)}
    regions = [(where[slot] + offset, slot_bytes,
                f"{buffer} 的第 {slot} 号槽位（{owner.get(slot, '不该被写')}）")
               for slot in checked for buffer, offset in buffers]
    header = struct.pack("<12q", size, shape.slots, shape.n, shape.row, shape.cache_stride,
                         shape.k_stride, shape.v_stride, shape.threads, shape.extra_blocks,
                         int(one_buffer), shape.v_offset or 0, len(checked))
    data = (header + struct.pack(f"<{shape.n}i", *targets) + k + v
            + struct.pack(f"<{len(checked)}q", *checked) + before)
    return Case(name, {"driver": DRIVER, "input": data, "about": _about(shape, targets)},
                bytes(expected), visible=visible, regions=regions)


def cases() -> list:
    rng = random.Random()
    edge = 1 << 25  # from this slot on, slot × 64 bytes >= 2^31
    big = (1 << 25) + (1 << 23)  # a 2.5 GiB pool: only the targets and their neighbours compared
    return [
        # Qwen3-0.6B: 8 KV heads × 128 × bf16 = 2 KB per row, 128 uint4.
        _case("示例 1：uint4，每行 2 KB，37 个 token", Shape("uint4", 300, 37, 128, 128, 128, 128),
              rng, visible=True),
        _case("示例 2：uint16_t，每行 6 字节", Shape("uint16_t", 64, 17, 3, 3, 3, 3), rng,
              visible=True),
        _case("k、v、池子的行步长各不相同", Shape("uint32_t", 200, 29, 40, 64, 48, 72, threads=64),
              rng),
        _case("n = 1，写到池子的最后一个槽位",
              Shape("uint4", 50, 1, 256, 256, 256, 256, threads=256, extra_blocks=2, must=(49,)),
              rng),
        _case("n = 13，每块 3 个 warp", Shape("uint4", 100, 13, 40, 40, 40, 40, threads=96,
                                            must=(99,)), rng),
        _case("按字节搬运，每行 7 字节", Shape("uint8_t", 70, 33, 7, 7, 11, 9, threads=32, must=(69,)),
              rng),
        _case("256 个 token 的 prefill 分块",
              Shape("uint4", 1024, 256, 128, 128, 128, 128, must=(0, 1023)), rng),
        _case("槽位号 × 行步长超过 2^31",
              Shape("uint8_t", big, 24, 24, 64, 24, 24, v_offset=32, whole_pool=False,
                    must=(edge - 1, edge, edge + 1, big - 1)), rng),
    ]
