"""The OpenAI-compatible request bodies, and errors in OpenAI's JSON shape.

Bodies are validated strictly: "5" is not a number and "yes" is not a boolean, because a client
that sends them has a bug worth reporting. Fields the server does not know are ignored (clients
send many optional ones); fields it knows but cannot honour (n > 1) are refused.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from minisgl.core import SamplingParams

T = TypeVar("T", bound=BaseModel)


class ApiError(Exception):
    """An error for the client: an HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: str | None = None  # None: the served model
    max_tokens: int | None = Field(None, gt=0)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1  # not in OpenAI's API; -1 is off (SGLang and vLLM accept it too)
    ignore_eos: bool = False
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1, description="only one choice per request is supported")

    @property
    def asked_max_tokens(self) -> int | None:
        """The client's limit on new tokens, None when it gave none."""
        return self.max_tokens

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        try:
            return SamplingParams(self.temperature, self.top_k, self.top_p, self.ignore_eos,
                                  self.asked_max_tokens or default_max_tokens)
        except ValueError as e:
            raise ApiError(400, str(e)) from None

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
    max_completion_tokens: int | None = Field(None, gt=0)  # the newer name of max_tokens

    @property
    def asked_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def chat(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text} for m in self.messages]


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


class GenerateRequest(_Sampling):
    """SGLang-style /generate: a prompt text or token ids; greedy unless told otherwise."""

    text: str | None = None
    input_ids: list[int] | None = None
    temperature: float = Field(0.0, ge=0, le=2)


def parse_body(cls: type[T], body: bytes) -> T:
    """The request body as `cls`, or a 400 ApiError that names the offending field."""
    try:
        return cls.model_validate_json(body)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            raise ApiError(400, f"the body is not valid JSON: {first['msg']}") from None
        # A union field adds the member it tried to the location ("prompt", "list[int]", 1);
        # the client needs the field's own path, the part before that tag.
        tags = [i for i, part in enumerate(first["loc"]) if _is_type_tag(part)]
        loc = first["loc"][: tags[0]] if tags else first["loc"]
        where = ".".join(str(part) for part in loc)
        if len(loc) < len(first["loc"]):
            raise ApiError(400, f"'{where}' has a type this field does not allow",
                           param=where) from None
        if not where:
            raise ApiError(400, f"the body must be a JSON object: {first['msg']}") from None
        if first["type"] == "missing":
            raise ApiError(400, f"'{where}' is required", param=where) from None
        raise ApiError(400, f"'{where}': {first['msg']}", param=where) from None


def _is_type_tag(part: str | int) -> bool:
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or "[" in part)
