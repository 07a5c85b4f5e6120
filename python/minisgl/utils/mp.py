"""The server's processes: the private folder their ZeroMQ sockets live in, and what every worker
process does first. The queues over those sockets are message/queues.py.

Addresses are `ipc://` sockets inside a private folder (mode 0700, made by `private_ipc_dir`), so
other users on the machine cannot connect, and nothing listens on the network. The folder's name
says which launcher owns it, so a launcher killed with no chance to clean up (kill -9) leaves a
folder that the next one recognises as stale and removes (`remove_stale_ipc_dirs`).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

IPC_DIR_PREFIX = "minisgl-"
# minisgl-<owner pid>-<owner start time>-<random>: the start time tells a dead owner from a new
# process that was given the same pid later.
_IPC_DIR_NAME = re.compile(r"minisgl-(\d+)-(\d+)-[^/]+")


def private_ipc_dir() -> Path:
    """A fresh folder only this user can enter; the launcher removes it at shutdown."""
    pid = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"{IPC_DIR_PREFIX}{pid}-{process_start_time(pid)}-"))


def process_start_time(pid: int) -> int:
    """When the process started, in clock ticks since boot (Linux); 0 where that is unknown.

    Field 22 of /proc/<pid>/stat; the command name (field 2) may hold spaces and parentheses, so
    the fields are counted from its closing parenthesis."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def remove_stale_ipc_dirs(root: Path | None = None) -> list[Path]:
    """Remove the ipc folders of launchers that are gone; the folders removed.

    A folder is stale when its owner pid is not running, or is running but started at another
    time than the owner did (the pid was reused). Folders of other users, folders whose name does
    not say their owner, and folders of live launchers are never touched."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{IPC_DIR_PREFIX}*"):
        match = _IPC_DIR_NAME.fullmatch(folder.name)
        try:
            mine = folder.is_dir() and not folder.is_symlink() \
                and folder.stat().st_uid == os.getuid()
        except OSError:  # removed meanwhile
            continue
        if match is None or not mine:
            continue
        pid, started = int(match[1]), int(match[2])
        if _is_running(pid) and (started == 0 or process_start_time(pid) in (0, started)):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def ipc_addr(folder: Path, name: str) -> str:
    return f"ipc://{folder / name}"


def setup_worker_process() -> None:
    """First lines of every worker process the launcher starts.

    - Ctrl-C reaches the whole process group; only the launcher acts on it, and it then stops the
      workers in order, so workers ignore SIGINT.
    - SIGTERM (the launcher's stop request) ends the process at once and quietly, by the kernel's
      default action rather than a Python handler. A worker holds nothing that needs an orderly
      close (the kernel closes its sockets and frees its memory, the launcher removes the ipc
      folder). A Python handler is not enough: it runs only in the main thread, between bytecodes,
      so a main thread blocked in a C call that the signal does not interrupt (the signal may be
      delivered to any thread of the process, e.g. one of the tokenizer library's or torch's)
      never runs it, and the launcher had to kill such workers after its 10 s deadline.
    - If the launcher dies without cleaning up (even kill -9), the worker must not live on as an
      orphan holding memory: on Linux the kernel sends it SIGTERM (PR_SET_PDEATHSIG); elsewhere
      a thread notices that the parent process changed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    launcher = multiprocessing.parent_process()
    parent = launcher.pid if launcher is not None else os.getppid()
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the launcher died before the call above
            os.kill(os.getpid(), signal.SIGTERM)
    else:
        threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)
