"""Exercise 1501: which CUDA graph serves a decode batch, and how the batch is padded to it."""


def plan_decode_step(max_bs: int, kv_lens: list[int], table_idx: list[int], out_loc: list[int],
                     scratch_slot: int) -> dict:
    # TODO 1: 三个列表长度不同，或者批是空的：抛 ValueError
    # TODO 2: sizes = 阶梯：1、2、4（小于 max_bs 的），小于 max_bs 的 8 的倍数，最后是 max_bs；max_bs < 1 时为空
    # TODO 3: graph_bs = sizes 里不小于批大小的最小值；没有就是 None（这一步即时执行，不补齐）
    # TODO 4: 补齐行：kv_lens 补 0，table_idx 补 0，out_loc 补 scratch_slot
    raise NotImplementedError("请实现 plan_decode_step")
