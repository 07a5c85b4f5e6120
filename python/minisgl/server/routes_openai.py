"""The OpenAI-compatible endpoints: what the `openai` client calls.

    POST /v1/chat/completions   chat, streaming (SSE) or not
    POST /v1/completions        text completion, streaming or not
    GET  /v1/models             the served model
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request

from .choices import chat_logprobs, completion_logprobs
from .deps import ServerDeps, prompt_keywords
from .pieces import Piece, Usage, collect
from .protocol import ChatCompletionRequest, CompletionRequest
from .sse import sse_response

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
CHAT_DEFAULT_MAX_TOKENS = None  # chat: whatever the context and the KV pool leave


def openai_router(deps: ServerDeps) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        limits = deps.limits
        card = {"id": deps.model_name, "object": "model", "created": 0, "owned_by": "minisgl",
                "root": deps.args.model_path,
                "max_model_len": limits.max_seq_len if limits else None}
        return {"object": "list", "data": [card]}

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        req = await deps.body(request, ChatCompletionRequest)
        model = deps.check_model(req.model)
        params = req.sampling_params(CHAT_DEFAULT_MAX_TOKENS)
        prompt: dict[str, Any] = {"messages": req.chat()}
        # >>> ch27
        prompt["dp_rank"] = req.data_parallel_rank  # None: the load balancer picks
        # <<< ch27
        gen = await deps.answers(params, req.n, prompt, req.stop_strings, request)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
                "model": model}
        want_logprobs = params.logprobs is not None
        if not req.stream:
            choices, usage = await collect(gen, req.n)
            return {**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": i, "message": {"role": "assistant", "content": c.text},
                 "finish_reason": c.finish_reason,
                 "logprobs": chat_logprobs(c.logprobs) if want_logprobs else None}
                for i, c in enumerate(choices)]}
        chunk = {**head, "object": "chat.completion.chunk"}
        usage = Usage(req.n)

        def render(item: tuple[int, Piece]) -> list[dict[str, Any]]:
            index, piece = item
            out = []
            if piece.text or piece.logprobs:
                choice = {"index": index, "delta": {"content": piece.text}, "finish_reason": None}
                if want_logprobs:
                    choice["logprobs"] = chat_logprobs(piece.logprobs)
                out.append({**chunk, "choices": [choice]})
            if piece.finish_reason is not None:
                out.append({**chunk, "choices": [{"index": index, "delta": {},
                                                  "finish_reason": piece.finish_reason}]})
                if usage.add(piece) and req.include_usage:
                    out.append({**chunk, "choices": [], "usage": usage.total})
            return out

        roles = [{**chunk, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]} for i in range(req.n)]
        return sse_response(gen, render, first=roles)

    @router.post("/v1/completions")
    async def completions(request: Request):
        req = await deps.body(request, CompletionRequest)
        model = deps.check_model(req.model)
        params = req.sampling_params(COMPLETION_DEFAULT_MAX_TOKENS)
        keywords = prompt_keywords(req.one_prompt())
        # >>> ch27
        keywords["dp_rank"] = req.data_parallel_rank  # None: the load balancer picks
        # <<< ch27
        gen = await deps.answers(params, req.n, keywords, req.stop_strings, request)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": int(time.time()), "model": model}
        want_logprobs = params.logprobs is not None
        if not req.stream:
            choices, usage = await collect(gen, req.n)
            return {**head, "usage": usage, "choices": [
                {"index": i, "text": c.text, "finish_reason": c.finish_reason,
                 "logprobs": completion_logprobs(c.logprobs, 0) if want_logprobs else None}
                for i, c in enumerate(choices)]}
        usage = Usage(req.n)
        offsets = [0] * req.n  # characters of each answer's token texts so far (text_offset)

        def render(item: tuple[int, Piece]) -> list[dict[str, Any]]:
            index, piece = item
            out = []
            if piece.text or piece.logprobs or piece.finish_reason is not None:
                logprobs = None
                if want_logprobs:
                    logprobs = completion_logprobs(piece.logprobs, offsets[index])
                    offsets[index] += sum(len(t.text) for t in piece.logprobs)
                out.append({**head, "choices": [{"index": index, "text": piece.text,
                                                 "logprobs": logprobs,
                                                 "finish_reason": piece.finish_reason}]})
            if piece.finish_reason is not None and usage.add(piece) and req.include_usage:
                out.append({**head, "choices": [], "usage": usage.total})
            return out

        return sse_response(gen, render)

    return router
