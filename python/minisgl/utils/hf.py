"""Turning `--model` into a local Hugging Face folder.

`resolve_model` tries, in order: a local folder, the Hugging Face cache, a hub download (unless
offline), and the two bundled offline models (see `minisgl.utils.offline`). Whatever it returns
holds config.json, tokenizer files and, unless dummy weights were asked for, *.safetensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from minisgl.env import load_env
from minisgl.utils.logger import init_logger
from minisgl.utils.misc import MinisglError
from minisgl.utils.offline import QWEN3_ID, SMOLLM2_ID, prepare_qwen3, prepare_smollm2

# isort: split
# (kept apart: chapter 18 adds these names to offline.py, and the trees before it drop the line)
from minisgl.utils.offline import QWEN3_MOE_ID, prepare_qwen3_moe

DEFAULT_MODEL = QWEN3_ID
FALLBACK_MODEL = SMOLLM2_ID
_BUNDLED = {SMOLLM2_ID: prepare_smollm2, QWEN3_ID: prepare_qwen3}
_WEIGHTLESS = {QWEN3_ID}  # bundled with config and tokenizer only
# >>> ch18
_BUNDLED[QWEN3_MOE_ID] = prepare_qwen3_moe
_WEIGHTLESS.add(QWEN3_MOE_ID)
# <<< ch18
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
_HUB_TIMEOUT_S = 5.0  # for the first hub request, so an unreachable hub fails fast
_HUB_FILES = ["*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken"]

logger = init_logger(__name__)


class DefaultModel(NamedTuple):
    name: str  # the HF id that was picked
    path: Path
    is_fallback: bool  # True when Qwen3-0.6B's weights were missing and SmolLM2 is used instead


def resolve_model(name_or_path: str, *, dummy_weight: bool = False) -> Path:
    """The local folder for a model path or HF id; MinisglError naming what was tried if none."""
    local = _local_folder(name_or_path, dummy_weight)
    if local is not None:
        return local
    if not _is_repo_id(name_or_path):
        raise MinisglError(
            f"model {name_or_path!r} is neither an existing folder nor a Hugging Face id"
        )
    tried = [f"local folder ./{name_or_path} (does not exist)"]
    for source in (_from_hf_cache, _from_hub, _from_bundled):
        found = source(name_or_path, dummy_weight, tried)
        if found is not None:
            return found
    raise MinisglError(f"model {name_or_path!r} not found; tried: {'; '.join(tried)}")


def default_model(*, dummy_weight: bool = False) -> DefaultModel:
    """Qwen3-0.6B when its weights can be had (or are not needed), else the bundled SmolLM2."""
    tried: list[str] = []
    for source in (_from_hf_cache, _from_hub):
        found = source(DEFAULT_MODEL, dummy_weight, tried)
        if found is not None:
            return DefaultModel(DEFAULT_MODEL, found, False)
    if dummy_weight:
        return DefaultModel(DEFAULT_MODEL, prepare_qwen3(), False)
    logger.info(
        f"{DEFAULT_MODEL} weights not found ({'; '.join(tried)}); using the bundled {FALLBACK_MODEL}"
    )
    return DefaultModel(FALLBACK_MODEL, prepare_smollm2(), True)


def missing_parts(folder: Path, dummy_weight: bool) -> list[str]:
    """What a model folder lacks: config.json, tokenizer files, *.safetensors (unless dummy)."""
    missing = [] if (folder / "config.json").is_file() else ["config.json"]
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        missing.append("tokenizer files")
    if not dummy_weight and not any(folder.glob("*.safetensors")):
        missing.append("*.safetensors weights")
    return missing


def _looks_like_path(name: str) -> bool:
    # HF ids are "name" or "org/name"; anything else with a path shape was meant as a path.
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def _local_folder(name: str, dummy_weight: bool) -> Path | None:
    path = Path(name).expanduser()
    if not path.exists():
        if _looks_like_path(name):
            raise MinisglError(f"model path {name} does not exist")
        return None
    if not path.is_dir():
        raise MinisglError(f"model path {name} is a file; pass the folder that holds config.json")
    missing = missing_parts(path, dummy_weight)
    if missing:
        hint = (
            " (or pass --dummy-weight for random weights)"
            if missing == ["*.safetensors weights"]
            else ""
        )
        raise MinisglError(f"model folder {path} has no {', '.join(missing)}{hint}")
    return path.resolve()


def _is_repo_id(name: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _from_hf_cache(repo_id: str, dummy_weight: bool, tried: list[str]) -> Path | None:
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo_id, local_files_only=True))
    except OSError:  # LocalEntryNotFoundError is an OSError
        tried.append("HF cache (not cached)")
        return None
    return _complete_or_noted(folder, dummy_weight, tried, f"HF cache {folder}")


def _from_hub(repo_id: str, dummy_weight: bool, tried: list[str]) -> Path | None:
    if load_env().offline:
        tried.append("hub download (skipped: offline)")
        return None
    from huggingface_hub import HfApi, snapshot_download

    patterns = _HUB_FILES if dummy_weight else [*_HUB_FILES, "*.safetensors"]
    try:
        # A small request with a short timeout first, so an unreachable hub fails in seconds.
        HfApi().model_info(repo_id, timeout=_HUB_TIMEOUT_S)
        path = snapshot_download(repo_id, allow_patterns=patterns, etag_timeout=_HUB_TIMEOUT_S)
        folder = Path(path)
    except Exception as e:  # no network, unknown or gated repo: all mean "not from the hub"
        tried.append(f"hub download ({type(e).__name__})")
        return None
    return _complete_or_noted(folder, dummy_weight, tried, "hub download (the repo)")


def _complete_or_noted(folder: Path, dummy_weight: bool, tried: list[str], where: str
                       ) -> Path | None:
    """The folder if it has everything a model needs; otherwise note what it lacks in `tried`."""
    missing = missing_parts(folder, dummy_weight)
    if not missing:
        return folder
    tried.append(f"{where} has no {', '.join(missing)}")
    return None


def _from_bundled(repo_id: str, dummy_weight: bool, tried: list[str]) -> Path | None:
    canonical = {name.lower(): name for name in _BUNDLED}.get(repo_id.lower())
    if canonical is None:
        tried.append(f"bundled offline models ({', '.join(_BUNDLED)})")
        return None
    if canonical in _WEIGHTLESS and not dummy_weight:
        raise MinisglError(
            f"{canonical}: its weights are not available offline (only config and tokenizer are "
            f"bundled; tried {'; '.join(tried)}); pass --dummy-weight to run it with random weights"
        )
    return _BUNDLED[canonical]()
