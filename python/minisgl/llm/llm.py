"""The offline API: `LLM(model).generate(prompts, sampling_params)`, all in one process.

It feeds every prompt to the scheduler and steps it until each request has finished. Prompts are
plain text (encoded as is, no chat template) or token-id lists.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from typing import Any

import torch
from tqdm import tqdm

from minisgl.core import SamplingParams, TokenOutput
from minisgl.distributed import destroy_tp, init_tp
from minisgl.engine.config import default_device, resolve_dtype
from minisgl.env import load_env
from minisgl.message import UserMsg
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.scheduler.offline_ranks import OfflineRanks
from minisgl.tokenizer import load_tokenizer
from minisgl.trace.session import trace_session
from minisgl.utils.hf import resolve_model

# The official mini-sglang's keyword names (EngineConfig / SchedulerConfig at 20fcd7f) and ours,
# so that scripts written for it, such as its benchmark/offline/bench.py, run unchanged.
OFFICIAL_KWARGS = {
    "max_running_req": "max_running_reqs",
    "max_seq_len_override": "max_seq_len",
    "num_page_override": "num_pages",
    "max_extend_tokens": "max_prefill_length",
    "use_dummy_weight": "dummy_weight",
}
# Official keywords with no counterpart in this single-process offline API.
UNSUPPORTED_KWARGS = {
    "tp_info": "LLM runs one process; tensor parallelism is the server's --tp",
    "cuda_graph_bs": "the captured batch sizes follow a ladder up to cuda_graph_max_bs",
    "use_pynccl": "there is no custom NCCL layer here",
    "distributed_timeout": "LLM runs one process",
    "offline_mode": "LLM is always offline",
}


def config_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of LLM -> SchedulerConfig fields: official names are translated, ours
    pass through, anything else is a TypeError that says what is accepted."""
    fields = {f.name for f in dataclasses.fields(SchedulerConfig)} - {"model_path", "dtype",
                                                                      "device"}
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in UNSUPPORTED_KWARGS:
            raise TypeError(f"LLM() does not support {key!r}: {UNSUPPORTED_KWARGS[key]}")
        name = OFFICIAL_KWARGS.get(key, key)
        if name not in fields:
            raise TypeError(f"LLM() got an unexpected keyword argument {key!r}; it accepts "
                            f"{', '.join(sorted(fields | set(OFFICIAL_KWARGS)))}")
        if name in out:
            raise TypeError(f"LLM() got {key!r} and another name for the same setting")
        out[name] = value
    return out


class LLM:
    def __init__(self, model_path: str, dtype: str | torch.dtype = "auto",
                 device: str | None = None, **kwargs: Any) -> None:
        device = device or default_device()
        # Starting the engine must not draw from the caller's `random` numbers: the official
        # bench.py seeds them, builds the LLM, then draws its workload, and on the H200 something
        # in the start-up (a library, not minisgl) drew from them, so its workload differed
        # (137,221 output tokens instead of 133,966).
        caller_random = random.getstate()
        kwargs = config_kwargs(kwargs)
        # MINISGL_DUMMY_WEIGHT=1: random weights without a code change (the official bench.py
        # names Qwen/Qwen3-0.6B, whose weights this package does not bundle)
        kwargs.setdefault("dummy_weight", load_env().dummy_weight)
        path = resolve_model(model_path, dummy_weight=kwargs.get("dummy_weight", False))
        self.tokenizer = load_tokenizer(path)
        config = SchedulerConfig(model_path=str(path), dtype=resolve_dtype(dtype, device),
                                 device=device, **kwargs)
        # tp_size=N: this process is rank 0 and N-1 spawned processes are the others; before
        # each step they get the requests added since the last one (scheduler/tp.py).
        self._ranks = OfflineRanks(config, config.tp_size) if config.tp_size > 1 else None
        self._pending: list[UserMsg] = []
        if self._ranks is not None:
            config = dataclasses.replace(config, device=self._ranks.rank0.device(device))
            init_tp(0, config.tp_size, self._ranks.rank0.init_method, config.device)
        # >>> ch21
        # FlashInfer Trace (chapters 21-22) sits above the engine: started here, in the engine's
        # process, before the model runs or a CUDA graph is captured, it installs its hook in the
        # op registry (minisgl.ops.hook), which every op call goes through.
        self.trace = trace_session(config)
        if self.trace is not None:
            config = self.trace.engine_config  # with the attention backend apply chose
        # <<< ch21
        self.scheduler = Scheduler(config)  # EOS ids from the model's config (ModelConfig)
        random.setstate(caller_random)

    def generate(self, prompts: list[str] | list[list[int]],
                 sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[dict[str, Any]]:
        """One result per prompt, in order: {"text", "token_ids", "finish_reason",
        "cached_tokens"}, plus "error" for a request that could not run and, with speculative
        decoding, "spec_verify_ct" (its speculative steps: len(token_ids) / it is the mean
        number of tokens a step gave it)."""
        params = sampling_params or SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        uids = [self._add(self._encode(p), sp) for p, sp in zip(prompts, params)]
        results = self._run(set(uids), use_tqdm and len(prompts) > 1)
        return [results[uid] for uid in uids]

    def _add(self, input_ids: list[int], params: SamplingParams) -> int:
        uid = self.scheduler.add_request(input_ids, params)
        if self._ranks is not None:
            self._pending.append(UserMsg(uid, input_ids, params))
        return uid

    def _encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        if not all(isinstance(t, int) for t in prompt):
            raise TypeError("a prompt must be a string or a list of token ids")
        return list(prompt)

    def _run(self, uids: set[int], show_progress: bool) -> dict[int, dict[str, Any]]:
        tokens: dict[int, list[int]] = {uid: [] for uid in uids}
        results: dict[int, dict[str, Any]] = {}
        with tqdm(total=len(uids), desc="generate", unit="req", file=sys.stderr,
                  disable=not show_progress) as bar:
            while len(results) < len(uids):
                if self._ranks is not None:  # the other ranks add the same and step with us
                    self._ranks.send(self._pending)
                    self._pending = []
                for out in self.scheduler.step():
                    if out.uid not in uids:
                        continue
                    if out.token is not None:
                        tokens[out.uid].append(out.token)
                    if out.finished:
                        results[out.uid] = self._result(out, tokens[out.uid])
                        bar.update()
        return results

    def _result(self, out: TokenOutput, token_ids: list[int]) -> dict[str, Any]:
        result = {"text": self.tokenizer.decode(token_ids, skip_special_tokens=True),
                  "token_ids": token_ids, "finish_reason": out.finish_reason,
                  "cached_tokens": out.cached_tokens}
        if out.error is not None:
            result["error"] = out.error
        # >>> ch24
        if out.spec_verify_ct:  # speculative decoding: steps that verified its guesses
            result["spec_verify_ct"] = out.spec_verify_ct
        # <<< ch24
        return result

    def shutdown(self) -> None:
        self.scheduler.shutdown()
        # >>> ch21
        if self.trace is not None:
            self.trace.close()  # writes the capture's summary and uninstalls the hook
            self.trace = None
        # <<< ch21
        if self._ranks is not None:
            self._ranks.shutdown()
            self._ranks = None
            destroy_tp()
