"""What the endpoints share, in one object that each router is built from.

The routers (routes_openai.py, routes_native.py, routes_ops.py) take a `ServerDeps` rather than
reaching for module globals, so a test builds one router on its own with a fake client.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel

from minisgl.core import SamplingParams
from minisgl.message.client import FrontendClient, RequestStream

from .args import ServerArgs
from .bodies import BodyParser
from .choices import merge, start_choices
from .health import SchedulerStatus
from .metrics import ServerMetrics
from .pieces import Piece, first_and_rest, pieces
from .protocol import ApiError, RequestLimits, choice_params

T = TypeVar("T", bound=BaseModel)
# >>> ch27
ROUTER_UNNAMED_MODEL = "unknown"  # what sglang-router puts in "model" when a request has none
# <<< ch27


@dataclass
class ServerDeps:
    client: FrontendClient  # requests and control questions to the workers
    args: ServerArgs
    model_names: list[str]  # the names clients may ask for; the first is the one reported
    metrics: ServerMetrics
    parser: BodyParser
    status: SchedulerStatus  # what /health and /metrics report of the scheduler
    # The engine's vocabulary and context sizes: None until the app's startup has asked
    limits: RequestLimits | None = None

    @classmethod
    def build(cls, client: FrontendClient, args: ServerArgs,
              dead_worker: Callable[[], str | None] = lambda: None) -> ServerDeps:
        # What clients may call the model: the name given with --served-model-name, else the name
        # it was asked for by (--model) and its folder. The first is the one the server reports.
        model_names = [args.served_model_name] if args.served_model_name else \
            [args.model_name, args.model_path]

        async def ask_stats(timeout: float) -> dict[str, int]:
            return (await client.control("stats", timeout=timeout)).info

        return cls(client, args, model_names, ServerMetrics(model_names[0]), BodyParser(),
                   SchedulerStatus(ask_stats, dead_worker, lambda: client.closing))

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    async def body(self, request: Request, cls: type[T]) -> T:
        return await self.parser.parse(cls, await request.body(), self.limits)

    def check_model(self, name: str | None) -> str:
        # >>> ch27
        if name == ROUTER_UNNAMED_MODEL and name not in self.model_names:
            name = None  # sglang-router's stand-in for a request that names no model
        # <<< ch27
        if name is not None and name not in self.model_names:
            raise ApiError(404, f"the model '{name}' does not exist; this server serves "
                                f"'{self.model_name}'", param="model", code="model_not_found")
        return self.model_name

    async def run(self, stream: RequestStream, stops: list[str], request: Request
                  ) -> AsyncGenerator[Piece]:
        """The request's pieces, timed for the metrics; the first one has arrived already."""
        return await first_and_rest(pieces(stream, stops, request, self.metrics.start_request()))

    async def answers(self, params: SamplingParams, n: int, prompt: dict[str, Any],
                      stops: list[str], request: Request) -> AsyncGenerator[tuple[int, Piece]]:
        """(choice index, piece) of the n answers to one prompt (choices.py); `prompt`: the
        keywords of client.submit. Refusals are raised here, before any byte is sent."""
        # >>> ch27
        prompt = self.on_replica(prompt, n)
        # <<< ch27
        gens = await start_choices(
            lambda p: self.run(self.client.submit(p, **prompt), stops, request), params, n,
            choice_params)
        return merge(gens)
    # >>> ch27

    def on_replica(self, prompt: dict[str, Any], n: int) -> dict[str, Any]:
        """client.submit's keywords with the replica to run on (--dp-size, chapter 27): the one
        the request named (`dp_rank`, SGLang's data_parallel_rank), checked; for n answers one
        replica for all, so that the others find the first one's prompt in its prefix cache."""
        dp_rank, dp_size = prompt.get("dp_rank"), self.args.dp_size
        if dp_rank is not None and dp_rank >= dp_size:
            raise ApiError(400, f"'data_parallel_rank' is {dp_rank}, but this server has "
                                f"{dp_size} replica(s) (0..{dp_size - 1})",
                           param="data_parallel_rank")
        if dp_size == 1:  # one replica: nothing to choose
            return {k: v for k, v in prompt.items() if k != "dp_rank"}
        if dp_rank is None and n > 1:
            return {**prompt, "dp_rank": self.client.balancer.choose()}  # type: ignore[attr-defined]
        return prompt
    # <<< ch27


def prompt_keywords(prompt: str | list[int]) -> dict[str, Any]:
    """client.submit's keyword for a completion prompt: text (encoded by a tokenizer worker)
    or token ids."""
    return {"text": prompt} if isinstance(prompt, str) else {"input_ids": prompt}
