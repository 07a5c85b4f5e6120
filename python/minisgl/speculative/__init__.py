"""Speculative decoding (chapter 24): guess several tokens, let the target model verify them in
one forward pass, keep what it agrees with."""

from .build import SpeculativeSettings, build_speculator, resolve_draft, with_room_for_draft
from .speculator import Speculator, StepResult

__all__ = ["SpeculativeSettings", "Speculator", "StepResult", "build_speculator",
           "resolve_draft", "with_room_for_draft"]
