"""The OpenAI-compatible request bodies, and errors in OpenAI's JSON shape.

Bodies are validated strictly: "5" is not a number and "yes" is not a boolean, because a client
that sends them has a bug worth reporting. Fields the server does not know are ignored (clients
send many optional ones); fields it knows but cannot honour (n > 1) are refused.

Every value is checked against exact bounds here, at the boundary, so nothing reaches the engine
that it cannot run: integers fit in 64 bits, floats are finite, token ids are inside the
vocabulary and top_k is at most its size (`RequestLimits`, from the scheduler at start-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from minisgl.core import MIN_TEMPERATURE, SamplingParams

T = TypeVar("T", bound=BaseModel)
INT64_MAX = (1 << 63) - 1  # the wire (msgpack) and torch carry signed 64-bit integers
# A prompt longer than max_seq_len * MAX_CHARS_PER_TOKEN characters is refused before it is
# tokenized. Tokenizing costs time in proportion to the characters (about 1 s per million), so
# without a bound one huge prompt holds a tokenizer worker, and every request queued behind it,
# for seconds, only to fail the context check afterwards. Natural text and code average 3-5
# characters per token; 32 is far above that, so only degenerate text (say, a long run of one
# character that the vocabulary has a long token for) could be refused although it would fit.
MAX_CHARS_PER_TOKEN = 32


@dataclass(frozen=True)
class RequestLimits:
    """What the engine can run: ids in [0, vocab_size), prompt + answer <= max_seq_len."""

    vocab_size: int
    max_seq_len: int

    @property
    def max_prompt_chars(self) -> int:
        return self.max_seq_len * MAX_CHARS_PER_TOKEN

    def check_ids(self, ids: list[int], param: str) -> None:
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise ApiError(400, f"'{param}' holds the token id {bad}, outside the vocabulary "
                                f"[0, {self.vocab_size})", param=param)

    def check_chars(self, chars: int, param: str) -> None:
        if chars > self.max_prompt_chars:
            raise ApiError(400, f"a prompt of {chars} characters cannot fit in the context of "
                                f"{self.max_seq_len} tokens (prompts over "
                                f"{self.max_prompt_chars} characters are refused untokenized)",
                           param=param, code="context_length_exceeded")


class ApiError(Exception):
    """An error for the client: an HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str | None = None,
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        kind = kind or ("server_error" if status >= 500 else "invalid_request_error")
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: str | None = None  # None: the served model
    max_tokens: int | None = Field(None, gt=0, le=INT64_MAX)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    # not in OpenAI's API; -1 is off (SGLang and vLLM accept it too); at most the vocabulary size
    top_k: int = Field(-1, ge=-1, le=INT64_MAX)
    ignore_eos: bool = False
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1, description="only one choice per request is supported")

    @property
    def asked_max_tokens(self) -> int | None:
        """The client's limit on new tokens, None when it gave none."""
        return self.max_tokens

    def sampling_params(self, default_max_tokens: int | None) -> SamplingParams:
        """The engine's parameters; max_tokens None leaves the limit to the scheduler."""
        # A temperature too small to divide the logits by is greedy in effect: send it as such.
        temperature = self.temperature if self.temperature >= MIN_TEMPERATURE else 0.0
        try:
            max_tokens = self.asked_max_tokens or default_max_tokens
            return SamplingParams(temperature, self.top_k, self.top_p, self.ignore_eos, max_tokens)
        except ValueError as e:
            raise ApiError(400, str(e), param="top_k" if "top_k" in str(e) else None) from None

    def check_limits(self, limits: RequestLimits) -> None:
        """The checks that need the engine's numbers (ApiError 400 naming the field)."""
        if not (self.top_k == -1 or 1 <= self.top_k <= limits.vocab_size):
            raise ApiError(400, f"top_k must be -1 (off) or in [1, {limits.vocab_size}] (the "
                                f"vocabulary size), got {self.top_k}", param="top_k")

    @property
    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, gt=0, le=INT64_MAX)  # newer max_tokens

    @property
    def asked_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def chat(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text} for m in self.messages]

    def check_limits(self, limits: RequestLimits) -> None:
        super().check_limits(limits)
        limits.check_chars(sum(len(m.text) for m in self.messages), "messages")


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str]

    def one_prompt(self) -> str | list[int]:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str):
            if len(self.prompt) != 1:
                raise ApiError(400, "only one prompt per request is supported", param="prompt")
            return self.prompt[0]
        if not self.prompt:
            raise ApiError(400, "the prompt is empty", param="prompt")
        return self.prompt  # type: ignore[return-value]

    def check_limits(self, limits: RequestLimits) -> None:
        super().check_limits(limits)
        prompt = self.one_prompt()
        if isinstance(prompt, str):
            limits.check_chars(len(prompt), "prompt")
        else:
            limits.check_ids(prompt, "prompt")


class GenerateRequest(_Sampling):
    """SGLang-style /generate: a prompt text or token ids; greedy unless told otherwise."""

    text: str | None = None
    input_ids: list[int] | None = None
    temperature: float = Field(0.0, ge=0, le=2)

    def one_prompt(self) -> str | list[int]:
        if (self.text is None) == (self.input_ids is None):
            raise ApiError(400, "give exactly one of 'text' and 'input_ids'")
        if self.input_ids is not None and not self.input_ids:
            raise ApiError(400, "'input_ids' is empty", param="input_ids")
        return self.text if self.text is not None else self.input_ids  # type: ignore[return-value]

    def check_limits(self, limits: RequestLimits) -> None:
        prompt = self.one_prompt()
        super().check_limits(limits)
        if isinstance(prompt, str):
            limits.check_chars(len(prompt), "text")
        else:
            limits.check_ids(prompt, "input_ids")


def parse_body(cls: type[T], body: bytes, limits: RequestLimits | None = None) -> T:
    """The request body as `cls`, or a 400 ApiError that names the offending field; with
    `limits`, checked against the engine's numbers too."""
    try:
        req = cls.model_validate_json(body)
    except ValidationError as e:
        raise _error_for(e) from None
    if limits is not None:
        req.check_limits(limits)  # type: ignore[attr-defined]
    return req


def _error_for(e: ValidationError) -> ApiError:
    """The 400 ApiError for a body that does not validate."""
    first = e.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        return ApiError(400, f"the body is not valid JSON: {first['msg']}")
    # A union field adds the member it tried to the location ("prompt", "list[int]", 1);
    # the client needs the field's own path, the part before that tag.
    tags = [i for i, part in enumerate(first["loc"]) if _is_type_tag(part)]
    loc = first["loc"][: tags[0]] if tags else first["loc"]
    where = ".".join(str(part) for part in loc)
    if len(loc) < len(first["loc"]):
        return ApiError(400, f"'{where}' has a type this field does not allow", param=where)
    if not where:
        return ApiError(400, f"the body must be a JSON object: {first['msg']}")
    if first["type"] == "missing":
        return ApiError(400, f"'{where}' is required", param=where)
    return ApiError(400, f"'{where}': {first['msg']}", param=where)


def _is_type_tag(part: str | int) -> bool:
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or "[" in part)
