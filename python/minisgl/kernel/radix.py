"""`fast_compare_key`: the length of the common prefix of two token-id keys.

The radix cache compares keys on every match and insert, so this is its hottest loop. A Python
loop over tokens would dominate the scheduler's time on long prompts; csrc/radix.cpp does it with
`std::mismatch`. It is compiled the first time it is needed with the machine's g++ into
`$MINISGL_CACHE_DIR/radix/` (default ~/.cache/minisgl) and loaded with ctypes: no build step at
install time, and no torch extension machinery for a 10-line function.

When no compiler is present or the build fails, a numpy fallback gives the same answers (one
warning is logged). `MINISGL_DISABLE_CPP_RADIX=1` forces the fallback; it is read on every call,
so a test can flip it with monkeypatch.

Inputs: 1-D numpy int32 arrays, ideally C-contiguous (anything else is converted, which copies).

Measured on a shared 2-core CPU: the C++ compare itself takes ~1 us for a 512-token key, but a
ctypes call costs about as much again, so the numpy fallback is within a few microseconds of it.
Either is negligible next to a forward pass; the point here is how a JIT-built helper is wired in.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from minisgl.env import load_env
from minisgl.utils.logger import init_logger

SOURCE = Path(__file__).parent / "csrc" / "radix.cpp"
DISABLE_ENV = "MINISGL_DISABLE_CPP_RADIX"
CXX_FLAGS = ("-O2", "-shared", "-fPIC")
_SYMBOL = "minisgl_fast_compare_key"
_BUFFER_VIEW = ctypes.c_int32 * 0

logger = init_logger(__name__)


def fast_compare_key(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading elements a and b share (0 if either is empty).

    a, b: 1-D C-contiguous numpy int32 arrays (the radix cache's keys); others are converted.
    """
    lib = None if cpp_disabled() else _default_library()
    if lib is None:
        return compare_key_numpy(a, b)
    a = np.ascontiguousarray(a, dtype=np.int32)  # a no-op for the arrays the radix cache passes
    b = np.ascontiguousarray(b, dtype=np.int32)
    return lib.minisgl_fast_compare_key(_pointer(a), a.size, _pointer(b), b.size)


def _pointer(arr: np.ndarray) -> object:
    # The call overhead, not the compare, dominates for short keys. A zero-length ctypes view
    # of the array's buffer is about 4x cheaper to make than `arr.ctypes.data`; it needs a
    # writable buffer, so read-only arrays take the slower road.
    try:
        return _BUFFER_VIEW.from_buffer(arr)
    except TypeError:
        return arr.ctypes.data


def compare_key_numpy(a: np.ndarray, b: np.ndarray) -> int:
    """The fallback: vectorised, so still far faster than a Python loop."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def cpp_disabled() -> bool:
    value = os.environ.get(DISABLE_ENV)  # unset is the common case: keep it cheap, it runs per call
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def active_backend() -> str:
    """Which implementation `fast_compare_key` uses right now: "cpp" or "numpy"."""
    return "numpy" if cpp_disabled() or _default_library() is None else "cpp"


@functools.cache
def _default_library() -> ctypes.CDLL | None:
    # Cached, failures included, so a missing compiler costs one attempt and one warning.
    return load_library(load_env().cache_dir / "radix")


def load_library(build_dir: Path) -> ctypes.CDLL | None:
    """Build (if needed) and load the library from build_dir; None, with a warning, on failure."""
    try:
        lib = ctypes.CDLL(str(build_library(build_dir)))
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", None) or err
        logger.warning(f"C++ radix key compare unavailable, using numpy: {detail}")
        return None
    fn = getattr(lib, _SYMBOL)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = ctypes.c_int64
    return lib


def build_library(build_dir: Path) -> Path:
    """Compile csrc/radix.cpp into build_dir, once per version of the source and flags."""
    return build_cpp_library(SOURCE, CXX_FLAGS, build_dir)


def build_cpp_library(source_path: Path, flags: tuple[str, ...], build_dir: Path,
                      salt: str = "") -> Path:
    """Compile one C++ file into a shared library in build_dir (chapter 20's CPU attention
    kernel is built the same way), once per version of the source and flags.

    The file name carries a hash of both (and of `salt`: what else the build depends on, such as
    the CPU a -march=native build is for), so an edited source is rebuilt and an old build is
    never loaded. Compiling into a temporary file and renaming makes concurrent builders (several
    processes starting at once) safe: the rename is atomic, and the last one simply wins.
    """
    source = source_path.read_bytes()
    compiler = os.environ.get("CXX", "g++")
    key = " ".join((compiler, *flags, salt)).encode()
    digest = hashlib.sha256(source + key).hexdigest()[:16]
    target = Path(build_dir) / f"{source_path.stem}_{digest}.so"
    if target.exists():
        return target
    path = shutil.which(compiler)
    if path is None:
        raise FileNotFoundError(f"no C++ compiler {compiler!r} on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([path, *flags, "-o", tmp, str(source_path)],
                       check=True, capture_output=True, text=True)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
