"""FlashInfer's paged attention kernels beside this engine's Triton ones, on the same K/V data.

    python benchmarks/peers/attention_kernels.py           # a GPU; FlashInfer on PYTHONPATH
    python benchmarks/peers/attention_kernels.py --smoke   # tiny shapes, any machine (on a CPU:
                                                           # Triton's interpreter, no FlashInfer)

Qwen3-0.6B's attention (16 query heads, 8 KV heads, head dim 128), bf16. The K/V live once, in a
pool of shuffled pages of 1 or 16 slots: FlashInfer reads them as [pages, page_size, kv_heads,
head_dim] through CSR page lists (indptr, indices, last_page_len), this engine's kernels
(python/minisgl/kernel/triton/) as [slots, kv_heads, head_dim] through a page table of slots.

- Decode: one new token per request; FlashInfer's BatchDecodeWithPagedKVCacheWrapper with
  use_tensor_cores=True against `decode_attention`. Batch 256 x 1024 keys and 1 x 8192.
- Extend (prefill with nothing cached, causal): BatchPrefillWithPagedKVCacheWrapper against
  `extend_attention`, on the official bench.py's first prefill batch (its first prompts that fit
  its max_extend_tokens of 16384: 31 prompts, 15,705 tokens) and on one 1024-token prompt.

FlashInfer's backend is "fa2", as the official mini-sglang uses it (its "auto" also picks fa2
for bf16 with tensor cores); the decode wrapper has CUDA-graph buffers (as an engine's captured
decode), the prefill wrapper none (the official engine runs prefill eagerly). Each case is checked
first: the output is poisoned with NaN, then compared with PyTorch's SDPA in fp32 on the same data
(relative error ||out - ref|| / ||ref|| at most 1e-2, every element written). Then timed: all
calls captured in one CUDA graph, replayed between CUDA events, the median of --iters replays over
the calls in it (decode calls cycle through copies of the K/V that together exceed the 50 MB L2
several times, so every call reads HBM); a capture that fails falls back to the same calls
launched back to back, and says so. What the timed replay wrote is checked again.
Decode prints K/V bytes read / time (TB/s), extend the time (ms). Lines for the summary:

    decode-attention shape=<...> flashinfer=<TB/s> triton=<TB/s>
    extend-attention shape=<...> flashinfer=<ms> triton=<ms>

Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# before anything imports triton: on a CPU this sets Triton's interpreter up
from minisgl.kernel.triton import (
    DecodeWorkspace,
    choose_num_splits,
    decode_attention,
    extend_attention,
)
from minisgl.kernel.triton.extend_attention import ExtendConfig

WORKING_SET = 512 << 20  # bytes of K/V cycled through in one timed decode replay: 10x the L2
WORKSPACE = 128 << 20  # FlashInfer's float workspace, the size its docs recommend
TOLERANCE = 1e-2  # relative error for bf16 operands (fp32 smoke: far below)
OFFICIAL_PREFILL_BUDGET = 16384  # bench.py's max_extend_tokens
FAILED: list[str] = []


@dataclass(frozen=True)
class Heads:
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype


QWEN3_0_6B = Heads(16, 8, 128, torch.bfloat16)
# The interpreter keeps bf16 as raw 16-bit integers inside tl.dot, so the smoke run uses fp32.
SMOKE = Heads(4, 2, 16, torch.float32)


@dataclass
class PagedLayout:
    """Where each request's K/V positions sit in a pool of `num_pages` pages of `page_size`
    slots, in both views: FlashInfer's CSR page lists and this engine's page table of slots."""

    lens: list[int]
    page_size: int
    num_pages: int
    indptr: torch.Tensor  # [B + 1] int32: request b owns indices[indptr[b]:indptr[b + 1]]
    indices: torch.Tensor  # [pages used] int32 page ids, shuffled
    last_page_len: torch.Tensor  # [B] int32: slots used in each request's last page
    page_table: torch.Tensor  # [B, max len] int32: slot of each position (0 past the end)

    @property
    def batch(self) -> int:
        return len(self.lens)


def paged_layout(lens: list[int], page_size: int, gen: torch.Generator) -> PagedLayout:
    pages = [math.ceil(n / page_size) for n in lens]
    order = torch.randperm(sum(pages), generator=gen).int()
    indptr = torch.tensor([0, *pages]).cumsum(0).int()
    last = torch.tensor([n - (p - 1) * page_size for n, p in zip(lens, pages)]).int()
    table = torch.zeros(len(lens), max(lens), dtype=torch.int32)
    for b, n in enumerate(lens):
        own = order[indptr[b]:indptr[b + 1]].long()
        slots = (own[:, None] * page_size + torch.arange(page_size)).flatten()[:n]
        table[b, :n] = slots.int()
    return PagedLayout(lens, page_size, sum(pages), indptr, order, last, table)


@dataclass
class KVPool:
    k: torch.Tensor  # [num_pages, page_size, kv_heads, head_dim]
    v: torch.Tensor

    def slots(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The same memory as this engine's [slots, kv_heads, head_dim] pool."""
        return self.k.flatten(0, 1), self.v.flatten(0, 1)


def random_pool(layout: PagedLayout, heads: Heads, device: str) -> KVPool:
    shape = (layout.num_pages, layout.page_size, heads.num_kv_heads, heads.head_dim)
    return KVPool(*(torch.randn(shape, dtype=heads.dtype, device=device) for _ in range(2)))


def dense_kv(layout: PagedLayout, pool: KVPool, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Request b's K and V as [kv_heads, len, head_dim] fp32, read through the page table."""
    k_slots, v_slots = pool.slots()
    slots = layout.page_table[b, :layout.lens[b]].long().to(k_slots.device)
    return (k_slots[slots].transpose(0, 1).float(), v_slots[slots].transpose(0, 1).float())


def check_layout(layout: PagedLayout, pool: KVPool) -> None:
    """FlashInfer's CSR view and the page table name the same positions: request b's pages in
    order, cut at its length, equal its rows of the page table."""
    for b, n in enumerate(layout.lens):
        own = layout.indices[layout.indptr[b]:layout.indptr[b + 1]].long().to(pool.k.device)
        assert int(layout.last_page_len[b]) == n - (len(own) - 1) * layout.page_size
        k_csr = pool.k[own].flatten(0, 1)[:n].transpose(0, 1).float()
        if not torch.equal(k_csr, dense_kv(layout, pool, b)[0]):
            raise AssertionError(f"request {b}: the CSR pages and the page table disagree")


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    if not torch.isfinite(got).all():
        return math.inf  # NaN left by the poison (an element not written) or computed
    return ((got.float() - ref).norm() / ref.norm()).item()


def check(name: str, got: torch.Tensor, ref: torch.Tensor) -> bool:
    err = relative_error(got, ref)
    ok = err <= TOLERANCE
    print(f"{'ok  ' if ok else 'FAIL'} {name}: relative error {err:.2e} (at most {TOLERANCE:.0e})",
          flush=True)
    if not ok:
        FAILED.append(name)
    return ok


def time_ms(calls: list[Callable[[], object]], iters: int
            ) -> tuple[float, str, Callable[[], object]]:
    """Median ms of one call, how it was timed, and the replay (all calls once). GPU: the calls
    captured in one CUDA graph, replayed `iters` times between CUDA events (no launch gaps, as in
    an engine's captured step); if the capture fails, the calls launched back to back instead.
    CPU: one pass of wall time (a check of the code path under the interpreter, not a speed)."""

    def launch_all() -> None:
        for fn in calls:
            fn()

    if not torch.cuda.is_available():
        start = time.perf_counter()
        launch_all()
        return (time.perf_counter() - start) * 1e3 / len(calls), "cpu", launch_all
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (compiles, plans' first use) outside any capture
        launch_all()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    replay: Callable[[], object] = launch_all
    method = "eager"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch_all()
        replay, method = graph.replay, "graph"
    except Exception as e:  # whatever a library raises inside a capture
        torch.cuda.synchronize()
        print(f"  (capture failed, timing eager launches: {str(e).splitlines()[0][:160]})")
    for _ in range(3):
        replay()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(calls))
    return statistics.median(times), method, replay


def fmt(value: float | None, digits: int) -> str:
    """A figure of a result line; None: no figure (check failed, or FlashInfer not there)."""
    return "none" if value is None else f"{value:.{digits}f}"


def decode_line(shape: str, flashinfer_tbs: float | None, triton_tbs: float | None) -> str:
    return f"decode-attention shape={shape} flashinfer={fmt(flashinfer_tbs, 3)} " \
           f"triton={fmt(triton_tbs, 3)}"


def extend_line(shape: str, flashinfer_ms: float | None, triton_ms: float | None) -> str:
    return f"extend-attention shape={shape} flashinfer={fmt(flashinfer_ms, 4)} " \
           f"triton={fmt(triton_ms, 4)}"


def extend_shape(layout: PagedLayout) -> str:
    lens = layout.lens
    if min(lens) == max(lens):
        return f"b{len(lens)}xq{lens[0]}/page{layout.page_size}"
    return f"b{len(lens)}xq{min(lens)}-{max(lens)}:{sum(lens)}tok/page{layout.page_size}"


# --- the kernels, each as a call on one pool -----------------------------------------------------


def to_device(layout: PagedLayout, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return layout.page_table.to(device), layout.indices.to(device)


def flashinfer_decode(layout: PagedLayout, heads: Heads, q: torch.Tensor, out: torch.Tensor
                      ) -> Callable[[KVPool], object]:
    import flashinfer

    device = q.device
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.zeros(WORKSPACE, dtype=torch.uint8, device=device), "NHD", use_cuda_graph=True,
        use_tensor_cores=True, paged_kv_indptr_buffer=layout.indptr.to(device),
        paged_kv_indices_buffer=layout.indices.to(device),
        paged_kv_last_page_len_buffer=layout.last_page_len.to(device), backend="fa2")
    wrapper.plan(layout.indptr, layout.indices.to(device), layout.last_page_len,
                 heads.num_qo_heads, heads.num_kv_heads, heads.head_dim, layout.page_size,
                 pos_encoding_mode="NONE", q_data_type=heads.dtype, kv_data_type=heads.dtype)
    return lambda pool: wrapper.run(q, (pool.k, pool.v), out=out)


def triton_decode(layout: PagedLayout, heads: Heads, q: torch.Tensor, out: torch.Tensor
                  ) -> Callable[[KVPool], object]:
    device = q.device
    page_table = layout.page_table.to(device)
    table_idx = torch.arange(layout.batch, dtype=torch.int32, device=device)
    kv_lens = torch.tensor(layout.lens, dtype=torch.int32, device=device)
    splits = choose_num_splits(layout.batch, heads.num_kv_heads, page_table.shape[1], device)
    workspace = DecodeWorkspace.allocate(layout.batch, heads.num_qo_heads, heads.head_dim,
                                         device, max(splits, 1))

    def call(pool: KVPool) -> object:
        k_slots, v_slots = pool.slots()
        return decode_attention(q, k_slots, v_slots, page_table, table_idx, kv_lens,
                                num_splits=splits, workspace=workspace, out=out)

    return call


def flashinfer_extend(layout: PagedLayout, heads: Heads, q: torch.Tensor, out: torch.Tensor
                      ) -> Callable[[KVPool], object]:
    """Planned as an engine plans a prefill (no CUDA-graph buffers: the official engine runs
    prefill eagerly); time_ms still captures the calls when FlashInfer allows it."""
    import flashinfer

    device = q.device
    qo_indptr = torch.tensor([0, *layout.lens]).cumsum(0).int()  # no prefix: every key is new
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
        torch.zeros(WORKSPACE, dtype=torch.uint8, device=device), "NHD", backend="fa2")
    wrapper.plan(qo_indptr, layout.indptr, layout.indices.to(device), layout.last_page_len,
                 heads.num_qo_heads, heads.num_kv_heads, heads.head_dim, layout.page_size,
                 causal=True, q_data_type=heads.dtype, kv_data_type=heads.dtype)
    return lambda pool: wrapper.run(q, (pool.k, pool.v), out=out)


def triton_extend(layout: PagedLayout, heads: Heads, q: torch.Tensor, out: torch.Tensor,
                  config: ExtendConfig | None = None) -> Callable[[KVPool], object]:
    """config: a tiling other than the engine's (benchmarks/tune_extend_attention.py)."""
    device = q.device
    page_table = layout.page_table.to(device)
    table_idx = torch.arange(layout.batch, dtype=torch.int32, device=device)
    kv_lens = torch.tensor(layout.lens, dtype=torch.int32, device=device)
    cu_q_lens = torch.tensor([0, *layout.lens], device=device).cumsum(0).int()

    def call(pool: KVPool) -> object:
        k_slots, v_slots = pool.slots()
        return extend_attention(q, k_slots, v_slots, page_table, table_idx, cu_q_lens, kv_lens,
                                max(layout.lens), out=out, config=config)

    return call


# --- references and cases ------------------------------------------------------------------------


def decode_reference(layout: PagedLayout, pool: KVPool, q: torch.Tensor) -> torch.Tensor:
    """SDPA in fp32, one query token per request: [B, H, D]."""
    outs = []
    for b in range(layout.batch):
        k, v = dense_kv(layout, pool, b)
        outs.append(F.scaled_dot_product_attention(q[b, :, None].float(), k, v,
                                                   enable_gqa=True)[:, 0])
    return torch.stack(outs)


def extend_reference(layout: PagedLayout, pool: KVPool, q: torch.Tensor) -> torch.Tensor:
    """SDPA in fp32, causal within each request: [T, H, D]."""
    outs, start = [], 0
    for b, n in enumerate(layout.lens):
        k, v = dense_kv(layout, pool, b)
        qb = q[start:start + n].transpose(0, 1).float()
        outs.append(F.scaled_dot_product_attention(qb, k, v, is_causal=True,
                                                   enable_gqa=True).transpose(0, 1))
        start += n
    return torch.cat(outs)


Builder = Callable[[PagedLayout, Heads, torch.Tensor, torch.Tensor], Callable[[KVPool], object]]


def run_case(name: str, builder: Builder, layout: PagedLayout, heads: Heads,
             pools: list[KVPool], q: torch.Tensor, ref: torch.Tensor, iters: int
             ) -> float | None:
    """Check the kernel on the first pool (output poisoned first), time it over all pools, then
    check what the timed replay left for the first pool (its call comes last); ms per call, or
    None if it could not be built or was wrong."""
    out = torch.empty_like(q)
    try:
        call = builder(layout, heads, q, out)
        out.fill_(float("nan"))
        call(pools[0])
    except Exception as e:  # e.g. FlashInfer's JIT build failing on the device
        print(f"FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
        FAILED.append(name)
        return None
    if not check(name, out, ref):
        return None
    ms, method, replay = time_ms([lambda p=p: call(p) for p in [*pools[1:], pools[0]]], iters)
    out.fill_(float("nan"))
    replay()
    if not check(f"{name}, {method} replay", out, ref):
        return None
    print(f"  {name}: {ms:.4f} ms per call ({method}, median of {iters})", flush=True)
    return ms


def flashinfer_ready(device: str) -> str | None:
    """None if FlashInfer can run here, else why not."""
    if device != "cuda":
        return "no CUDA device"
    try:
        import flashinfer
    except ImportError as e:
        return f"cannot import flashinfer ({e})"
    print(f"flashinfer {flashinfer.__version__} from {flashinfer.__file__}", flush=True)
    return None


def bench_decode(batch: int, context: int, page_size: int, heads: Heads, device: str,
                 iters: int, gen: torch.Generator, no_flashinfer: str | None) -> str:
    layout = paged_layout([context] * batch, page_size, gen)
    kv_bytes = 2 * batch * context * heads.num_kv_heads * heads.head_dim * heads.dtype.itemsize
    copies = math.ceil(WORKING_SET / kv_bytes) if device == "cuda" else 1
    pools = [random_pool(layout, heads, device) for _ in range(copies)]
    check_layout(layout, pools[0])
    q = torch.randn(batch, heads.num_qo_heads, heads.head_dim, dtype=heads.dtype, device=device)
    ref = decode_reference(layout, pools[0], q)
    shape = f"b{batch}xkv{context}/page{page_size}"
    print(f"decode {shape}: {kv_bytes / 2**20:.1f} MiB of K/V per call, {copies} copies",
          flush=True)
    tbs: dict[str, float | None] = {"flashinfer": None, "triton": None}
    for kernel, builder in (("flashinfer", flashinfer_decode), ("triton", triton_decode)):
        if kernel == "flashinfer" and no_flashinfer:
            print(f"  flashinfer {shape}: skipped ({no_flashinfer})")
            continue
        ms = run_case(f"{kernel} decode {shape}", builder, layout, heads, pools, q, ref, iters)
        tbs[kernel] = None if ms is None else kv_bytes / ms / 1e9
        if ms is not None:
            print(f"  {kernel} decode {shape}: {tbs[kernel]:.3f} TB/s", flush=True)
    return decode_line(shape, tbs["flashinfer"], tbs["triton"])


def bench_extend(lens: list[int], page_size: int, heads: Heads, device: str, iters: int,
                 gen: torch.Generator, no_flashinfer: str | None) -> str:
    layout = paged_layout(lens, page_size, gen)
    pool = random_pool(layout, heads, device)
    check_layout(layout, pool)
    q = torch.randn(sum(lens), heads.num_qo_heads, heads.head_dim, dtype=heads.dtype,
                    device=device)
    ref = extend_reference(layout, pool, q)
    shape = extend_shape(layout)
    # causal: query i sees i + 1 keys; two products of 2 flops per (query, key, dim)
    flops = 4 * heads.num_qo_heads * heads.head_dim * sum(n * (n + 1) / 2 for n in lens)
    print(f"extend {shape}: {flops / 1e9:.1f} GFLOP per call", flush=True)
    ms: dict[str, float | None] = {"flashinfer": None, "triton": None}
    for kernel, builder in (("flashinfer", flashinfer_extend), ("triton", triton_extend)):
        if kernel == "flashinfer" and no_flashinfer:
            print(f"  flashinfer {shape}: skipped ({no_flashinfer})")
            continue
        ms[kernel] = run_case(f"{kernel} extend {shape}", builder, layout, heads, [pool], q, ref,
                              iters)
        if ms[kernel] is not None:
            print(f"  {kernel} extend {shape}: {flops / ms[kernel] / 1e9:.1f} TFLOP/s",
                  flush=True)
    return extend_line(shape, ms["flashinfer"], ms["triton"])


def official_prefill_lens() -> list[int]:
    """The official bench.py's first prefill batch: its first prompts, in order, while they fit
    in max_extend_tokens (the scheduler would chunk the next one)."""
    from minisgl.benchmark.offline import official_workload

    lens, total = [], 0
    for prompt in official_workload().prompts:
        if total + len(prompt) > OFFICIAL_PREFILL_BUDGET:
            break
        lens.append(len(prompt))
        total += len(prompt)
    return lens


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes that also run on a CPU (Triton's interpreter)")
    parser.add_argument("--iters", type=int, default=100, help="timed graph replays per case")
    parser.add_argument("--page-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--no-flashinfer", action="store_true", help="only the Triton kernels")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        print("no CUDA device: run with --smoke to check the code paths under the interpreter")
        return 1
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if args.smoke:
        heads, iters = SMOKE, 1
        decode_cases, extend_cases = [(3, 70), (1, 200)], [[30, 45, 17], [64]]
    else:
        heads, iters = QWEN3_0_6B, args.iters
        decode_cases, extend_cases = [(256, 1024), (1, 8192)], [official_prefill_lens(), [1024]]
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    no_flashinfer = "--no-flashinfer" if args.no_flashinfer else flashinfer_ready(device)
    lines = []
    for page_size in args.page_sizes:
        for batch, context in decode_cases:
            lines.append(bench_decode(batch, context, page_size, heads, device, iters, gen,
                                      no_flashinfer))
        for lens in extend_cases:
            lines.append(bench_extend(lens, page_size, heads, device, iters, gen,
                                      no_flashinfer))
    print("\n".join(lines))
    if FAILED:
        print(f"{len(FAILED)} check(s) FAILED: {', '.join(FAILED)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
