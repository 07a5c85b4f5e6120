"""The offline API: `LLM(model).generate(prompts, sampling_params)`, all in one process.

It feeds every prompt to the scheduler and steps it until each request has finished. Prompts are
plain text (encoded as is, no chat template) or token-id lists.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from tqdm import tqdm

from minisgl.core import SamplingParams, TokenOutput
from minisgl.engine.config import default_device, resolve_dtype
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model


class LLM:
    def __init__(self, model_path: str, dtype: str | torch.dtype = "auto",
                 device: str | None = None, **kwargs: Any) -> None:
        device = device or default_device()
        path = resolve_model(model_path, dummy_weight=kwargs.get("dummy_weight", False))
        self.tokenizer = load_tokenizer(path)
        config = SchedulerConfig(model_path=str(path), dtype=resolve_dtype(dtype, device),
                                 device=device, **kwargs)
        self.scheduler = Scheduler(config)  # EOS ids from the model's config (ModelConfig)

    def generate(self, prompts: list[str] | list[list[int]],
                 sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[dict[str, Any]]:
        """One result per prompt, in order: {"text", "token_ids", "finish_reason",
        "cached_tokens"}, plus "error" for a request that could not run."""
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
        return result

    def shutdown(self) -> None:
        self.scheduler.shutdown()
