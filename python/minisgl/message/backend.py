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
