"""Reference solution of exercise 1001."""


class Node:
    def __init__(self, key: tuple[int, ...]) -> None:
        self.key = key  # the token ids of the edge into this node, a page multiple long
        self.children: dict[tuple[int, ...], Node] = {}  # keyed by the child's first page


class RadixTree:
    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.root = Node(())

    def _page(self, ids: tuple[int, ...], pos: int = 0) -> tuple[int, ...]:
        return ids[pos : pos + self.page_size]

    def _walk(self, ids: tuple[int, ...]) -> tuple[Node, int]:
        """Descend while whole pages match; split the edge where the match stops inside it."""
        node, pos = self.root, 0
        while len(ids) - pos >= self.page_size:
            child = node.children.get(self._page(ids, pos))
            if child is None:
                break
            key, common = child.key, 0
            limit = min(len(key), len(ids) - pos)
            while common < limit and key[common] == ids[pos + common]:
                common += 1
            common -= common % self.page_size  # only whole pages count
            if common < len(key):
                child = self._split(node, child, common)
            node, pos = child, pos + common
        return node, pos

    def _split(self, parent: Node, child: Node, at: int) -> Node:
        upper = Node(child.key[:at])
        parent.children[self._page(upper.key)] = upper
        child.key = child.key[at:]
        upper.children[self._page(child.key)] = child
        return upper

    def insert(self, ids: list[int]) -> int:
        n = len(ids) - len(ids) % self.page_size
        key = tuple(ids[:n])
        node, had = self._walk(key)
        if had < n:
            node.children[self._page(key, had)] = Node(key[had:])
        return had

    def match(self, ids: list[int]) -> int:
        return self._walk(tuple(ids))[1]


def run_ops(page_size: int, ops: list) -> list[int]:
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
