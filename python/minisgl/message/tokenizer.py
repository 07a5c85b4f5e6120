"""Messages into the tokenizer and detokenizer workers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minisgl.core import SamplingParams

from .codec import message


@message
@dataclass
class TokenizeMsg:
    """A new request from the frontend: exactly one of text, input_ids or messages is set."""

    uid: int
    sampling_params: SamplingParams
    text: str | None = None  # a completion prompt, encoded with the model's special tokens
    input_ids: list[int] | None = None  # a prompt that is already tokens
    messages: list[dict[str, Any]] | None = None  # a chat, rendered by the chat template
    # >>> ch27
    dp_rank: int = 0  # the scheduler replica that runs it (--dp-size, chapter 27)
    # <<< ch27


@message
@dataclass
class AbortMsg:
    """Stop a request (its client left, or a stop string ended it); sent along the same path."""

    uid: int
    # >>> ch27
    dp_rank: int = 0  # the replica running the request
    # <<< ch27


@message
@dataclass
class ControlMsg:
    """A question for the scheduler that is not a request: "stats" or "flush_cache"."""

    uid: int
    command: str
    # >>> ch27
    dp_rank: int = 0  # the replica asked
    # <<< ch27
