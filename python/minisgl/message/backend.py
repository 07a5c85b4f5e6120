"""Messages into the scheduler (the backend). What comes out of it, TokenOutput, is the
scheduler's own record (core.py), registered as a message in codec.py."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.core import SamplingParams

from .codec import message


@message
@dataclass
class UserMsg:
    """A tokenized request, ready to schedule. sampling_params.max_tokens None: as many new
    tokens as the scheduler's context and KV pool leave after the prompt."""

    uid: int
    input_ids: list[int]
    sampling_params: SamplingParams
    # >>> ch27
    dp_rank: int = 0  # the scheduler replica it is for (--dp-size, chapter 27)
    # <<< ch27
