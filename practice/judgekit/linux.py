"""Linux process restrictions that the standard library lacks: capabilities, namespaces, Landlock.

Everything here is called from the sandbox supervisor, in the freshly forked child, just before
it executes the learner's program. Only ctypes and raw syscalls: no allocation-heavy work.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

PR_SET_PDEATHSIG = 1
PR_SET_KEEPCAPS = 8
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT_CLEAR_ALL = 4
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x04000000, 0x08000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18

# Landlock (include/uapi/linux/landlock.h). The syscall numbers are shared by x86_64 and arm64.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
_WRITE_V1 = (
    FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG
    | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM
)
_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), 0, 0), f"prctl({option})")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is missing or disabled."""
    ret = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(ret), 0)


def _drop_bounding_set() -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0 \
                and ctypes.get_errno() != errno.EINVAL:
            _check(-1, f"PR_CAPBSET_DROP({cap})")


def drop_to_user(uid: int) -> None:
    """Become `uid` (from root) with no capability left in any set: the bounding set is emptied
    first (so no later exec can regain one), setresuid clears the permitted and effective sets,
    then the inheritable and ambient sets are cleared explicitly."""
    _drop_bounding_set()
    prctl(PR_SET_KEEPCAPS, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    _check(_libc.capset(ctypes.byref(header), (_CapData * 2)()), "capset")
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)


def capability_sets() -> dict[str, int]:
    """This process's capability sets as read from /proc (CapInh, CapPrm, CapEff, CapBnd,
    CapAmb), for tests and reports."""
    with open("/proc/self/status") as f:
        return {k: int(v, 16) for k, v in (line.split(":", 1) for line in f)
                if k.startswith("Cap")}


def _unreachable_top(path: str) -> str | None:
    """The highest folder on the way to `path` that a uid without privileges cannot pass
    through (no search bit for others), or None."""
    parts = Path(path).parts
    for depth in range(1, len(parts)):
        folder = os.path.join(*parts[:depth])
        try:
            if not os.stat(folder).st_mode & 0o001:
                return folder
        except OSError:
            return None
    return None


def isolate(read_dirs: list[str]) -> None:
    """As root, move into new mount, network, IPC and UTS namespaces. The new network namespace
    has only a loopback interface that is down: no address on the host, not even 127.0.0.1, is
    reachable. Any read dir under a folder the sandbox uid could not pass through (an interpreter
    under /root, whose mode is 0700) is made reachable without any capability: a read-only tmpfs
    is laid over that folder, holding only bind mounts of those read dirs, so nothing else in it
    is visible."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    covered: dict[str, list[str]] = {}
    for path in filter(os.path.isdir, read_dirs):
        top = _unreachable_top(os.path.realpath(path))
        if top is not None:
            covered.setdefault(top, []).append(os.path.realpath(path))
    for top, paths in covered.items():
        keep = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in sorted(set(paths))]
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for path, fd in keep:
            os.makedirs(path, mode=0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            os.close(fd)
        _mount(None, top, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755")


def _enc(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _mount(source, target: str, fstype, flags: int, data: str | None = None) -> None:
    enc = _enc
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount({target})")


def restrict_filesystem(abi: int, read_dirs: list[str], write_dirs: list[str],
                        write_files: list[str]) -> None:
    """Landlock the calling process and its future children: read and execute only beneath
    read_dirs (folders, or single files) and write_dirs, create/modify/remove only beneath
    write_dirs (plus writing the files in write_files, such as /dev/null); with ABI >= 4 no TCP bind or connect, with ABI >= 6 no
    signals to and no abstract unix sockets of processes outside the sandbox."""
    write = _WRITE_V1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    attr = _RulesetAttr(handled_access_fs=_READ | write)
    size = 8
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    ruleset = _check(
        _libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    rules = [(path, _READ) for path in read_dirs]
    rules += [(path, _READ | write) for path in write_dirs]
    rules += [(path, (FS_READ_FILE | FS_WRITE_FILE | write) & _FILE_ONLY) for path in write_files]
    try:
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= _FILE_ONLY  # a single file (such as /etc/ld.so.cache)
                rule = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
                _check(
                    _libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0),
                    f"landlock_add_rule({path})",
                )
            finally:
                os.close(fd)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        _check(_libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
