"""The endpoints that run the server rather than the model: health, metrics, what runs here,
and the prefix cache's flush.

    GET  /health           the scheduler's KV page counts, fresh or as last published
                           (health.py); 503 only when a worker is gone or silent for long
    GET  /metrics          Prometheus metrics (metrics.py)
    GET  /version          the minisgl version
    GET  /get_model_info   SGLang's: the model's path and sizes
    GET  /get_server_info  SGLang's: the server's settings, limits and scheduler counts
    POST /flush_cache      drop the prefix cache (only while idle); no body needed
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from minisgl import __version__

from .deps import ServerDeps
from .dp import load_rows
from .metrics import CONTENT_TYPE
from .protocol import ApiError


def ops_router(deps: ServerDeps) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health() -> JSONResponse:
        report = await deps.status.health()
        return JSONResponse(report.body, status_code=report.status)

    @router.get("/metrics")
    async def prometheus_metrics() -> Response:
        stats = await deps.status.latest()  # while a long step runs, the numbers from before it
        if stats is not None:
            deps.metrics.scheduler.update(stats)
        return Response(deps.metrics.render(), media_type=CONTENT_TYPE)

    @router.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    # >>> ch27
    # What sglang-router asks its workers (chapter 27): SGLang's newer names of the two info
    # endpoints, and /get_load below
    @router.get("/model_info")
    # <<< ch27
    @router.get("/get_model_info")
    async def get_model_info() -> dict[str, Any]:
        limits = deps.limits
        assert limits is not None
        return {"model_path": deps.args.model_path, "tokenizer_path": deps.args.model_path,
                "served_model_name": deps.model_name, "is_generation": True,
                "max_context_length": limits.max_seq_len, "vocab_size": limits.vocab_size}

    # >>> ch27
    @router.get("/server_info")
    # <<< ch27
    @router.get("/get_server_info")
    async def get_server_info() -> dict[str, Any]:
        limits = deps.limits
        return {"version": __version__, **deps.args.public_settings(), "max_context_length":
                limits.max_seq_len if limits else None, "scheduler": await deps.status.latest()}

    @router.post("/flush_cache")
    async def flush_cache() -> JSONResponse:
        reply = await deps.client.control("flush_cache")
        if not reply.ok:
            raise ApiError(409, reply.error or "cannot flush the cache now")
        return JSONResponse({"status": "ok", **reply.info})
    # >>> ch27

    @router.get("/get_load")
    async def get_load() -> list[dict[str, int]]:
        """SGLang's: one row per replica (sglang-router's load monitor reads num_tokens)."""
        stats = await deps.status.latest()
        if stats is None:
            raise ApiError(503, "the scheduler has not answered yet")
        return load_rows(stats, deps.args.page_size)
    # <<< ch27

    return router
