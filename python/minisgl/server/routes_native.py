"""SGLang's own generation endpoint, for clients written against SGLang.

    POST /generate   text or token ids (or a list of either, a batch) and sampling_params in;
                     text, output_ids and meta_info out
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from fastapi import APIRouter, Request

from .deps import ServerDeps, prompt_keywords
from .pieces import Answer, Piece, collect
from .protocol import GenerateRequest
from .sse import sse_response


def native_router(deps: ServerDeps) -> APIRouter:
    router = APIRouter()

    @router.post("/generate")
    async def generate(request: Request):
        req = await deps.body(request, GenerateRequest)
        # >>> ch27
        deps.check_model(req.model)  # sglang-router names it (null: the served model)
        # <<< ch27
        if req.batched:
            return await generate_batch(req, request)
        n = req.sampling_params.n
        gen = await deps.answers(req.to_sampling_params(), n, keywords(req, req.prompts()[0]),
                                 req.stop_strings, request)
        rid = uuid.uuid4().hex
        if not req.stream:
            choices, _ = await collect(gen, n)
            outs = [{"text": c.text, "output_ids": c.token_ids,
                     "meta_info": meta_info(f"{rid}-{i}" if n > 1 else rid, c.last,
                                            len(c.token_ids))}
                    for i, c in enumerate(choices)]
            return outs if n > 1 else outs[0]  # SGLang answers n > 1 with a list
        # As SGLang's, every event holds the text and output ids so far, not just the new part;
        # with n > 1 each event is one answer's, with its "index".
        answers_so_far = [Answer() for _ in range(n)]

        def render(item: tuple[int, Piece]) -> list[dict[str, Any]]:
            index, piece = item
            answer = answers_so_far[index]
            answer.add(piece)
            event = {"text": answer.text, "output_ids": list(answer.token_ids),
                     "meta_info": meta_info(f"{rid}-{index}" if n > 1 else rid, piece,
                                            len(answer.token_ids))}
            return [{**event, "index": index} if n > 1 else event]

        return sse_response(gen, render)

    async def generate_batch(req: GenerateRequest, request: Request) -> list[dict[str, Any]]:
        """SGLang's batch: a list of prompts gets a list of answers, the n answers of each
        prompt in a row. The prompts run together; if one is refused, the others are aborted
        and the refusal is the answer (protocol.py refuses a streamed batch)."""
        n, params = req.sampling_params.n, req.to_sampling_params()

        async def one(prompt: str | list[int]) -> list[Answer]:
            gen = await deps.answers(params, n, keywords(req, prompt), req.stop_strings,
                                     request)
            return (await collect(gen, n))[0]

        try:
            async with asyncio.TaskGroup() as group:  # a failure cancels the others
                tasks = [group.create_task(one(prompt)) for prompt in req.prompts()]
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        rid = uuid.uuid4().hex
        done = [answer for task in tasks for answer in task.result()]
        return [{"text": a.text, "output_ids": a.token_ids,
                 "meta_info": meta_info(f"{rid}-{i}", a.last, len(a.token_ids))}
                for i, a in enumerate(done)]

    return router


def keywords(req: GenerateRequest, prompt: str | list[int]) -> dict[str, Any]:
    """client.submit's keywords for one prompt of the request."""
    out = prompt_keywords(prompt)
    # >>> ch27
    out["dp_rank"] = req.data_parallel_rank  # None: the load balancer picks
    # <<< ch27
    return out


def meta_info(rid: str, piece: Piece, completion_tokens: int) -> dict[str, Any]:
    """SGLang's meta_info of a /generate answer (so far): finish_reason is null until the last
    event, then {"type": "stop"} or {"type": "length", "length": tokens generated}."""
    reason: dict[str, Any] | None = None
    if piece.finish_reason is not None:
        reason = {"type": piece.finish_reason}
        if piece.finish_reason == "length":
            reason["length"] = completion_tokens
    info = {"id": rid, "finish_reason": reason, "prompt_tokens": piece.prompt_tokens,
            "completion_tokens": completion_tokens, "cached_tokens": piece.cached_tokens}
    # >>> ch24
    if piece.spec_verify_ct:  # SGLang's fields under speculative decoding
        info["spec_verify_ct"] = piece.spec_verify_ct
        info["spec_accept_length"] = completion_tokens / piece.spec_verify_ct
    # <<< ch24
    return info
