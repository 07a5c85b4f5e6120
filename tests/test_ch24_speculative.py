"""Chapter 24: speculative decoding is lossless.

- The pieces against plain references: n-gram proposals against a brute-force search, greedy
  acceptance against its definition, and the rejection rule's output distribution against the
  target's (a Monte Carlo test with a stated tolerance).
- The scheduler on a tiny random Qwen3: scripts of requests (chunked prompts, shared prefixes,
  penalties, log-probabilities, aborts, a pool too small for everyone) give with NGRAM and with
  STANDALONE exactly the tokens of plain greedy decoding; the page accounting holds after every
  step and every page is free or cached at the end. With the target as its own draft every guess
  is accepted. Sampling: over many seeds, the tokens of the first speculative step follow the
  target's distribution (chi-square against the exact distribution, false alarm 1e-3).
- The bundled SmolLM2 through LLM: code, lists, prose and Chinese, batched, equal plain decoding.
- The settings are checked, and the server reports the acceptance (meta_info, /metrics).
"""

from __future__ import annotations

import json
import math
import random
import shutil

import pytest
import torch
from test_ch03_models import save_random_hf_model
from test_ch16_overlap import VOCAB, Script, play, random_prompts

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.speculative.accept import accept_greedy, accepted_lengths, draw_last
from minisgl.speculative.batches import make_batch
from minisgl.speculative.ngram import propose_ngram
from minisgl.speculative.verify_graph import VerifyGraphs
from minisgl.utils.misc import MinisglError

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# chi-square critical values at a false-alarm rate of 1e-3, for 1..15 degrees of freedom
CHI2_999 = (10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26, 32.91,
            34.53, 36.12, 37.70)


# ---------------------------------------------------------------------------- the pieces


def brute_force_ngram(tokens: list[int], k: int, max_n: int = 4, min_n: int = 2) -> list[int]:
    """Every earlier occurrence of every suffix, longest suffix first, latest occurrence first."""
    for n in range(max_n, min_n - 1, -1):
        if n >= len(tokens):
            continue
        suffix = tokens[-n:]
        hits = [i for i in range(len(tokens) - n) if tokens[i : i + n] == suffix]
        for i in reversed(hits):
            follow = tokens[i + n : i + n + k]
            if follow:
                return follow
    return []


def test_ngram_proposals_match_a_brute_force_search():
    rng = random.Random()
    for _ in range(400):
        alphabet = rng.randint(2, 6)  # few symbols: matches of every length happen
        tokens = [rng.randrange(alphabet) for _ in range(rng.randint(0, 40))]
        k = rng.randint(0, 6)
        assert propose_ngram(tokens, k) == (brute_force_ngram(tokens, k) if k else [])


def test_ngram_proposals_on_a_pattern_and_on_nothing():
    # the latest match [2, 3, 1, 2] at 1 is followed by three tokens only
    assert propose_ngram([1, 2, 3, 1, 2, 3, 1, 2], 4) == [3, 1, 2]
    assert propose_ngram([5, 6, 7, 8], 4) == []  # nothing repeats
    assert propose_ngram([9], 4) == [] and propose_ngram([], 4) == []


def test_greedy_acceptance_keeps_the_agreed_prefix_and_adds_the_targets_token():
    rng = random.Random()
    for _ in range(300):
        k = rng.randint(0, 6)
        drafts = [rng.randrange(3) for _ in range(k)]
        target = [rng.randrange(3) for _ in range(k + 1)]
        agreed = 0
        while agreed < k and drafts[agreed] == target[agreed]:
            agreed += 1
        assert accept_greedy(target, drafts) == drafts[:agreed] + [target[agreed]]


def test_accepted_lengths_stop_at_the_first_rejection():
    assert accepted_lengths([[0.9, 0.5, 0.1], [0.2], []], [[0.1, 0.6, 0.0], [0.1], []]) == \
        [1, 1, 0]


def test_the_rejection_rule_keeps_the_target_distribution():
    """Keep the guess d with probability p(d), else draw from p without d: the emitted token is
    distributed as p. 200,000 fresh draws per case; each token's frequency must be within 5
    standard errors of p (a false alarm about once in 3 million per token)."""
    gen = torch.Generator().manual_seed(random.getrandbits(31))
    n = 200_000
    for vocab in (2, 5, 11):
        p = torch.rand(vocab, generator=gen) ** 3  # uneven: some tokens nearly impossible
        p /= p.sum()
        d = int(torch.randint(vocab, (1,), generator=gen))
        keep = torch.rand(n, generator=gen) < p[d]
        probs = p.expand(n, vocab)
        rejected = torch.where(keep, -1, d)
        drawn = draw_last(probs, rejected, torch.rand(n, generator=gen))
        out = torch.where(keep, d, drawn)
        assert not bool((out[~keep] == d).any()), "the residual must not contain the guess"
        freq = torch.bincount(out, minlength=vocab).double() / n
        tolerance = 5 * (p.double() * (1 - p.double()) / n).sqrt() + 1e-9
        assert bool(((freq - p.double()).abs() <= tolerance).all()), (freq, p)


# ------------------------------------------------------------------ the scheduler, tiny model


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    """chapter 16's tiny random Qwen3 (2 layers, vocabulary of 320)"""
    path = tmp_path_factory.mktemp("qwen3")
    save_random_hf_model(path, "qwen3", "Qwen3ForCausalLM", tie_word_embeddings=True,
                         head_dim=16, num_hidden_layers=2)
    return path


def make(model_dir, monkeypatch, algo: str | None, k: int = 4, **overrides) -> Scheduler:
    monkeypatch.setenv("MINISGL_DISABLE_OVERLAP_SCHEDULING", "1")
    config = dict(model_path=str(model_dir), page_size=4, num_pages=160, max_running_reqs=16,
                  seed=0, device=DEVICE, max_prefill_length=24)
    if algo is not None:
        config.update(speculative_algorithm=algo, speculative_num_draft_tokens=k)
    if algo == "STANDALONE":  # the target as its own draft
        config["speculative_draft_model_path"] = str(model_dir)
    return Scheduler(SchedulerConfig(**{**config, **overrides}))


def patterned_prompts(n: int, seed: int) -> list[list[int]]:
    """Prompts that repeat a short random pattern: n-gram guesses find something."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pattern = [rng.randrange(VOCAB) for _ in range(rng.randint(2, 5))]
        out.append((pattern * 12)[: rng.randint(8, 40)])
    return out


def mixed_script(seed: int) -> Script:
    """Requests joining at different steps, of every kind the sampler serves: greedy with
    different lengths, a shared prefix (the radix cache), prompts longer than a prefill chunk,
    a repetition penalty and log-probabilities (both decode plainly inside speculative
    batches), max_tokens of 1 and 2, and EOS honoured."""
    prompts = patterned_prompts(6, seed) + random_prompts(4, seed, shared_prefix=10)
    g = SamplingParams
    params = [g(max_tokens=14, ignore_eos=True), g(max_tokens=1), g(max_tokens=2),
              g(max_tokens=9, ignore_eos=True), g(max_tokens=17),
              g(max_tokens=12, repetition_penalty=1.3, ignore_eos=True),
              g(max_tokens=11, logprobs=3, ignore_eos=True), g(max_tokens=13, ignore_eos=True),
              g(max_tokens=6, ignore_eos=True), g(max_tokens=16, ignore_eos=True)]
    items = list(zip(prompts, params))
    return Script({0: items[:5], 2: items[5:8], 5: items[8:]})


@pytest.mark.parametrize("algo", ["NGRAM", "STANDALONE"])
def test_speculation_gives_the_tokens_of_plain_decoding(tiny_qwen3, monkeypatch, algo):
    script = mixed_script(1)
    plain = play(make(tiny_qwen3, monkeypatch, None), script)
    spec = play(make(tiny_qwen3, monkeypatch, algo), script)
    assert spec.tokens == plain.tokens
    assert {n: e.finish_reason for n, e in spec.ends.items()} == \
        {n: e.finish_reason for n, e in plain.ends.items()}
    # the log-probabilities of request 6 are those of plain decoding
    assert spec.ends[6].logprob == pytest.approx(plain.ends[6].logprob, abs=1e-4)
    assert spec.ends[6].top_ids == plain.ends[6].top_ids
    stats = spec.stats
    assert stats.spec_accepted_tokens > 0
    assert stats.decode_batches < plain.stats.decode_batches  # fewer steps for the same tokens
    if algo == "STANDALONE":  # its own draft: every guess is what the target picks
        assert stats.spec_accepted_tokens == stats.spec_draft_tokens


@pytest.mark.parametrize("algo", ["NGRAM", "STANDALONE"])
def test_aborts_and_a_full_pool_lose_nothing(tiny_qwen3, monkeypatch, algo):
    """A pool of 30 pages for 8 requests of up to 66 tokens: requests are retracted and
    prefilled again, guesses get no slots when memory is short, aborts cut requests anywhere;
    what every request got is a prefix of (or equal to) its plain uninterrupted run."""
    prompts = patterned_prompts(5, 2) + random_prompts(3, 2)
    params = SamplingParams(max_tokens=26, ignore_eos=True)
    adds = {0: [(p, params) for p in prompts[:6]], 3: [(p, params) for p in prompts[6:]]}
    full = play(make(tiny_qwen3, monkeypatch, None), Script(adds))
    script = Script(adds, aborts={1: [2], 6: [4], 9: [7]})
    spec = play(make(tiny_qwen3, monkeypatch, algo, num_pages=30), script)
    assert spec.stats.retracted > 0
    for n, seq in spec.tokens.items():
        if n in (2, 4, 7):
            assert seq == full.tokens[n][: len(seq)] and spec.ends[n].finish_reason == "abort"
        else:
            assert seq == full.tokens[n]


def test_the_first_speculative_step_samples_the_targets_distribution(tiny_qwen3, monkeypatch):
    """400 requests with one prompt and seeds 0..399 (temperature 1, top-k 4), four tokens
    each: the first comes from the prefill, the second from the first speculative step, whose
    guesses are the target's own greedy tokens (accepted with probability p(guess) < 1). The
    second tokens must follow the exact mixture of p(. | prompt, first token) over the 400
    requests: chi-square, bins of expected count >= 5, false alarm 1e-3."""
    prompt = random_prompts(1, 5)[0]
    n = 400
    spec = make(tiny_qwen3, monkeypatch, "STANDALONE", k=3, max_running_reqs=n, num_pages=4000,
                max_prefill_length=4096)
    uids = [spec.add_request(prompt, SamplingParams(temperature=1.0, top_k=4, max_tokens=4,
                                                    seed=s, ignore_eos=True))
            for s in range(n)]
    pairs: dict[int, list[int]] = {uid: [] for uid in uids}
    while spec.has_work:
        for out in spec.step():
            pairs[out.uid].append(out.token)
    stats = spec.stats()
    assert 0 < stats.spec_accepted_tokens < stats.spec_draft_tokens  # both branches ran
    spec.shutdown()
    # p(. | prompt, t1) for each first token: the top-4 raw log-probabilities of plain decoding
    plain = make(tiny_qwen3, monkeypatch, None, max_running_reqs=16)
    exact: dict[int, dict[int, float]] = {}
    for t1 in {p[0] for p in pairs.values()}:
        uid = plain.add_request(prompt + [t1], SamplingParams(max_tokens=1, logprobs=4))
        out = [o for o in plain.step() if o.uid == uid][0]
        weights = [math.exp(v) for v in out.top_logprobs]
        exact[t1] = {t: w / sum(weights) for t, w in zip(out.top_ids, weights)}
    plain.shutdown()
    expected: dict[int, float] = {}
    observed: dict[int, int] = {}
    for t1, t2, *_ in pairs.values():
        assert t2 in exact[t1], "a token outside the top-k set"
        for t, p in exact[t1].items():
            expected[t] = expected.get(t, 0.0) + p
        observed[t2] = observed.get(t2, 0) + 1
    bins, small_e, small_o = [], 0.0, 0
    for t in sorted(expected, key=expected.get, reverse=True):
        if expected[t] >= 5:
            bins.append((expected[t], observed.get(t, 0)))
        else:
            small_e, small_o = small_e + expected[t], small_o + observed.get(t, 0)
    if small_e > 0:
        bins.append((small_e, small_o))
    assert len(bins) >= 2
    chi2 = sum((o - e) ** 2 / e for e, o in bins)
    assert chi2 < CHI2_999[len(bins) - 2], (chi2, bins)


class HandReplay:
    """Stands for a captured graph: replaying runs the recorded forward pass eagerly over the
    same static buffers (capture needs a GPU; everything around it runs on a CPU)."""

    def __init__(self, graphs: VerifyGraphs, bs: int) -> None:
        self.graphs, self.bs = graphs, bs

    def replay(self) -> None:
        self.graphs._forward_padded(self.bs)


def test_verification_rows_padded_for_a_graph_give_the_eager_logits(tiny_qwen3, monkeypatch):
    """The buffers a verification graph replays (Triton attention, under Triton's interpreter on
    a CPU): three requests with 1, 2 and 3 new tokens in rows of q = 3, one padding row; every
    real token's logits equal the eager extend's, and padding writes only the scratch slot."""
    sched = make(tiny_qwen3, monkeypatch, None, attention_backend="triton", page_size=1,
                 num_pages=512, max_prefill_length=512)
    engine = sched.engine
    prompts = patterned_prompts(3, 7)
    for prompt in prompts:
        sched.add_request(prompt, SamplingParams(max_tokens=8, ignore_eos=True))
    sched.step()  # the prefill: every request is running, its last token without K/V
    reqs = list(sched.decode.running)
    assert len(reqs) == 3
    rng = random.Random()
    tokens = [[req.input_ids[-1]] + [rng.randrange(VOCAB) for _ in range(n)]
              for req, n in zip(reqs, (0, 1, 2))]
    for req, new in zip(reqs, tokens):
        req.cached_len, req.extend_len = len(req.input_ids) - 1, len(new)
        assert sched.cache.allocate(req, req.cached_len + len(new))
    engine.graph_runner.sizes = [1, 2, 4]  # the decode ladder a GPU would have captured
    engine.graph_runner.scratch_slot = engine.num_pages * engine.page_size
    graphs = VerifyGraphs(engine, 3)
    graphs.graphs = {bs: HandReplay(graphs, bs) for bs in graphs.sizes}
    assert graphs.can_run(reqs, tokens)
    k_before = engine.kv_cache.k_cache(0).clone()
    graphed = graphs.run(reqs, tokens).clone()
    # bit patterns, not values: slots nobody wrote may hold NaN, which is never equal to itself
    changed = engine.kv_cache.k_cache(0).view(torch.int32) != k_before.view(torch.int32)
    written = changed.flatten(1).any(dim=1).nonzero()
    slots = {int(engine.page_table[r.table_idx, r.cached_len + j])
             for r, new in zip(reqs, tokens) for j in range(len(new))}
    assert set(written.flatten().tolist()) <= slots | {graphs.scratch_slot}
    assert graphs.scratch_slot in set(written.flatten().tolist())  # the padding's K/V

    eager = engine.forward_logits(make_batch(engine, reqs, tokens), None)
    at = 0
    for i, new in enumerate(tokens):
        torch.testing.assert_close(graphed[i * 3 : i * 3 + len(new)], eager[at : at + len(new)],
                                   atol=1e-4, rtol=1e-4)
        at += len(new)
    sched.shutdown()


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize("overrides, message", [
    ({"speculative_algorithm": "EAGLE"}, "speculative_algorithm must be one of"),
    ({"speculative_algorithm": "STANDALONE"}, "needs speculative_draft_model_path"),
    ({"speculative_draft_model_path": "x"}, "needs speculative_algorithm STANDALONE"),
    ({"speculative_algorithm": "NGRAM", "speculative_draft_model_path": "x"}, "only it takes"),
    ({"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 0}, r"\[1, 16\]"),
    ({"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 17}, r"\[1, 16\]"),
    ({"speculative_algorithm": "NGRAM", "tp_size": 2}, "tp_size 1"),
])
def test_bad_settings_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        SchedulerConfig(model_path="unused", **overrides)


def test_algorithm_names_are_case_blind():
    config = SchedulerConfig(model_path="unused", speculative_algorithm="ngram")
    assert config.speculative_algorithm == "NGRAM"


def test_a_draft_with_another_vocabulary_is_refused(tiny_qwen3, smollm2_dir, monkeypatch):
    monkeypatch.setenv("MINISGL_DISABLE_OVERLAP_SCHEDULING", "1")
    config = SchedulerConfig(model_path=str(tiny_qwen3), num_pages=64, max_running_reqs=4,
                             device=DEVICE, speculative_algorithm="STANDALONE",
                             speculative_draft_model_path=str(smollm2_dir))
    with pytest.raises(MinisglError, match="must share the tokenizer"):
        Scheduler(config)


def test_a_missing_draft_or_one_with_a_shorter_context_is_refused(tiny_qwen3, tmp_path,
                                                                  monkeypatch):
    with pytest.raises(MinisglError, match="does not exist"):
        make(tiny_qwen3, monkeypatch, "STANDALONE",
             speculative_draft_model_path=str(tmp_path / "no-such-draft"))
    short = tmp_path / "short"
    shutil.copytree(tiny_qwen3, short)
    config = json.loads((short / "config.json").read_text())
    config["max_position_embeddings"] = 64
    (short / "config.json").write_text(json.dumps(config))
    with pytest.raises(MinisglError, match="handles 64 positions"):
        make(tiny_qwen3, monkeypatch, "STANDALONE", speculative_draft_model_path=str(short))
    make(tiny_qwen3, monkeypatch, "STANDALONE", speculative_draft_model_path=str(short),
         max_seq_len=64).shutdown()  # a context the draft can follow is fine


def test_the_draft_pool_shares_the_kv_budget(tiny_qwen3, monkeypatch):
    """Without num_pages the target sizes its pool for both pools' bytes per token: with the
    target as its own draft, half the pages of a plain engine (cpu_kv_bytes on a CPU)."""
    if DEVICE != "cpu":
        pytest.skip("the CPU's fixed budget makes the halving exact")
    plain = make(tiny_qwen3, monkeypatch, None, num_pages=None)
    spec = make(tiny_qwen3, monkeypatch, "STANDALONE", num_pages=None)
    assert spec.engine.num_pages == plain.engine.num_pages // 2
    draft = spec.spec.draft.engine
    assert draft.num_pages == spec.engine.num_pages and draft.page_table is spec.engine.page_table
    assert not spec.overlap  # speculation runs one step at a time


# ------------------------------------------------------------------- SmolLM2, LLM and server

PROMPTS = [
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, Monday, Tuesday,",
    "The old lighthouse keeper climbed the stairs every evening, and every evening he",
    "春天来了，花开了。夏天来了，荷花开了。秋天来了，",
    "1. apples\n2. pears\n3. plums\n4.",
]


@pytest.fixture(scope="module")
def smollm2_runs(smollm2_dir):
    """Each prompt's 32 greedy tokens, batched: plain, NGRAM, STANDALONE (SmolLM2 as its own
    draft); and the scheduler stats of the speculative runs."""
    from minisgl.llm import LLM

    params = SamplingParams(max_tokens=32, ignore_eos=True)
    runs, stats = {}, {}
    for name, kwargs in [("plain", {}), ("NGRAM", {"speculative_algorithm": "NGRAM"}),
                         ("STANDALONE", {"speculative_algorithm": "STANDALONE",
                                         "speculative_draft_model_path": str(smollm2_dir)})]:
        llm = LLM(str(smollm2_dir), dtype="float32", device=DEVICE, num_pages=2048,
                  max_seq_len=512, **kwargs)
        runs[name] = llm.generate(PROMPTS, params, use_tqdm=False)
        llm.scheduler.check_integrity()
        stats[name] = llm.scheduler.stats()
        llm.shutdown()
    return runs, stats


@pytest.mark.parametrize("algo", ["NGRAM", "STANDALONE"])
def test_smollm2_speculation_equals_plain_decoding(smollm2_runs, algo):
    runs, stats = smollm2_runs
    assert [r["token_ids"] for r in runs[algo]] == [r["token_ids"] for r in runs["plain"]]
    assert [r["text"] for r in runs[algo]] == [r["text"] for r in runs["plain"]]
    s = stats[algo]
    assert s.request_pages == 0 and s.free_pages + s.cached_pages == s.total_pages
    assert s.spec_accepted_tokens > 0 and all(r["spec_verify_ct"] > 0 for r in runs[algo])
    assert all(len(r["token_ids"]) == 32 for r in runs[algo])
    if algo == "STANDALONE":  # its own draft: every guess accepted, k + 1 tokens a step
        assert s.spec_accepted_tokens == s.spec_draft_tokens
        assert all(r["spec_verify_ct"] <= math.ceil(31 / 5) for r in runs[algo])


def test_the_server_speculates_and_reports_it(smollm2_dir, smollm2_runs):
    from conftest import RunningServer

    server = RunningServer(["--model", str(smollm2_dir), "--speculative-algorithm", "ngram",
                            "--speculative-num-draft-tokens", "3", "--num-pages", "2048",
                            "--max-seq-len", "512", "--log-interval", "0.05",
                            "--dtype", "float32", "--device", DEVICE])
    try:
        plain = smollm2_runs[0]["plain"][1]
        status, body = server.post("/generate", {"text": PROMPTS[1], "sampling_params": {
            "max_new_tokens": 32, "temperature": 0, "ignore_eos": True}})
        assert status == 200, body
        assert body["output_ids"] == plain["token_ids"]
        info = body["meta_info"]
        assert 0 < info["spec_verify_ct"] < 32
        assert info["spec_accept_length"] == pytest.approx(32 / info["spec_verify_ct"])
        status, chat = server.post("/v1/chat/completions", {
            "model": server.model_name, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Count: one, two, three, four,"}]})
        assert status == 200 and chat["usage"]["completion_tokens"] == 8, chat
        status, metrics = server.get("/metrics")
        label = f'{{model_name="{server.model_name}"}}'
        lines = {line.split(" ")[0].removesuffix(label): float(line.split(" ")[1])
                 for line in metrics.splitlines() if line.startswith("minisgl:spec")}
        drafts = lines["minisgl:spec_decode_num_drafts_total"]
        accepted = lines["minisgl:spec_decode_num_accepted_tokens_total"]
        assert drafts > 0 and accepted > 0
        assert lines["minisgl:spec_accept_length"] == \
            pytest.approx(1 + accepted / drafts)
    finally:
        assert server.stop() == 0
    assert "accept length" in server.log_text()


def test_the_flags_reach_the_config(smollm2_dir):
    from minisgl.server.args import parse_args

    args, _ = parse_args(["--model", str(smollm2_dir), "--speculative-algorithm", "standalone",
                          "--speculative-draft-model-path", str(smollm2_dir),
                          "--speculative-num-draft-tokens", "6"])
    assert (args.speculative_algorithm, args.speculative_num_draft_tokens) == ("STANDALONE", 6)
    assert args.speculative_draft_model_path == str(smollm2_dir)
