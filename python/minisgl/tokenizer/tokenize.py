"""Text to token ids: a thin, typed wrapper over the model folder's Hugging Face tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from minisgl.models.config import ModelConfig
from minisgl.utils.misc import MinisglError

from .detokenize import IncrementalDetokenizer


class Tokenizer:
    """The tokenizer of one model folder, plus the ids that end a generation."""

    def __init__(self, model_dir: str | Path) -> None:
        from transformers import AutoTokenizer

        self.model_dir = Path(model_dir)
        try:
            self.hf = AutoTokenizer.from_pretrained(self.model_dir)
        except (OSError, ValueError) as e:
            raise MinisglError(f"cannot load the tokenizer of {self.model_dir}: {e}") from None

    @cached_property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The ids that end a generation, by the one rule in ModelConfig (see models/config.py)."""
        return ModelConfig.from_path(self.model_dir).eos_token_ids

    @property
    def vocab_size(self) -> int:
        """How many ids the tokenizer knows, added tokens included (can be below the model's)."""
        return len(self.hf)

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; add_special_tokens adds what the model puts around a text (BOS)."""
        return self.hf.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        # No "clean-up" of spaces before punctuation: it would make decoding depend on context,
        # and the incremental detokenizer must produce exactly this text piece by piece.
        return self.hf.decode(
            list(ids), skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False
        )

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tokenize: bool = True,
        **template_kwargs: Any,
    ) -> list[int] | str:
        """The chat rendered by the model's template: token ids, or the text if tokenize=False.

        Extra keyword arguments reach the template (e.g. Qwen3's enable_thinking=False).
        """
        if not self.hf.chat_template:
            raise MinisglError(f"the tokenizer of {self.model_dir} has no chat template")
        text = self.hf.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **template_kwargs
        )
        # The template already wrote every special token (BOS included) the model expects.
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def detokenizer(self, *, skip_special_tokens: bool = True) -> IncrementalDetokenizer:
        """A fresh streaming decoder for one request."""
        return IncrementalDetokenizer(self.decode, skip_special_tokens=skip_special_tokens)


def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    return Tokenizer(model_dir)
