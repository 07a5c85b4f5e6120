"""Exercise 1001: a radix tree over token ids that matches and inserts whole pages."""


class RadixTree:
    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        # TODO: 根节点。每个节点有一条边（一段 token id，长度是 page_size 的正整数倍）和它的子节点；
        #       子节点按它的边的第一页（前 page_size 个 id）查找

    def insert(self, ids: list[int]) -> int:
        # TODO: 只存 ids 的前 len(ids) // page_size * page_size 个 id；
        #       返回插入之前已经存在的长度（页的整数倍）。匹配停在一条边的中间时要把这条边拆开
        raise NotImplementedError("请实现 RadixTree.insert")

    def match(self, ids: list[int]) -> int:
        # TODO: 返回 ids 已经存在的最长前缀的长度（页的整数倍）
        raise NotImplementedError("请实现 RadixTree.match")


def run_ops(page_size: int, ops: list) -> list[int]:
    # 判题调用的是这个函数，不用改它
    tree = RadixTree(page_size)
    results = []
    for op, ids in ops:
        if op == "insert":
            results.append(tree.insert(list(ids)))
        elif op == "match":
            results.append(tree.match(list(ids)))
        else:
            raise ValueError(f"unknown op {op!r}")
    return results
