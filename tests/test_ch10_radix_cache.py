"""Chapter 10: the radix cache against a plain-Python model, plus its C++ key compare.

The model keeps one entry per cached page: a dict from the page-aligned token prefix that ends
with that page to the page's slots, a lock count per prefix, and the clock tick of its last use.
It knows nothing about tree nodes, so agreeing with it after every random step checks matching,
splitting, locking and LRU eviction without trusting the tree's own structure.
"""

from __future__ import annotations

import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from minisgl.kernel import radix
from minisgl.kvcache import InsertResult, RadixCache, create_prefix_cache

# ---- the model -----------------------------------------------------------------------------


class ModelCache:
    def __init__(self, page_size: int) -> None:
        self.ps = page_size
        self.pages: dict[tuple[int, ...], list[int]] = {}  # prefix -> slots of its last page
        self.locks: Counter[tuple[int, ...]] = Counter()
        self.used: dict[tuple[int, ...], int] = {}
        self.clock = 0

    def prefixes(self, ids: list[int], upto: int) -> list[tuple[int, ...]]:
        return [tuple(ids[:end]) for end in range(self.ps, upto + 1, self.ps)]

    def match(self, ids: list[int]) -> list[int]:
        self.clock += 1
        slots: list[int] = []
        for prefix in self.prefixes(ids, len(ids)):
            if prefix not in self.pages:
                break
            slots += self.pages[prefix]
            self.used[prefix] = self.clock
        return slots

    def insert(self, ids: list[int], slots: list[int]) -> InsertResult:
        self.clock += 1
        n = len(ids) // self.ps * self.ps
        had = n
        for prefix in self.prefixes(ids, n):
            if prefix not in self.pages:
                had = min(had, len(prefix) - self.ps)
                self.pages[prefix] = slots[len(prefix) - self.ps : len(prefix)]
            self.used[prefix] = self.clock
        return InsertResult(had=had, owned=n)

    def lock(self, ids: list[int], length: int, delta: int) -> None:
        for prefix in self.prefixes(ids, length):
            self.locks[prefix] += delta
            assert self.locks[prefix] >= 0

    def protected(self) -> int:
        return self.ps * sum(1 for prefix in self.pages if self.locks[prefix] > 0)

    def evictable(self) -> int:
        return self.ps * len(self.pages) - self.protected()

    def locked_slots(self) -> set[int]:
        return {s for p, slots in self.pages.items() if self.locks[p] > 0 for s in slots}

    def evict_pages(self, count: int) -> set[int]:
        """Free `count` pages one by one, always the least recently used unlocked leaf."""
        freed: set[int] = set()
        for _ in range(count):
            parents = {prefix[: -self.ps] for prefix in self.pages}
            leaves = [p for p in self.pages if p not in parents and self.locks[p] == 0]
            assert leaves, "the tree freed more than the model can"
            oldest = min(self.used[p] for p in leaves)
            victims = [p for p in leaves if self.used[p] == oldest]
            assert len(victims) == 1, "two leaves used at the same tick: LRU order is ambiguous"
            freed |= set(self.pages.pop(victims[0]))
            self.used.pop(victims[0])
        return freed


def tree_pages(cache: RadixCache) -> tuple[dict[tuple[int, ...], list[int]], dict]:
    """The tree flattened into the model's form: prefix -> page slots, prefix -> lock count."""
    ps = cache.page_size
    pages: dict[tuple[int, ...], list[int]] = {}
    locks: dict[tuple[int, ...], int] = {}
    stack = [((), cache.root)]
    while stack:
        prefix, node = stack.pop()
        for child in node.children.values():
            key, slots, path = child.key.tolist(), child.slots.tolist(), prefix
            for i in range(0, len(key), ps):
                path = path + tuple(key[i : i + ps])
                pages[path] = slots[i : i + ps]
                if child.lock_ref:
                    locks[path] = child.lock_ref
            stack.append((path, child))
    return pages, locks


# ---- the state machine -----------------------------------------------------------------------

NUM_PAGES = 32  # small enough that allocation has to evict, big enough never to run dry
MAX_PENDING = 2  # each holds at most 6 pages plus a locked 5-page prefix
MAX_KEY_PAGES = 5


def template(k: int, ps: int) -> list[int]:
    """Four page contents; page 3 equals page 0 except its last token (divergence mid-page)."""
    return [0] * (ps - 1) + [3] if k == 3 else [k] * ps


def make_ids(spec: tuple[list[int], int], ps: int) -> list[int]:
    page_ids, tail = spec
    ids = [t for k in page_ids for t in template(k, ps)]
    return ids + [0] * (tail % ps)  # a partial page that may prefix-match a cached page


key_specs = st.tuples(st.lists(st.integers(0, 3), max_size=MAX_KEY_PAGES), st.integers(0, 15))


@dataclass
class Pending:
    """A running request: it matched (and locked) a prefix and allocated pages for the rest."""

    ids: list[int]
    handle: object
    matched: list[int]
    pages: list[int]


class RadixMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cache: RadixCache | None = None

    @initialize(ps=st.sampled_from([1, 2, 4, 16]))
    def setup(self, ps: int) -> None:
        self.ps = ps
        self.cache = RadixCache(ps)
        self.model = ModelCache(ps)
        self.free_pages = list(range(NUM_PAGES))
        self.pending: list[Pending] = []
        self.evicted: set[int] = set()  # evicted slots not handed out again since

    # ---- harness: the allocator and checked calls ----

    def slots_of(self, pages: list[int], n: int) -> list[int]:
        return [p * self.ps + o for p in pages for o in range(self.ps)][:n]

    def alloc(self, num_tokens: int) -> list[int]:
        need = -(-num_tokens // self.ps)
        if need > len(self.free_pages):
            self.evict_checked((need - len(self.free_pages)) * self.ps)
        assert need <= len(self.free_pages), "test sizing: the pool ran dry"
        pages = [self.free_pages.pop() for _ in range(need)]
        self.evicted -= set(self.slots_of(pages, need * self.ps))
        return pages

    def evict_checked(self, n: int) -> None:
        before, locked = self.model.evictable(), self.model.locked_slots()
        out = self.cache.evict(n)
        assert out.dtype == torch.int64 and out.numel() % self.ps == 0
        freed = out.tolist()
        assert len(set(freed)) == len(freed), "evict returned a slot twice"
        assert len(freed) >= min(max(n, 0), before), "evict freed less than it could"
        assert len(freed) <= before and (n > 0 or not freed)
        assert not set(freed) & locked, "evict freed locked tokens"
        assert set(freed) == self.model.evict_pages(len(freed) // self.ps), "not LRU order"
        rows = out.view(-1, self.ps)
        pages = rows[:, 0] // self.ps
        assert torch.equal(rows, pages[:, None] * self.ps + torch.arange(self.ps)), "page split"
        self.free_pages += pages.tolist()
        self.evicted |= set(freed)

    def match_checked(self, ids: list[int]):
        result = self.cache.match_prefix(ids)
        expected = self.model.match(ids)
        assert result.slots.dtype == torch.int64
        assert result.slots.tolist() == expected and result.length == len(expected)
        assert not set(expected) & self.evicted, "match returned an evicted slot"
        return result

    def insert_checked(self, ids: list[int], slots: list[int]) -> InsertResult:
        result = self.cache.insert(ids, torch.tensor(slots, dtype=torch.int64))
        assert result == self.model.insert(ids, slots)
        return result

    # ---- rules ----

    @precondition(lambda self: len(self.pending) < MAX_PENDING)
    @rule(spec=key_specs)
    def start_request(self, spec: tuple[list[int], int]) -> None:
        ids = make_ids(spec, self.ps)
        result = self.match_checked(ids)
        self.cache.lock(result.handle)
        self.model.lock(ids, result.length, +1)
        pages = self.alloc(len(ids) - result.length)  # after lock: eviction can't take our prefix
        self.pending.append(Pending(ids, result.handle, result.slots.tolist(), pages))

    @precondition(lambda self: len(self.pending) > 0)
    @rule(data=st.data(), abort=st.booleans())
    def finish_request(self, data: st.DataObject, abort: bool) -> None:
        req = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        shared = len(req.matched)
        give_back = req.pages
        if not abort:
            slots = req.matched + self.slots_of(req.pages, len(req.ids) - shared)
            result = self.insert_checked(req.ids, slots)
            assert result.had >= shared
            # Our pages cover [shared, ...): those before `had` are duplicates, those from
            # `owned` on hold the unaligned tail; the cache took the ones in between.
            first_taken, end_taken = (result.had - shared) // self.ps, (result.owned - shared) // self.ps
            give_back = req.pages[:first_taken] + req.pages[end_taken:]
        self.cache.unlock(req.handle)
        self.model.lock(req.ids, shared, -1)
        self.free_pages += give_back

    @rule(spec=key_specs)
    def insert_fresh(self, spec: tuple[list[int], int]) -> None:
        """Insert without matching first: every already-cached page comes back as a duplicate."""
        ids = make_ids(spec, self.ps)
        pages = self.alloc(len(ids))
        result = self.insert_checked(ids, self.slots_of(pages, len(ids)))
        self.free_pages += pages[: result.had // self.ps] + pages[result.owned // self.ps :]

    @rule(spec=key_specs)
    def match(self, spec: tuple[list[int], int]) -> None:
        self.match_checked(make_ids(spec, self.ps))

    @rule(n=st.integers(-1, 48))
    def evict(self, n: int) -> None:
        self.evict_checked(n)

    # ---- invariants ----

    @invariant()
    def agrees_with_model(self) -> None:
        if self.cache is None:
            return
        self.cache.check_integrity()
        pages, locks = tree_pages(self.cache)
        assert pages == self.model.pages
        assert locks == {p: n for p, n in self.model.locks.items() if n > 0}
        assert self.cache.evictable_size == self.model.evictable()
        assert self.cache.protected_size == self.model.protected()

    @invariant()
    def every_page_has_one_owner(self) -> None:
        if self.cache is None:
            return
        cached = [slots[0] // self.ps for slots in self.model.pages.values()]
        held = [p for req in self.pending for p in req.pages]
        owners = self.free_pages + held + cached
        assert sorted(owners) == list(range(NUM_PAGES)), "a page was lost or owned twice"

    def teardown(self) -> None:
        if self.cache is None:
            return
        if self.model.protected() > 0:
            with pytest.raises(RuntimeError):
                self.cache.reset()
        for req in self.pending:
            self.cache.unlock(req.handle)
        owned = sorted(s for slots in self.model.pages.values() for s in slots)
        assert sorted(self.cache.reset().tolist()) == owned
        self.cache.check_integrity()
        assert self.cache.evictable_size == self.cache.protected_size == 0


TestRadixCacheAgainstModel = RadixMachine.TestCase
TestRadixCacheAgainstModel.settings = settings(max_examples=200, stateful_step_count=40,
                                               deadline=None)


# ---- unit tests -------------------------------------------------------------------------------


def _slots(n: int, start: int = 0) -> torch.Tensor:
    return torch.arange(start, start + n, dtype=torch.int64)


def test_match_inside_a_node_splits_it_at_a_page_boundary():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4, 5, 6, 7, 8], _slots(8))
    (only,) = cache.root.children.values()
    result = cache.match_prefix([1, 2, 3, 4, 5, 9])  # diverges mid-page: only 4 tokens count
    assert result.length == 4 and result.slots.tolist() == [0, 1, 2, 3]
    (upper,) = cache.root.children.values()
    assert upper.key.tolist() == [1, 2, 3, 4] and result.handle is upper
    (lower,) = upper.children.values()
    assert lower is only and lower.key.tolist() == [5, 6, 7, 8]  # the old node keeps the tail
    cache.check_integrity()
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8]).slots.tolist() == list(range(8))


def test_insert_diverging_key_shares_the_prefix_node():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4], _slots(4))
    result = cache.insert([1, 2, 9, 9, 5, 5], _slots(6, start=10))
    assert result == InsertResult(had=2, owned=6)  # the caller frees its slots 10, 11
    assert cache.match_prefix([1, 2, 9, 9, 5, 5]).slots.tolist() == [0, 1, 12, 13, 14, 15]
    assert cache.evictable_size == 8
    cache.check_integrity()


def test_insert_truncates_to_whole_pages():
    cache = RadixCache(page_size=4)
    assert cache.insert(list(range(10)), _slots(10)) == InsertResult(had=0, owned=8)
    assert cache.evictable_size == 8
    assert cache.match_prefix(list(range(10))).length == 8
    assert cache.match_prefix(list(range(7))).length == 4  # a partial page never matches
    assert cache.insert([0, 1, 2], _slots(3)) == InsertResult(had=0, owned=0)


def test_insert_of_a_cached_key_takes_no_slots():
    cache = RadixCache(page_size=1)
    cache.insert([5, 6, 7], _slots(3))
    assert cache.insert([5, 6, 7], _slots(3, start=100)) == InsertResult(had=3, owned=3)
    assert cache.match_prefix([5, 6, 7]).slots.tolist() == [0, 1, 2]


def test_insert_copies_the_callers_slots():
    cache = RadixCache(page_size=1)
    row = _slots(3)
    cache.insert([1, 2, 3], row)
    row.fill_(-1)  # the caller reuses its page-table row
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == [0, 1, 2]


def test_evicts_least_recently_used_leaf_first():
    cache = RadixCache(page_size=2)
    cache.insert([1, 1], _slots(2, 0))
    cache.insert([2, 2], _slots(2, 2))
    cache.insert([3, 3], _slots(2, 4))
    cache.match_prefix([1, 1])  # now [2, 2] is the oldest, then [3, 3]
    assert cache.evict(1).tolist() == [2, 3]  # a whole page, though 1 token was asked for
    assert cache.evict(2).tolist() == [4, 5]
    assert cache.evict(10).tolist() == [0, 1]  # all there is
    assert cache.evict(10).numel() == 0 and cache.evictable_size == 0
    cache.check_integrity()


def test_parent_becomes_evictable_after_its_children():
    cache = RadixCache(page_size=1)
    cache.insert([1, 2], _slots(2))
    cache.insert([1, 3], _slots(2, 10))  # the node [1] now has children [2] and [3]
    assert sorted(cache.evict(3).tolist()) == [0, 1, 11]


def test_locked_path_is_not_evicted():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4], _slots(4))
    cache.insert([7, 7], _slots(2, 10))
    handle = cache.match_prefix([1, 2, 3, 4]).handle
    cache.lock(handle)
    assert (cache.evictable_size, cache.protected_size) == (2, 4)
    assert cache.evict(100).tolist() == [10, 11]  # fewer than asked: the rest is locked
    cache.unlock(handle)
    assert (cache.evictable_size, cache.protected_size) == (4, 0)
    assert cache.evict(100).tolist() == [0, 1, 2, 3]


def test_lock_survives_a_later_split():
    cache = RadixCache(page_size=1)
    cache.insert([1, 2, 3], _slots(3))
    handle = cache.match_prefix([1, 2, 3]).handle
    cache.lock(handle)
    cache.match_prefix([1, 9])  # splits the locked node into [1] + [2, 3]
    assert cache.protected_size == 3
    cache.check_integrity()
    cache.unlock(handle)
    assert (cache.evictable_size, cache.protected_size) == (3, 0)
    cache.check_integrity()


def test_unlock_without_lock_and_stale_handles_raise():
    cache = RadixCache(page_size=1)
    cache.insert([1], _slots(1))
    handle = cache.match_prefix([1]).handle
    with pytest.raises(RuntimeError, match="not locked"):
        cache.unlock(handle)
    cache.evict(1)
    with pytest.raises(RuntimeError, match="stale"):
        cache.lock(handle)
    with pytest.raises(TypeError):
        cache.lock(None)
    cache.check_integrity()


def test_reset_returns_every_slot():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4], _slots(4))
    cache.insert([1, 2, 5, 6], _slots(4, 10))
    assert sorted(cache.reset().tolist()) == [0, 1, 2, 3, 12, 13]
    assert cache.evictable_size == 0 and cache.match_prefix([1, 2]).length == 0
    assert cache.reset().numel() == 0
    cache.check_integrity()


def test_reset_while_locked_raises():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2], _slots(2))
    handle = cache.match_prefix([1, 2]).handle
    cache.lock(handle)
    with pytest.raises(RuntimeError, match="locked"):
        cache.reset()
    cache.unlock(handle)
    assert cache.reset().tolist() == [0, 1]


def test_empty_match_handle_locks_nothing():
    cache = RadixCache(page_size=4)
    result = cache.match_prefix([1, 2, 3])
    assert result.length == 0 and result.slots.dtype == torch.int64
    cache.lock(result.handle)
    cache.unlock(result.handle)
    assert cache.protected_size == 0


def test_check_integrity_catches_corruption():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4], _slots(4))
    (node,) = cache.root.children.values()
    node.lock_ref = -1
    with pytest.raises(AssertionError, match="lock_ref"):
        cache.check_integrity()
    node.lock_ref = 0
    node.slots = node.slots[:3]
    with pytest.raises(AssertionError, match="slots"):
        cache.check_integrity()


def test_insert_length_mismatch_raises():
    with pytest.raises(ValueError):
        RadixCache(page_size=1).insert([1, 2], _slots(3))


def test_create_prefix_cache():
    assert isinstance(create_prefix_cache("radix", 4), RadixCache)
    with pytest.raises(ValueError, match="radix"):
        create_prefix_cache("lru", 4)


# ---- fast_compare_key ---------------------------------------------------------------------------


def _key_pairs() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    empty = np.empty(0, dtype=np.int32)
    pairs = [(empty, empty), (empty, np.arange(3, dtype=np.int32)),
             (np.arange(5, dtype=np.int32), np.arange(8, dtype=np.int32))]
    for _ in range(200):
        a = rng.integers(0, 3, size=rng.integers(0, 40), dtype=np.int32)
        b = a.copy() if rng.random() < 0.5 else rng.integers(0, 3, size=len(a), dtype=np.int32)
        cut = rng.integers(0, len(b) + 1)
        b = np.concatenate([b[:cut], rng.integers(0, 3, size=rng.integers(0, 5), dtype=np.int32)])
        pairs.append((a, b))
    return pairs


def _reference(a: np.ndarray, b: np.ndarray) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_cpp_compare_matches_numpy_fallback(tmp_path, monkeypatch):
    monkeypatch.delenv(radix.DISABLE_ENV, raising=False)
    lib = radix.load_library(tmp_path)  # a fresh build, not whatever the user cache holds
    assert lib is not None and list(tmp_path.glob("radix_*.so"))
    assert not list(tmp_path.glob(".*")), "the temporary build file was left behind"
    assert radix.active_backend() == "cpp"
    for a, b in _key_pairs():
        expected = _reference(a, b)
        assert radix.compare_key_numpy(a, b) == expected
        assert radix.fast_compare_key(a, b) == expected
        assert radix.fast_compare_key(b, a) == expected
        assert lib.minisgl_fast_compare_key(a.ctypes.data, a.size, b.ctypes.data, b.size) == expected


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_concurrent_builds_are_safe(tmp_path):
    with ThreadPoolExecutor(max_workers=3) as pool:  # compiler subprocesses run in parallel
        paths = list(pool.map(lambda _: radix.build_library(tmp_path), range(3)))
    assert len(set(paths)) == 1 and [p.name for p in tmp_path.iterdir()] == [paths[0].name]
    assert radix.load_library(tmp_path) is not None


def test_env_override_forces_the_fallback(monkeypatch):
    monkeypatch.setenv(radix.DISABLE_ENV, "1")
    assert radix.active_backend() == "numpy"
    calls = []
    original = radix.compare_key_numpy
    monkeypatch.setattr(radix, "compare_key_numpy", lambda a, b: calls.append(1) or original(a, b))
    a, b = np.array([1, 2, 3], np.int32), np.array([1, 2, 4], np.int32)
    assert radix.fast_compare_key(a, b) == 2 and calls == [1]
    cache = RadixCache(page_size=1)  # and the cache still works on the fallback
    cache.insert([1, 2, 3], _slots(3))
    assert cache.match_prefix([1, 2, 4]).length == 2 and len(calls) > 1


def test_failed_build_falls_back_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-minisgl")
    warnings = []
    monkeypatch.setattr(radix.logger, "warning", warnings.append)
    assert radix.load_library(tmp_path) is None
    assert len(warnings) == 1 and "numpy" in warnings[0]


def test_non_contiguous_and_other_dtypes_are_converted():
    a = np.arange(10, dtype=np.int64)[::2]  # [0, 2, 4, 6, 8], strided and int64
    b = np.array([0, 2, 4, 7], dtype=np.int32)
    assert radix.fast_compare_key(a, b) == 3
    b.flags.writeable = False  # read-only buffers take another road to the C++ pointer
    assert radix.fast_compare_key(b, np.array([0, 2, 5], dtype=np.int32)) == 2
    assert radix.fast_compare_key(b[4:], b[:0]) == 0
