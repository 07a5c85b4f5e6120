"""Messages into the scheduler (the backend)."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.core import SamplingParams

from .codec import message


@message
@dataclass
class UserMsg:
    """A tokenized request, ready to schedule."""

    uid: int
    input_ids: list[int]
    sampling_params: SamplingParams
    # max_tokens was not given: the scheduler lowers it to what its context and KV pool leave
    fit_max_tokens: bool = False
