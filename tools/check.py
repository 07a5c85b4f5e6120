#!/usr/bin/env python3
"""Compile the chapter-19 CUDA sources with every CUDA toolkit here (two versions at least).

    python tools/check.py --install   # once per machine: nvcc 13.4 from PyPI into the cache
    python tools/check.py             # compile both files with every toolkit found
    python tools/check.py --force     # ... even the compiles that passed before on these inputs

The files: tests/cuda/test_kv_kernels.cu (the kernels' self-test, a plain CUDA program) and
python/minisgl/kernel/csrc/ext.cu (the torch extension: with torch's headers, one to two minutes
per toolkit on two cores). Both are compiled with `-c` only: nothing runs, so no GPU is needed.
One line per toolkit and file, e.g. `nvcc 13.0: tests/cuda/test_kv_kernels.cu 编译 通过`; the
exit status is non-zero when a compile fails or fewer than two toolkit versions were found (that
is checked first: then nothing is compiled, and the line names `--install`). A
compile whose inputs (the files' contents, the toolkit's version, the flags) passed before is not
repeated: the passes are recorded under <cache>/check/.

Toolkits: `nvcc` on PATH, $CUDA_HOME/bin/nvcc and <cache>/toolkits/<version>/bin/nvcc, where
<cache> is $MINISGL_CACHE_DIR (default $XDG_CACHE_HOME/minisgl or ~/.cache/minisgl); one per
version, newest first.

How the PyPI toolkit works. NVIDIA ships the CUDA 13 compiler as wheels that all unpack into one
folder, nvidia/cu13/, laid out like an ordinary toolkit:

    nvidia-cuda-nvcc     bin/: nvcc, nvcc.profile, cudafe++, ptxas, fatbinary, nvlink, crt/*.stub
    nvidia-cuda-crt      include/crt/: host_config.h & co, which nvcc's own headers include
    nvidia-cuda-runtime  include/: cuda_runtime.h, cuda_fp16.h, cuda_bf16.h, ...; lib/: libcudart
    nvidia-nvvm          nvvm/bin/cicc (the device front end), nvvm/libdevice/libdevice.10.bc
    nvidia-cuda-cccl     include/cccl/: libcu++, CUB, Thrust. cuda_fp16.h includes <nv/target>
                         from it and torch's headers include cuda_fp16.h, so ext.cu needs it

bin/nvcc.profile finds everything relative to its own folder (TOP = $(_HERE_)/..: cicc in
$(TOP)/nvvm/bin, libdevice in $(TOP)/nvvm/libdevice, -I$(TOP)/include and
-isystem $(TOP)/include/cccl), so the folder works as it is: no symlinks, extra -I flags or
environment variables. Two details: the wheels must go in with ONE `pip install --target` (pip
skips a package whose top-level folder, here `nvidia/`, is already in the target), and there is
no nvidia-cuda-cccl 13.4.92: the CCCL wheels are numbered 13.<CCCL version>, and we pair CUDA 13.4
with CCCL 3.4 (wheel 13.3.4.3.1) by minor version, as CUDA 13.0 ships CCCL 3.0. `--install` runs
pip into a temporary folder next to the destination and renames its nvidia/cu13/ to
<cache>/toolkits/13.4.92/ in one step, so a toolkit folder is either complete or absent; when a
working one is already there, `--install` does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CSRC = "python/minisgl/kernel/csrc"  # paths relative to REPO_ROOT keep the cache keys portable
SELF_TEST = "tests/cuda/test_kv_kernels.cu"
EXTENSION = f"{CSRC}/ext.cu"
SOURCES = (SELF_TEST, EXTENSION)

PYPI_VERSION = "13.4.92"
PYPI_PACKAGES = (
    f"nvidia-cuda-nvcc=={PYPI_VERSION}",
    f"nvidia-cuda-runtime=={PYPI_VERSION}",
    f"nvidia-cuda-crt=={PYPI_VERSION}",
    f"nvidia-nvvm=={PYPI_VERSION}",
    "nvidia-cuda-cccl==13.3.4.3.1",  # CCCL 3.4.3: see the module docstring
)

BASE_FLAGS = ("-std=c++17", "-O2", "-arch=sm_90", "-Wno-deprecated-gpu-targets", "-c", "-I", CSRC)


def cache_dir() -> Path:
    base = os.environ.get("MINISGL_CACHE_DIR")
    if base:
        return Path(base).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minisgl"


def toolkits_dir() -> Path:
    return cache_dir() / "toolkits"


# ---------------------------------------------------------------------------------------------
# Finding toolkits.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Toolkit:
    version: str  # major.minor, e.g. "13.4": what the report lines show
    release: str  # the full version, e.g. "13.4.92": part of the cache key
    nvcc: Path


def probe(nvcc: Path) -> Toolkit | None:
    """The toolkit of this nvcc, or None if it does not run or does not say its version."""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+), V(\d+(?:\.\d+)+)", out.stdout)
    return Toolkit(m.group(1), m.group(2), nvcc) if out.returncode == 0 and m else None


def candidate_nvccs() -> list[Path]:
    found = []
    if on_path := shutil.which("nvcc"):
        found.append(Path(on_path))
    if cuda_home := os.environ.get("CUDA_HOME"):
        found.append(Path(cuda_home) / "bin" / "nvcc")
    found += sorted(toolkits_dir().glob("*/bin/nvcc"))
    return [p for p in found if p.is_file()]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def find_toolkits() -> list[Toolkit]:
    """One toolkit per version (the first found wins), newest first."""
    by_version: dict[str, Toolkit] = {}
    for nvcc in candidate_nvccs():
        toolkit = probe(nvcc)
        if toolkit is not None:
            by_version.setdefault(toolkit.version, toolkit)
    return sorted(by_version.values(), key=lambda t: _version_key(t.release), reverse=True)


# ---------------------------------------------------------------------------------------------
# Installing nvcc 13.4 from PyPI.
# ---------------------------------------------------------------------------------------------
def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def install_toolkit() -> Path:
    """Installs the PyPI toolkit into <cache>/toolkits/13.4.92 unless it is there; its folder."""
    dest = toolkits_dir() / PYPI_VERSION
    if probe(dest / "bin" / "nvcc") is not None:
        print(f"nvcc {PYPI_VERSION} 已安装：{dest}（跳过）")
        return dest
    if dest.exists():  # not a working toolkit (e.g. copied in by hand): replace it
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    print(f"安装 nvcc {PYPI_VERSION}（PyPI）到 {dest} ...", flush=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".install-{PYPI_VERSION}-", dir=dest.parent) as tmp:
        target = Path(tmp) / "pip"
        # not --quiet: pip's lines (each wheel as it downloads) show that the install moves
        cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
               "--no-input", "--no-deps", "--target", str(target), *PYPI_PACKAGES]
        subprocess.run(cmd, check=True)
        unpacked = target / "nvidia" / "cu13"
        toolkit = probe(unpacked / "bin" / "nvcc")
        if toolkit is None or toolkit.release != PYPI_VERSION:
            raise RuntimeError(f"the wheels gave no working nvcc {PYPI_VERSION} in {unpacked}")
        (unpacked / "minisgl-toolkit.txt").write_text(
            "Installed by tools/check.py --install with\n"
            f"  pip install --no-deps --target <tmp> {' '.join(PYPI_PACKAGES)}\n"
            "(this folder is <tmp>/nvidia/cu13).\n")
        try:
            os.rename(unpacked, dest)  # atomic: the toolkit appears complete or not at all
        except OSError:
            if probe(dest / "bin" / "nvcc") is None:  # not another process's finished install
                raise
    size_mb, seconds = _folder_size(dest) / 2**20, time.monotonic() - start
    print(f"已安装 nvcc {PYPI_VERSION}：{dest}（{size_mb:.0f} MB，用时 {seconds:.0f} s）")
    return dest


# ---------------------------------------------------------------------------------------------
# Compiling, with a record of passes.
# ---------------------------------------------------------------------------------------------
@cache
def torch_flags() -> tuple[str, ...]:
    """What torch.utils.cpp_extension adds when cuda_ext.py builds ext.cu (headers, defines)."""
    import sysconfig

    from torch.utils import cpp_extension

    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    return (*(f"-I{p}" for p in includes), "-DTORCH_EXTENSION_NAME=minisgl_kernels",
            "-DTORCH_API_INCLUDE_EXTENSION_H", *cpp_extension.COMMON_NVCC_FLAGS,
            "-Xcompiler", "-fPIC")


def flags_for(source: str) -> tuple[str, ...]:
    return BASE_FLAGS + (torch_flags() if source == EXTENSION else ())


@dataclass
class CompileResult:
    toolkit: Toolkit
    source: str
    ok: bool
    cached: bool = False
    log: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        status = "通过" if self.ok else "失败"
        note = "（输入未变，沿用上次结果）" if self.cached else ""
        return f"nvcc {self.toolkit.version}: {self.source} 编译 {status}{note}"

    def first_errors(self, limit: int = 8) -> list[str]:
        lines = [ln for ln in self.log.splitlines() if ln.strip()]
        errors = [ln for ln in lines if re.search(r"\berror\b", ln, re.IGNORECASE)]
        return (errors or lines)[:limit]


def _inputs_digest(toolkit: Toolkit, source: str, flags: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    h.update(f"nvcc {toolkit.release}\0{' '.join(flags)}\0".encode())
    headers = sorted((REPO_ROOT / CSRC).glob("*.cuh")) + sorted((REPO_ROOT / CSRC).glob("*.h"))
    for path in [REPO_ROOT / source, *headers]:
        h.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    if source == EXTENSION:
        import torch

        h.update(torch.__version__.encode())
    return h.hexdigest()[:32]


def compile_source(toolkit: Toolkit, source: str, force: bool = False) -> CompileResult:
    """Compiles one repository file (a path relative to the repo root) with `-c` into a scratch
    folder, unless the same inputs passed before and not `force`."""
    flags = flags_for(source)
    record = cache_dir() / "check" / _inputs_digest(toolkit, source, flags)
    if record.exists() and not force:
        return CompileResult(toolkit, source, ok=True, cached=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="minisgl-check-") as scratch:
        cmd = [str(toolkit.nvcc), *flags, source, "-o", str(Path(scratch) / "out.o")]
        proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    result = CompileResult(toolkit, source, proc.returncode == 0, log=proc.stdout + proc.stderr,
                           seconds=time.monotonic() - start)
    if result.ok:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(f"nvcc {toolkit.release} ({toolkit.nvcc}) compiled {source}\n")
    return result


def compile_all(toolkits: list[Toolkit], sources=SOURCES, force: bool = False, jobs: int = 0):
    """Yields a CompileResult per (source, toolkit), in that order, compiling `jobs` at a time
    (default: one per CPU core). The quick self-test goes first, so its lines come at once."""
    pairs = [(tk, src) for src in sources for tk in toolkits]
    if EXTENSION in sources:
        torch_flags()  # import torch once, before the threads start
    workers = max(1, min(jobs or os.cpu_count() or 1, len(pairs)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(compile_source, tk, src, force) for tk, src in pairs]
        for future in futures:
            yield future.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install", action="store_true",
                        help=f"install nvcc {PYPI_VERSION} from PyPI into the cache, then stop")
    parser.add_argument("--force", action="store_true", help="ignore the record of earlier passes")
    parser.add_argument("--jobs", type=int, default=0,
                        help="compiles at a time (default: one per CPU core)")
    args = parser.parse_args(argv)
    if args.install:
        install_toolkit()
        return 0

    toolkits = find_toolkits()
    listed = "，".join(f"nvcc {t.version} ({t.nvcc})" for t in toolkits) or "无"
    print(f"找到 {len(toolkits)} 个 CUDA 工具链：{listed}", flush=True)
    # The toolchains first: a compile of ext.cu takes minutes, and with one toolkit its verdict
    # could not pass the check anyway.
    if len(toolkits) < 2:
        print(f"需要至少两个版本的 nvcc，只找到 {len(toolkits)} 个，所以没有编译任何文件："
              "先运行 python tools/check.py --install（python tools/setup_env.py --tests 也会安装它）",
              flush=True)
        return 1
    failed = 0
    for result in compile_all(toolkits, force=args.force, jobs=args.jobs):
        print(result.line(), flush=True)
        if not result.ok:
            failed += 1
            for line in result.first_errors():
                print(f"    {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
