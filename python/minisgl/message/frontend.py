"""Messages into the frontend (the API server or the shell), and the workers' start-up report."""

from __future__ import annotations

from dataclasses import dataclass, field

from .codec import message


@message
@dataclass
class UserReply:
    """What a request produced since its last reply: text, and the tokens behind it."""

    uid: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None  # "stop", "length", "abort" or "error"
    error: str | None = None  # why the request could not run (finish_reason "error")
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens that came from the prefix cache


@message
@dataclass
class ControlReply:
    """The scheduler's answer to a ControlMsg."""

    uid: int
    ok: bool
    info: dict[str, int] = field(default_factory=dict)
    error: str | None = None


@message
@dataclass
class ReadyMsg:
    """A worker process tells the launcher it has started (or why it could not)."""

    name: str
    error: str | None = None
