"""The request bodies of the HTTP API, and errors in OpenAI's JSON shape.

Bodies are validated strictly: "5" is not a number and "yes" is not a boolean, because a client
that sends them has a bug worth reporting. Nothing is silently dropped either: a field the server
does not know is a 400 that names it, and so is a field it knows but cannot honour yet (logit_bias,
best_of, echo, ...) when it asks for anything but the default. A few fields that change nothing
here are accepted and ignored; `IGNORED_FIELDS` lists them, with the reason.

Every value is checked against exact bounds here, at the boundary, so nothing reaches the engine
that it cannot run: integers fit in 64 bits, floats are finite, token ids are inside the
vocabulary and top_k is at most its size (`RequestLimits`, from the scheduler at start-up).

Counts are bounded too, and checked by count before any work that grows with them: a prompt of
more token ids than the context, a chat of more than MAX_MESSAGES messages, more than MAX_STOPS
stop strings or one longer than MAX_STOP_CHARS are a 400 at once. Without these bounds one request
of a few megabytes (a million stop strings, four million token ids) made every later step of its
own cost seconds, and the whole server waited.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from minisgl.core import MAX_REPETITION_PENALTY, MAX_TOP_LOGPROBS, MIN_TEMPERATURE, SamplingParams
from minisgl.grammar.spec import (
    JSON_OBJECT_SCHEMA,
    GrammarError,
    GrammarKey,
    check_grammar,
    schema_key,
)

T = TypeVar("T", bound=BaseModel)
INT64_MAX = (1 << 63) - 1  # the wire (msgpack) and torch carry signed 64-bit integers
INT64_MIN = -(1 << 63)
# A prompt longer than max_seq_len * MAX_CHARS_PER_TOKEN characters is refused before it is
# tokenized. Tokenizing costs time in proportion to the characters (about 1 s per million), so
# without a bound one huge prompt holds a tokenizer worker, and every request queued behind it,
# for seconds, only to fail the context check afterwards. Natural text and code average 3-5
# characters per token; 32 is far above that, so only degenerate text (say, a long run of one
# character that the vocabulary has a long token for) could be refused although it would fit.
MAX_CHARS_PER_TOKEN = 32
GENERATE_DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default for /generate
# The most answers (`n`) one request may ask for: each is a request of its own in the engine
MAX_N = 16
MAX_COMPLETION_LOGPROBS = 5  # OpenAI's bound on /v1/completions' `logprobs`
# Stop strings are matched against each new piece of every answer (stop.py): the work per token
# grows with their number and length, so both are bounded. OpenAI allows 4; 16 of up to 256
# characters leave room for any real use.
MAX_STOPS = 16
MAX_STOP_CHARS = 256
# A chat is rendered by the template message by message; a template may render an empty message
# as nothing, so the context alone does not bound how many there are.
MAX_MESSAGES = 2048
# The most answers one /generate request may ask for: prompts in its batch times n
MAX_GENERATE_ANSWERS = 64
# >>> ch25
# A grammar's text is compiled against the whole vocabulary (chapter 25): bounded, so that one
# request cannot hold the compiler's thread, and every constrained request behind it, for long.
MAX_GRAMMAR_CHARS = 32768
# <<< ch25

# Fields a client may send that change nothing on this server, so they are accepted and ignored:
IGNORED_FIELDS = {
    "user": "an end-user id for the provider's abuse monitoring; there is none here",
    "safety_identifier": "the newer name of `user`",
    "metadata": "tags for the provider's stored-completions dashboard; nothing is stored here",
    "prompt_cache_key": "a routing hint for the provider's prompt cache; the radix cache needs "
                        "no hint",
    # >>> ch27
    # SGLang's fields that sglang-router sends with every request (chapter 27)
    "separate_reasoning": "SGLang's: split the reasoning from the answer; no reasoning parser "
                          "runs here, so there is nothing to split",
    "stream_reasoning": "SGLang's: stream that reasoning; see separate_reasoning",
    "log_metrics": "SGLang's /generate: record the request in the metrics; every request is",
    "no_logs": "SGLang's /generate: keep the request out of the logs; no request's text is "
               "logged here",
    # <<< ch27
}


@dataclass(frozen=True)
class RequestLimits:
    """What the engine can run: ids in [0, vocab_size), prompt + answer <= max_seq_len."""

    vocab_size: int
    max_seq_len: int
    # >>> ch25
    grammar_refusal: str | None = None  # why grammars are refused here; None: they run
    # <<< ch25

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> RequestLimits:
        """From the scheduler's answer to the "limits" control message (scheduler/io.py)."""
        limits = cls(info["vocab_size"], info["max_seq_len"])
        # >>> ch25
        limits = replace(limits, grammar_refusal=info.get("grammar_refusal"))
        # <<< ch25
        return limits

    @property
    def max_prompt_chars(self) -> int:
        return self.max_seq_len * MAX_CHARS_PER_TOKEN

    def check_ids(self, ids: list[int], param: str) -> None:
        # The count first: it costs nothing, and a prompt that cannot fit is not worth a look.
        if len(ids) >= self.max_seq_len:
            raise ApiError(400, f"a prompt of {len(ids)} tokens cannot fit in the context of "
                                f"{self.max_seq_len} tokens (the prompt and at least one new "
                                f"token must fit)", param=param, code="context_length_exceeded")
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):  # min/max run at C speed
            bad = next(i for i in ids if not 0 <= i < self.vocab_size)
            raise ApiError(400, f"'{param}' holds the token id {bad}, outside the vocabulary "
                                f"[0, {self.vocab_size})", param=param)

    def check_chars(self, chars: int, param: str) -> None:
        if chars > self.max_prompt_chars:
            raise ApiError(400, f"a prompt of {chars} characters cannot fit in the context of "
                                f"{self.max_seq_len} tokens (prompts over "
                                f"{self.max_prompt_chars} characters are refused untokenized)",
                           param=param, code="context_length_exceeded")

    def check_top_k(self, top_k: int, param: str) -> None:
        if not (top_k == -1 or 1 <= top_k <= self.vocab_size):
            raise ApiError(400, f"top_k must be -1 (off) or in [1, {self.vocab_size}] (the "
                                f"vocabulary size), got {top_k}", param=param)
    # >>> ch25

    def check_grammar_allowed(self, param: str) -> None:
        if self.grammar_refusal is not None:
            raise ApiError(400, self.grammar_refusal, param=param)


def check_grammar_text(key: GrammarKey, param: str, limits: RequestLimits | None) -> None:
    """A 400 naming `param` for a grammar this server will not run: too long, unparsable, or
    refused by its settings (--grammar-backend none, speculative decoding)."""
    if len(key.text) > MAX_GRAMMAR_CHARS:
        raise ApiError(400, f"'{param}' is {len(key.text)} characters long; at most "
                            f"{MAX_GRAMMAR_CHARS} are allowed", param=param)
    if limits is not None:
        limits.check_grammar_allowed(param)
    try:
        check_grammar(key)
    except GrammarError as e:
        raise ApiError(400, str(e), param=param) from None
    # <<< ch25


class ApiError(Exception):
    """An error for the client: an HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str | None = None,
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        kind = kind or ("server_error" if status >= 500 else "invalid_request_error")
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}

    def __reduce__(self) -> tuple[Any, ...]:
        # An exception pickles as its class and args by default, which would lose the status
        # (bodies.py parses large bodies in another process and sends the error back).
        e = self.body["error"]
        return ApiError, (self.status, e["message"], e["type"], e["param"], e["code"])


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    # field -> the values accepted for a feature this server does not have yet: sending the
    # default is fine (some clients always send it), asking for more is a 400 that names it
    NOT_YET: ClassVar[dict[str, tuple[Any, ...]]] = {}

    def check_not_yet(self, prefix: str = "") -> None:
        for name, accepted in self.NOT_YET.items():
            value = getattr(self, name)
            if value not in accepted:
                shown = " or ".join(repr(v) for v in accepted if v is not None) or "null"
                raise ApiError(400, f"'{prefix}{name}' = {value!r} is not supported by this "
                                    f"server yet (leave it out, or send {shown})",
                               param=prefix + name, code="unsupported_parameter")


class StreamOptions(_Body):
    include_usage: bool = False
# >>> ch25


class JsonSchemaFormat(_Body):
    """response_format.json_schema: OpenAI's named schema. `strict` is accepted either way: the
    answer always follows the schema here (XGrammar's strict mode, no extra properties unless the
    schema allows them)."""

    name: str = Field(min_length=1, max_length=64)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class ResponseFormat(_Body):
    """OpenAI's response_format: free text, any JSON object, or JSON that follows a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    def grammar(self) -> GrammarKey | None:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ApiError(400, "'response_format.json_schema' goes with type 'json_schema', and "
                                "that type needs it", param="response_format.json_schema")
        if self.type == "json_object":
            return GrammarKey("json_schema", JSON_OBJECT_SCHEMA)
        if self.json_schema is not None:
            return schema_key(self.json_schema.schema_)
        return None
# <<< ch25


class _Sampling(_Body):
    """The fields that chat and text completions share (OpenAI's names, plus SGLang's and
    vLLM's top_k and ignore_eos)."""

    NOT_YET: ClassVar[dict[str, tuple[Any, ...]]] = {
        "logit_bias": (None, {}), "store": (None, False),
    }

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
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    # accepted and ignored: see IGNORED_FIELDS
    user: str | None = None
    safety_identifier: str | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    n: int = Field(1, ge=1, le=MAX_N)  # answers to the prompt, each a choice of its own
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    # not in OpenAI's API (vLLM's and SGLang's): 1 is off
    repetition_penalty: float = Field(1.0, gt=0, le=MAX_REPETITION_PENALTY)
    # not yet: see NOT_YET
    logit_bias: dict[str, float] | None = None
    store: bool | None = None
    # >>> ch25
    response_format: ResponseFormat | None = None
    # <<< ch25
    # >>> ch27
    # SGLang's fields that sglang-router sends with every request, at their defaults
    NOT_YET = {**NOT_YET, "no_stop_trim": (False,), "skip_special_tokens": (True,),
               "return_hidden_states": (False,)}
    no_stop_trim: bool = False
    skip_special_tokens: bool = True
    return_hidden_states: bool = False
    # the replica that runs the request under --dp-size (SGLang's name; the router's --dp-aware
    # mode sets it); None: the server's load balancer picks
    data_parallel_rank: int | None = Field(None, ge=0, le=INT64_MAX)
    # <<< ch27

    @property
    def asked_max_tokens(self) -> int | None:
        """The client's limit on new tokens, None when it gave none."""
        return self.max_tokens

    @property
    def asked_logprobs(self) -> int | None:
        """How many top tokens to report with each token's log-prob; None: no log-probs."""
        return None

    def sampling_params(self, default_max_tokens: int | None) -> SamplingParams:
        """The engine's parameters; max_tokens None leaves the limit to the scheduler."""
        extra: dict[str, Any] = {"presence_penalty": self.presence_penalty,
                                 "frequency_penalty": self.frequency_penalty,
                                 "repetition_penalty": self.repetition_penalty,
                                 "logprobs": self.asked_logprobs}
        # >>> ch25
        key = self.response_format.grammar() if self.response_format else None
        if key is not None:
            extra[key.kind] = key.text
        # <<< ch25
        return make_sampling_params(self.temperature, self.top_k, self.top_p, self.ignore_eos,
                                    self.asked_max_tokens or default_max_tokens, self.seed,
                                    **extra)

    def check(self, limits: RequestLimits | None) -> None:
        """The checks beyond each field's own type and range (ApiError 400 naming the field);
        those that need the engine's numbers only when `limits` are given."""
        self.check_not_yet()
        if self.stream_options is not None and not self.stream:
            raise ApiError(400, "'stream_options' is only allowed with 'stream': true",
                           param="stream_options")
        check_stops(self.stop_strings, "stop")
        if limits is not None:
            limits.check_top_k(self.top_k, "top_k")
        # >>> ch25
        key = self.response_format.grammar() if self.response_format else None
        if key is not None:
            check_grammar_text(key, "response_format", limits)
        # <<< ch25

    @property
    def stop_strings(self) -> list[str]:
        return stop_list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def make_sampling_params(temperature: float, top_k: int, top_p: float, ignore_eos: bool,
                         max_tokens: int | None, seed: int | None, **extra: Any
                         ) -> SamplingParams:
    """`extra`: the penalties and logprobs, by SamplingParams' names."""
    # A temperature too small to divide the logits by is greedy in effect: send it as such.
    temperature = temperature if temperature >= MIN_TEMPERATURE else 0.0
    try:
        return SamplingParams(temperature, top_k, top_p, ignore_eos, max_tokens, seed=seed,
                              **extra)
    except ValueError as e:
        raise ApiError(400, str(e), param="top_k" if "top_k" in str(e) else None) from None


def choice_params(params: SamplingParams, index: int) -> SamplingParams:
    """The parameters of answer `index` of n: with a seed, each answer gets its own random
    stream (answer 0 keeps the seed, so n=1 and the first of n agree); without one, each
    request's own id already gives it one."""
    if index == 0 or params.seed is None:
        return params
    seed = (params.seed + index * 0x9E3779B97F4A7C15) & ((1 << 64) - 1)
    return replace(params, seed=seed - (1 << 64) if seed > INT64_MAX else seed)


def stop_list(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def check_stops(stops: list[str], param: str) -> None:
    """At most MAX_STOPS stop strings of at most MAX_STOP_CHARS characters each."""
    if len(stops) > MAX_STOPS:
        raise ApiError(400, f"'{param}' holds {len(stops)} stop strings; at most {MAX_STOPS} "
                            f"are allowed", param=param)
    longest = max(stops, key=len, default="")
    if len(longest) > MAX_STOP_CHARS:
        raise ApiError(400, f"'{param}' holds a stop string of {len(longest)} characters; at "
                            f"most {MAX_STOP_CHARS} are allowed", param=param)


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart]
    # accepted and ignored: a participant's name, and the call a tool's answer belongs to (the
    # chat templates here render only roles and contents)
    name: str | None = None
    tool_call_id: str | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, gt=0, le=INT64_MAX)  # newer max_tokens
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    # >>> ch27
    NOT_YET = {**_Sampling.NOT_YET, "continue_final_message": (False,)}
    continue_final_message: bool = False
    # accepted and ignored: see IGNORED_FIELDS
    separate_reasoning: bool = True
    stream_reasoning: bool = True
    # <<< ch27

    @property
    def asked_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def asked_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def chat(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text} for m in self.messages]

    def check(self, limits: RequestLimits | None) -> None:
        super().check(limits)
        if self.top_logprobs and not self.logprobs:  # OpenAI's rule
            raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        if len(self.messages) > MAX_MESSAGES:
            raise ApiError(400, f"a chat of {len(self.messages)} messages is more than the "
                                f"{MAX_MESSAGES} allowed", param="messages")
        if limits is not None:
            limits.check_chars(sum(len(m.text) for m in self.messages), "messages")


class CompletionRequest(_Sampling):
    NOT_YET: ClassVar[dict[str, tuple[Any, ...]]] = {
        **_Sampling.NOT_YET, "echo": (False,), "best_of": (None, 1), "suffix": (None,)}

    prompt: str | list[int] | list[str]
    # the log-probs of each token and of this many most likely ones (0: the token's only)
    logprobs: int | None = Field(None, ge=0, le=MAX_COMPLETION_LOGPROBS)
    echo: bool = False
    best_of: int | None = Field(None, ge=1, le=INT64_MAX)
    suffix: str | None = None

    @property
    def asked_logprobs(self) -> int | None:
        return self.logprobs

    def one_prompt(self) -> str | list[int]:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str):
            if len(self.prompt) != 1:
                raise ApiError(400, "only one prompt per request is supported", param="prompt")
            return self.prompt[0]
        if not self.prompt:
            raise ApiError(400, "the prompt is empty", param="prompt")
        return self.prompt  # type: ignore[return-value]

    def check(self, limits: RequestLimits | None) -> None:
        super().check(limits)
        prompt = self.one_prompt()
        if limits is None:
            return
        if isinstance(prompt, str):
            limits.check_chars(len(prompt), "prompt")
        else:
            limits.check_ids(prompt, "prompt")


class GenerateSamplingParams(_Body):
    """`sampling_params` of SGLang's /generate, with SGLang's names and defaults."""

    NOT_YET: ClassVar[dict[str, tuple[Any, ...]]] = {
        "min_p": (0,), "min_new_tokens": (0,),
        "stop_token_ids": (None, []), "skip_special_tokens": (True,),
        "spaces_between_special_tokens": (True,), "no_stop_trim": (False,),
    }

    max_new_tokens: int = Field(GENERATE_DEFAULT_MAX_NEW_TOKENS, gt=0, le=INT64_MAX)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1, le=INT64_MAX)
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    sampling_seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    n: int = Field(1, ge=1, le=MAX_N)
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    repetition_penalty: float = Field(1.0, gt=0, le=MAX_REPETITION_PENALTY)
    # not yet: see NOT_YET
    min_p: float = Field(0.0, ge=0, le=1)
    min_new_tokens: int = Field(0, ge=0, le=INT64_MAX)
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    # >>> ch25
    # structured output (chapter 25): at most one
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None

    def grammar(self) -> GrammarKey | None:
        named = [GrammarKey(k, getattr(self, k)) for k in ("json_schema", "regex", "ebnf")
                 if getattr(self, k) is not None]
        if len(named) > 1:
            raise ApiError(400, f"give at most one of 'sampling_params.json_schema', 'regex' and "
                                f"'ebnf', got {' and '.join(k.kind for k in named)}",
                           param=f"sampling_params.{named[1].kind}")
        return named[0] if named else None
    # <<< ch25


class GenerateRequest(_Body):
    """SGLang's /generate: one prompt, as text or token ids, or a batch of them (a list of
    texts, or a list of token-id lists), and SGLang's sampling_params."""

    NOT_YET: ClassVar[dict[str, tuple[Any, ...]]] = {"return_logprob": (False,)}

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: GenerateSamplingParams = Field(default_factory=GenerateSamplingParams)
    stream: bool = False
    return_logprob: bool = False
    # >>> ch27
    # SGLang's fields that sglang-router sends with every request, at their defaults
    NOT_YET = {**NOT_YET, "return_text_in_logprobs": (False,), "return_hidden_states": (False,),
               "background": (False,), "return_bytes": (False,), "return_entropy": (False,)}
    model: str | None = None  # the router's: the model asked for (None: the served one)
    return_text_in_logprobs: bool = False
    return_hidden_states: bool = False
    background: bool = False
    return_bytes: bool = False
    return_entropy: bool = False
    # accepted and ignored: see IGNORED_FIELDS
    log_metrics: bool = True
    no_logs: bool = False
    # the replica that runs the request under --dp-size (as in the OpenAI bodies)
    data_parallel_rank: int | None = Field(None, ge=0, le=INT64_MAX)
    # <<< ch27

    @property
    def param(self) -> str:
        return "text" if self.text is not None else "input_ids"

    @property
    def batched(self) -> bool:
        """A list of prompts: the answer is a list too, even of one."""
        value = self.text if self.text is not None else self.input_ids
        return isinstance(value, list) and bool(value) and isinstance(value[0], (str, list))

    def prompts(self) -> list[str | list[int]]:
        """The prompts, one for a request that is not a batch."""
        if (self.text is None) == (self.input_ids is None):
            raise ApiError(400, "give exactly one of 'text' and 'input_ids'")
        value = self.text if self.text is not None else self.input_ids
        prompts = value if self.batched else [value]
        if not prompts or any(isinstance(p, list) and not p for p in prompts):
            raise ApiError(400, f"'{self.param}' is empty", param=self.param)
        return prompts  # type: ignore[return-value]

    def to_sampling_params(self) -> SamplingParams:
        p = self.sampling_params
        extra: dict[str, Any] = {"presence_penalty": p.presence_penalty,
                                 "frequency_penalty": p.frequency_penalty,
                                 "repetition_penalty": p.repetition_penalty}
        # >>> ch25
        key = p.grammar()
        if key is not None:
            extra[key.kind] = key.text
        # <<< ch25
        return make_sampling_params(p.temperature, p.top_k, p.top_p, p.ignore_eos,
                                    p.max_new_tokens, p.sampling_seed, **extra)

    @property
    def stop_strings(self) -> list[str]:
        return stop_list(self.sampling_params.stop)

    def check(self, limits: RequestLimits | None) -> None:
        prompts = self.prompts()
        self.check_not_yet()
        self.sampling_params.check_not_yet("sampling_params.")
        check_stops(self.stop_strings, "sampling_params.stop")
        # >>> ch25
        key = self.sampling_params.grammar()
        if key is not None:
            check_grammar_text(key, f"sampling_params.{key.kind}", limits)
        # <<< ch25
        answers = len(prompts) * self.sampling_params.n
        if self.batched and answers > MAX_GENERATE_ANSWERS:
            raise ApiError(400, f"{len(prompts)} prompts x n={self.sampling_params.n} are "
                                f"{answers} answers; at most {MAX_GENERATE_ANSWERS} are allowed "
                                f"in one request", param=self.param)
        if self.batched and self.stream:
            raise ApiError(400, "streaming a batch of prompts is not supported; stream each "
                                "prompt in a request of its own", param="stream")
        if limits is None:
            return
        limits.check_top_k(self.sampling_params.top_k, "sampling_params.top_k")
        for prompt in prompts:
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
    req.check(limits)  # type: ignore[attr-defined]
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
    if first["type"] == "extra_forbidden":
        return ApiError(400, f"'{where}' is not a field this server supports", param=where,
                        code="unsupported_parameter")
    if len(loc) < len(first["loc"]):
        return ApiError(400, f"'{where}' has a type this field does not allow", param=where)
    if not where:
        return ApiError(400, f"the body must be a JSON object: {first['msg']}")
    if first["type"] == "missing":
        return ApiError(400, f"'{where}' is required", param=where)
    return ApiError(400, f"'{where}': {first['msg']}", param=where)


def _is_type_tag(part: str | int) -> bool:
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or "[" in part)
