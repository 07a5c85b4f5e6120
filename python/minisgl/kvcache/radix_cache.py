"""The radix cache: a prefix tree over token ids whose edges own KV-pool slots (chapter 10).

Each node holds an edge: a run of token ids (`key`, a page multiple long) and the slots of
their K/V (`slots`). The path from the root to a node spells a cached prefix. Children are keyed
by their first page of ids, so at most one child can continue a given key at page granularity.

- Matching walks down comparing keys; when a match ends inside an edge it splits the edge at
  that page boundary, so the matched prefix always ends exactly at a node. That node is the
  handle a request locks.
- Locking adds 1 to `lock_ref` of every node up to the root. A node with lock_ref > 0 is
  protected; a node's lock_ref is therefore never smaller than any child's.
- Eviction frees unlocked leaves, least recently used first. `last_access` is a counter that
  every match and insert advances (not wall time, so tests are deterministic); a use touches
  the whole path, so a parent is never older than its children and evicting leaves first never
  removes a node something newer still hangs from.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from minisgl.kernel.radix import fast_compare_key

from .base import BasePrefixCache, InsertResult, MatchResult


@dataclass(eq=False)
class RadixNode:
    key: np.ndarray  # int32 [n]: the token ids of this edge, n a page multiple (0 for the root)
    slots: torch.Tensor  # int64 [n]: where their K/V live in the pool
    parent: RadixNode | None = None  # None for the root and for evicted nodes
    children: dict[tuple[int, ...], RadixNode] = field(default_factory=dict)
    lock_ref: int = 0  # how many locked handles sit at or below this node
    last_access: int = 0
    uid: int = 0  # creation order: breaks LRU ties in the heap, never compared otherwise

    def __len__(self) -> int:
        return len(self.key)


def _as_key(ids: Sequence[int] | torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(ids, torch.Tensor):
        return ids.detach().to("cpu", torch.int32).numpy()
    return np.ascontiguousarray(ids, dtype=np.int32)


class RadixCache(BasePrefixCache):
    def __init__(self, page_size: int, device: torch.device | str = "cpu") -> None:
        if page_size <= 0:
            raise ValueError(f"page_size must be > 0, got {page_size}")
        self.page_size = page_size
        self.device = torch.device(device)
        self._uids = itertools.count()
        self._clock = itertools.count(1)
        self._evictable = 0
        self._protected = 0
        self.root = self._new_root()

    # ---- the public interface -------------------------------------------------------------

    def match_prefix(self, ids: Sequence[int]) -> MatchResult:
        node, _, parts = self._walk(_as_key(ids), next(self._clock))
        return MatchResult(handle=node, slots=self._cat(parts))

    def insert(self, ids: Sequence[int], slots: torch.Tensor) -> InsertResult:
        if len(ids) != len(slots):
            raise ValueError(f"insert: {len(ids)} ids but {len(slots)} slots")
        n = self.align_down(len(ids))
        key = _as_key(ids)[:n]
        now = next(self._clock)
        node, had, _ = self._walk(key, now)
        if had < n:
            # Clone: the caller's tensor is often a view of its page-table row, which it reuses.
            new = slots[had:n].to(self.device, torch.int64).clone()
            self._add_leaf(node, key[had:].copy(), new, now)
        return InsertResult(had=had, owned=n)

    def lock(self, handle: object) -> None:
        for node in list(self._path_to_root(self._node(handle))):  # list: stale handles fail first
            if node.lock_ref == 0:
                self._evictable -= len(node)
                self._protected += len(node)
            node.lock_ref += 1

    def unlock(self, handle: object) -> None:
        start = self._node(handle)
        if start is not self.root and start.lock_ref <= 0:
            # Ancestors have lock_ref >= start's, so checking start keeps the whole path >= 0.
            raise RuntimeError("unlock of a handle that is not locked")
        for node in list(self._path_to_root(start)):
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._protected -= len(node)
                self._evictable += len(node)

    def evict(self, num_tokens: int) -> torch.Tensor:
        if num_tokens <= 0:
            return self._cat([])
        heap = [(n.last_access, n.uid, n) for n in self._nodes() if self._is_evictable_leaf(n)]
        heapq.heapify(heap)
        freed: list[torch.Tensor] = []
        count = 0
        while count < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            self._remove_leaf(node)
            freed.append(node.slots)
            count += len(node)
            if self._is_evictable_leaf(parent):  # its last child just went
                heapq.heappush(heap, (parent.last_access, parent.uid, parent))
        return self._cat(freed)

    @property
    def evictable_size(self) -> int:
        return self._evictable

    @property
    def protected_size(self) -> int:
        return self._protected

    def reset(self) -> torch.Tensor:
        if self._protected > 0:
            raise RuntimeError(f"reset with {self._protected} cached tokens still locked")
        slots = self._cat([n.slots for n in self._nodes() if n is not self.root])
        self.root = self._new_root()
        self._evictable = 0
        return slots

    def check_integrity(self) -> None:
        evictable = protected = 0
        all_slots: list[torch.Tensor] = []
        for node in self._nodes():
            self._check_node(node)
            if node is self.root:
                continue
            all_slots.append(node.slots)
            if node.lock_ref > 0:
                protected += len(node)
            else:
                evictable += len(node)
        _require(evictable == self._evictable,
                 f"evictable_size {self._evictable} but the tree has {evictable} unlocked tokens")
        _require(protected == self._protected,
                 f"protected_size {self._protected} but the tree has {protected} locked tokens")
        slots = self._cat(all_slots)
        _require(slots.unique().numel() == slots.numel(), "a slot is owned by two tree nodes")

    # ---- walking and reshaping the tree ---------------------------------------------------

    def _walk(self, key: np.ndarray, now: int) -> tuple[RadixNode, int, list[torch.Tensor]]:
        """Follow key down as far as whole pages match, splitting where the match stops.

        Returns the node where the match ends, its length, and the slots of each edge on the
        way. Every node on the path is touched with `now`.
        """
        node, pos, parts = self.root, 0, []
        node.last_access = now
        while len(key) - pos >= self.page_size:
            child = node.children.get(self._page_key(key, pos))
            if child is None:
                break
            common = self.align_down(fast_compare_key(child.key, key[pos:]))
            # common >= page_size: the child's first page equals this page of the key.
            if common < len(child):
                child = self._split(child, common)
            child.last_access = now
            parts.append(child.slots)
            node, pos = child, pos + common
        return node, pos, parts

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Cut child's edge after `at` tokens; return the new upper node.

        The lower part keeps the original node object, so a handle that points at it (a locked
        request) still ends at the same place. The upper node inherits lock_ref and
        last_access: every lock and every use that passed through child passed through it too.
        Views, not copies: nobody writes to a node's key or slots.
        """
        parent = child.parent
        assert parent is not None
        upper = RadixNode(key=child.key[:at], slots=child.slots[:at], parent=parent,
                          lock_ref=child.lock_ref, last_access=child.last_access,
                          uid=next(self._uids))
        parent.children[self._page_key(upper.key)] = upper
        child.key, child.slots, child.parent = child.key[at:], child.slots[at:], upper
        upper.children[self._page_key(child.key)] = child
        return upper

    def _add_leaf(self, parent: RadixNode, key: np.ndarray, slots: torch.Tensor,
                  now: int) -> None:
        leaf = RadixNode(key=key, slots=slots, parent=parent, last_access=now,
                         uid=next(self._uids))
        parent.children[self._page_key(key)] = leaf
        self._evictable += len(leaf)  # a new leaf is never locked, even under a locked parent

    def _remove_leaf(self, node: RadixNode) -> None:
        assert node.parent is not None and not node.children and node.lock_ref == 0
        del node.parent.children[self._page_key(node.key)]
        node.parent = None  # marks it detached: a stale handle to it is caught by _path_to_root
        self._evictable -= len(node)

    # ---- small helpers ----------------------------------------------------------------------

    def _new_root(self) -> RadixNode:
        empty_key = np.empty(0, dtype=np.int32)
        return RadixNode(key=empty_key, slots=self._cat([]), uid=next(self._uids))

    def _page_key(self, key: np.ndarray, pos: int = 0) -> tuple[int, ...]:
        return tuple(key[pos : pos + self.page_size].tolist())

    def _cat(self, parts: list[torch.Tensor]) -> torch.Tensor:
        if not parts:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return torch.cat(parts)

    def _node(self, handle: object) -> RadixNode:
        if not isinstance(handle, RadixNode):
            raise TypeError(f"not a RadixCache handle: {handle!r}")
        return handle

    def _path_to_root(self, node: RadixNode) -> Iterator[RadixNode]:
        """The nodes from node up to, but not including, the root."""
        while node is not self.root:
            if node.parent is None:
                raise RuntimeError("stale handle: its node was evicted or the cache was reset")
            yield node
            node = node.parent

    def _is_evictable_leaf(self, node: RadixNode) -> bool:
        return node is not self.root and not node.children and node.lock_ref == 0

    def _nodes(self) -> Iterator[RadixNode]:
        """Every node, root first (depth first, iterative: deep trees must not hit recursion)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _check_node(self, node: RadixNode) -> None:
        _require(node.lock_ref >= 0, f"node {node.uid} has lock_ref {node.lock_ref}")
        children_locks = 0
        for first_page, child in node.children.items():
            _require(child.parent is node, f"node {child.uid} has the wrong parent")
            _require(first_page == self._page_key(child.key),
                     f"node {child.uid} is filed under {first_page}, not its first page")
            _require(node is self.root or child.last_access <= node.last_access,
                     f"node {child.uid} was used more recently than its parent {node.uid}")
            children_locks += child.lock_ref
        _require(node is self.root or node.lock_ref >= children_locks,
                 f"node {node.uid} has lock_ref {node.lock_ref} < its children's {children_locks}")
        if node is self.root:
            _require(len(node) == 0 and node.parent is None, "the root has a key or a parent")
            return
        _require(len(node) > 0 and len(node) % self.page_size == 0,
                 f"node {node.uid} key length {len(node)} is not a positive page multiple")
        _require(node.key.dtype == np.int32, f"node {node.uid} key dtype {node.key.dtype}")
        _require(node.slots.dtype == torch.int64 and node.slots.dim() == 1,
                 f"node {node.uid} slots are {node.slots.dtype} with {node.slots.dim()} dims")
        _require(node.slots.numel() == len(node),
                 f"node {node.uid} has {node.slots.numel()} slots for {len(node)} ids")


def _require(condition: bool, message: str) -> None:
    # Not `assert`: these checks must survive `python -O`.
    if not condition:
        raise AssertionError(f"RadixCache integrity: {message}")
