"""Messages into the frontend (the API server or the shell), and the workers' start-up report."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from minisgl.core import TokenOutput

from .codec import message


@message
@dataclass
class UserReply(TokenOutput):
    """A scheduler step's output for one request, plus the text its token completes (a token
    can end in the middle of a character, so the text may lag a token behind)."""

    text: str = ""
    # >>> ch16
    # With log-probabilities: the text of the token and of each top token, each on its own
    # (what OpenAI's `token` fields show)
    token_texts: list[str] | None = None
    # <<< ch16

    @classmethod
    def of(cls, out: TokenOutput, text: str = "", **extra: object) -> UserReply:
        return cls(**{f.name: getattr(out, f.name) for f in fields(TokenOutput)}, text=text,
                   **extra)


@message
@dataclass
class ControlReply:
    """The scheduler's answer to a ControlMsg."""

    uid: int
    ok: bool
    info: dict[str, Any] = field(default_factory=dict)  # numbers, and a few strings
    error: str | None = None


@message
@dataclass
class ReadyMsg:
    """A worker process tells the launcher it has started (or why it could not)."""

    name: str
    error: str | None = None
