"""Chapter 15: decode in CUDA graphs, padded up to a ladder of captured batch sizes.

On a CPU: the ladder and which captured size serves a batch (against a plain Python rule), when
graphs are off, and the padded forward pass that a graph records, run eagerly on real scheduler
batches: every real row's logits equal the torch backend's, and padding rows write nothing but
the scratch slot. On a GPU: greedy tokens with Triton + CUDA graphs equal torch eager while
batches grow, shrink and cross the largest captured size, with the KV pool intact.
"""

from __future__ import annotations

import pytest
import torch
from test_ch03_models import save_random_hf_model
from test_ch08_scheduler import make_scheduler, run_all

from minisgl.attention import BACKENDS, TorchNativeBackend, create_attn_backend
from minisgl.core import Context, SamplingParams, set_global_ctx
from minisgl.engine.engine import ForwardOutput
from minisgl.engine.graph import (
    DEFAULT_MAX_BS,
    GraphRunner,
    cuda_graph_sizes,
    graph_batch_sizes,
    padded_size,
)
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache

VOCAB = 320  # tests/test_ch03_models.py's TINY config
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # Triton compiles on a GPU, else interprets
# Graphs need a backend that can be captured: the Triton one, which chapter 20 adds.
needs_triton = pytest.mark.skipif("triton" not in BACKENDS,
                                  reason="the Triton attention backend arrives in chapter 20")


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3")
    save_random_hf_model(path, "qwen3", "Qwen3ForCausalLM", tie_word_embeddings=True,
                         head_dim=16, num_hidden_layers=4)
    return path


def random_prompts(n: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(3, 40, (n,), generator=gen).tolist()
    return [torch.randint(0, VOCAB, (k,), generator=gen).tolist() for k in lens]


@pytest.mark.parametrize("max_bs", [1, 2, 3, 4, 5, 8, 9, 20, 64, 256])
def test_ladder_and_the_size_that_serves_each_batch(max_bs):
    sizes = graph_batch_sizes(max_bs)
    assert sizes[0] == 1 and sizes[-1] == max_bs and sizes == sorted(set(sizes))
    assert [s for s in sizes if s <= 8] == [s for s in (1, 2, 4, 8) if s < max_bs] + \
        ([max_bs] if max_bs <= 8 else [])
    assert all(b - a <= 8 for a, b in zip(sizes, sizes[1:]))
    for batch_size in range(1, max_bs + 10):
        fits = [s for s in sizes if s >= batch_size]
        assert padded_size(sizes, batch_size) == (min(fits) if fits else None)


def test_ladder_examples():
    assert graph_batch_sizes(0) == []
    assert graph_batch_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert graph_batch_sizes(32) == [1, 2, 4, 8, 16, 24, 32]


def small_backend(name: str):
    pool = MHAKVCache(KVPoolConfig(num_layers=1, num_kv_heads=2, head_dim=16, num_pages=8,
                                   page_size=4, dtype=torch.float32, device=torch.device("cpu")))
    return create_attn_backend(name, pool, torch.zeros(4, 32, dtype=torch.int32), 4, 2)


def test_graphs_are_off_on_a_cpu_and_with_the_torch_backend(capsys):
    torch_native = small_backend("torch")
    assert cuda_graph_sizes(None, 256, torch.device("cpu"), torch_native) == []
    assert cuda_graph_sizes(8, 256, torch.device("cuda"), torch_native) == []
    assert "backend TorchNativeBackend cannot be captured" in capsys.readouterr().err  # says why


@needs_triton
def test_which_sizes_the_triton_backend_captures():
    triton = small_backend("triton")
    cuda = torch.device("cuda")
    assert cuda_graph_sizes(None, 256, torch.device("cpu"), triton) == []  # a CPU never graphs
    assert cuda_graph_sizes(0, 256, cuda, triton) == []
    assert cuda_graph_sizes(None, 1000, cuda, triton) == graph_batch_sizes(DEFAULT_MAX_BS)
    assert cuda_graph_sizes(None, 48, cuda, triton) == graph_batch_sizes(48)
    assert cuda_graph_sizes(100, 48, cuda, triton) == graph_batch_sizes(48)
    assert cuda_graph_sizes(12, 48, cuda, triton) == graph_batch_sizes(12)


def test_auto_backend_and_cpu_engine_run_eagerly(tiny_qwen3):
    sched = make_scheduler(tiny_qwen3, cuda_graph_max_bs=8)  # EngineConfig default: --attn auto
    engine = sched.engine
    # auto on a CPU: the torch backend (from chapter 20 its subclass with the C++ decode)
    assert isinstance(engine.attn_backend, TorchNativeBackend)
    assert engine.graph_runner.sizes == [] and engine.graph_runner.graphs == {}
    # the scratch page is in the pool but not the scheduler's
    assert engine.kv_cache.config.num_pages == engine.num_pages + 1
    assert sched.stats().total_pages == engine.num_pages
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        make_scheduler(tiny_qwen3, cuda_graph_max_bs=-1)


def test_flags():
    pytest.importorskip("pydantic")  # the server's modules need it (the GPU machine has none)
    from minisgl.server.args import FlagError, parse_args

    common = ["--model", "Qwen/Qwen3-0.6B", "--dummy-weight", "--device", "cpu"]
    args, _ = parse_args(common)
    assert args.attention_backend == "auto" and args.cuda_graph_max_bs is None
    args, _ = parse_args([*common, "--attn", "torch", "--cuda-graph-max-bs", "16"])
    assert args.attention_backend == "torch" and args.cuda_graph_max_bs == 16
    with pytest.raises(FlagError, match="cuda_graph_max_bs"):
        parse_args([*common, "--cuda-graph-max-bs", "-1"])


@needs_triton
def test_padded_step_equals_torch_backend_as_the_batch_changes(tiny_qwen3):
    """The forward pass a graph records, run eagerly (on a CPU under Triton's interpreter) on every
    decode batch of a real run: requests finish at different steps and new ones join, so the
    batch shrinks and grows and lands on and between the ladder's sizes."""
    sched = make_scheduler(tiny_qwen3, attention_backend="triton", max_running_reqs=8,
                           page_size=4, num_pages=96, device=DEVICE, cuda_graph_max_bs=0)
    engine = sched.engine
    runner = GraphRunner(engine.model, engine.ctx, graph_batch_sizes(8),
                         scratch_slot=engine.num_pages * engine.page_size,
                         vocab_size=engine.model_config.vocab_size, device=engine.device)
    mc = engine.model_config
    reference = Context(attn_backend=create_attn_backend(
        "torch", engine.kv_cache, engine.page_table, mc.num_qo_heads, mc.num_kv_heads))
    pool = engine.kv_cache._buffer  # [2, layers, slots, kv_heads, head_dim]
    # Random contents, so that "untouched" is checked on real values: the pool starts as
    # uninitialised memory, whose NaN bit patterns never compare equal to themselves.
    pool.normal_()
    scratch = slice(runner.scratch_slot, runner.scratch_slot + engine.page_size)
    eager_forward = engine.forward_batch
    seen_sizes = []

    def padded_forward(batch):
        if batch.is_prefill:
            return eager_forward(batch)
        seen_sizes.append(batch.size)
        before = pool.clone()
        bs = runner.load(batch)
        lens = engine.attn_backend.graph_kv_lens[:bs].tolist()
        assert lens == [r.seq_len for r in batch.reqs] + [0] * (bs - batch.size)
        runner.forward_padded(bs)
        got, after = runner.logits[: batch.size].clone(), pool.clone()
        pool.copy_(before)
        set_global_ctx(reference)
        reference.attn_backend.prepare_metadata(batch)
        with reference.forward_batch(batch):
            expected = engine.model.forward(batch.input_ids, batch.positions)
        set_global_ctx(engine.ctx)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        # The real rows stored the same K/V; padding rows wrote only into the scratch page.
        real = batch.out_loc
        torch.testing.assert_close(after[:, :, real], pool[:, :, real], rtol=1e-5, atol=1e-5)
        untouched = torch.ones(pool.shape[2], dtype=torch.bool, device=pool.device)
        untouched[real] = False
        untouched[scratch] = False
        assert torch.equal(after[:, :, untouched], before[:, :, untouched])
        tokens = expected.argmax(dim=-1)
        return ForwardOutput(tokens, tokens.cpu(), None)  # chapter 16: tokens and their host copy

    engine.forward_batch = padded_forward
    prompts = random_prompts(7, seed=3)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (2, 5, 3, 6, 4)]
    for p, sp in zip(prompts[:5], params):
        sched.add_request(p, sp)
    for _ in range(3):
        for _ in sched.step():
            pass
    for p in prompts[5:]:  # join a running batch
        sched.add_request(p, SamplingParams(max_tokens=4, ignore_eos=True))
    run_all(sched)  # checks the KV pool after every step
    ladder = set(runner.sizes)
    assert set(seen_sizes) - ladder and set(seen_sizes) & ladder  # padded, and exact fits
    assert any(b > a for a, b in zip(seen_sizes, seen_sizes[1:]))  # the batch grew
    assert sched.stats().request_pages == 0
    sched.shutdown()


def generate_all(sched, waves: list[list[tuple[list[int], int]]]) -> list[list[int]]:
    """Add each wave of (prompt, max_tokens) after the previous one has run two steps."""
    uids = []
    tokens: dict[int, list[int]] = {}
    for wave in waves:
        uids += [sched.add_request(p, SamplingParams(max_tokens=n, ignore_eos=True))
                 for p, n in wave]
        for _ in range(2):
            for out in sched.step():
                tokens.setdefault(out.uid, []).append(out.token)
            sched.check_integrity()
    more, _ = run_all(sched)
    for uid, t in more.items():
        tokens.setdefault(uid, []).extend(t)
    return [tokens[u] for u in uids]


def count_replays(runner: GraphRunner) -> list[int]:
    """The size of every batch the runner replays from now on."""
    sizes: list[int] = []
    replay = runner.replay

    def counted(batch):
        sizes.append(batch.size)
        return replay(batch)

    runner.replay = counted
    return sizes


@pytest.mark.gpu
@needs_triton
@pytest.mark.parametrize("num_requests, max_bs", [(3, None), (5, None), (17, None), (17, 4)])
def test_graph_greedy_tokens_equal_torch_eager(tiny_qwen3, num_requests, max_bs):
    """Batches of 3, 5 and 17 are padded to 4, 8 and 24; with cuda_graph_max_bs=4 a batch of
    17 runs eagerly until enough requests finish, then moves into the graphs."""
    prompts = random_prompts(num_requests + 4, seed=num_requests)
    gen = torch.Generator().manual_seed(7)
    lens = torch.randint(2, 12, (len(prompts),), generator=gen).tolist()
    work = list(zip(prompts, lens))
    waves = [work[:num_requests], work[num_requests:]]  # the second wave joins mid-run
    results = {}
    for backend in ("torch", "triton"):
        sched = make_scheduler(tiny_qwen3, attention_backend=backend, device="cuda",
                               cuda_graph_max_bs=max_bs, page_size=4, num_pages=512)
        runner = sched.engine.graph_runner
        replays = count_replays(runner)
        results[backend] = generate_all(sched, waves)
        if backend == "torch":
            assert runner.sizes == [] and not replays
        else:
            assert sorted(runner.graphs) == runner.sizes == graph_batch_sizes(max_bs or 64)
            assert replays and max(replays) <= runner.sizes[-1]
            decode_steps = sched.stats().decode_batches
            # every decode batch within the ladder is replayed; larger ones run eagerly
            assert len(replays) == decode_steps if max_bs is None else len(replays) < decode_steps
        assert sched.stats().request_pages == 0
        sched.shutdown()
    assert results["triton"] == results["torch"]
