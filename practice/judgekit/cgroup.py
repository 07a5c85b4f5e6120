"""Control groups for one judge run: the CPU time and the memory of every process the sandbox
starts, measured and limited by the kernel.

Why a group and not the process tree. A program can start children that finish between two looks
at /proc and whose CPU time never reaches any parent's counters (with SIGCHLD ignored, or
SA_NOCLDWAIT, an exited child is reaped by the kernel and its time is dropped); RLIMIT_AS limits
each process, so three processes may hold three times the limit. A control group counts every
task that ever ran in it, whatever became of it, and its memory limit covers all of them together.

What is used is found at run time (standard library only: the sandbox supervisor imports this):
* cgroup v2 (the unified hierarchy, at /sys/fs/cgroup or /sys/fs/cgroup/unified): a group always
  has cpu.stat (usage_usec); it has memory.max only where the parent enables the memory
  controller for its children. The group is made below the judge's own group, or else at the top
  of the hierarchy (the root group is the one that always may enable controllers).
* cgroup v1: cpuacct.usage in the cpuacct hierarchy, memory.limit_in_bytes and
  memory.max_usage_in_bytes in the memory hierarchy, each below the judge's own group there.
v2 is taken when it can limit memory; otherwise v1 for whatever v1 offers, and v2's cpu.stat for
the CPU time when v1 has no cpuacct. Where no group can be made (not root, no writable
hierarchy), RunGroups says so and the supervisor falls back to the process tree and RLIMIT_AS.

The judge (runner.py) makes the groups before the supervisor starts and removes them after it
ended, killing whatever is still inside: even a supervisor that died cannot leave one behind.
Each group is named minisgl-judge-<judge pid>-<random>; a group whose judge is gone (killed with
SIGKILL) is removed by the next run.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import asdict, dataclass

PREFIX = "minisgl-judge-"
_KILL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Group:
    path: str  # the group's folder
    version: int  # 1 or 2

    @property
    def procs(self) -> str:
        return os.path.join(self.path, "cgroup.procs")


@dataclass
class RunGroups:
    """The groups of one run: where CPU time is read, where memory is limited (either may be
    None), and why a missing one is missing."""

    cpu: Group | None = None
    memory: Group | None = None
    memory_bytes: int = 0
    note: str = ""

    @property
    def groups(self) -> list[Group]:
        found: list[Group] = []
        for group in (self.cpu, self.memory):
            if group is not None and group not in found:
                found.append(group)
        return found

    @property
    def cpu_accounting(self) -> str:
        if self.cpu is None:
            return "proc"
        return "cgroup v2 cpu.stat" if self.cpu.version == 2 else "cgroup v1 cpuacct"

    @property
    def memory_accounting(self) -> str:
        if self.memory is None:
            return "rlimit_as"
        return "cgroup v2 memory" if self.memory.version == 2 else "cgroup v1 memory"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> RunGroups:
        if not data:
            return cls(note="no groups")
        def group(d):
            return None if d is None else Group(str(d["path"]), int(d["version"]))
        return cls(group(data.get("cpu")), group(data.get("memory")),
                   int(data.get("memory_bytes", 0)), str(data.get("note", "")))


# ---- finding the hierarchies -------------------------------------------------------------------
@dataclass(frozen=True)
class _Mount:
    point: str  # where it is mounted
    root: str  # which group of the hierarchy the mount shows at `point`
    version: int
    controllers: frozenset[str]


def _mounts() -> list[_Mount]:
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        if rest[0] == "cgroup2":
            found.append(_Mount(point, fields[3], 2, frozenset()))
        else:
            found.append(_Mount(point, fields[3], 1, frozenset(rest[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's group per hierarchy: "" for v2, each controller's name for v1."""
    paths: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths[""] = parts[2]
        for name in filter(None, parts[1].split(",")):
            paths[name] = parts[2]
    return paths


def _parents(mount: _Mount, own: str | None) -> list[str]:
    """Where a run's group may go in this hierarchy: below the judge's own group first (limits
    set on the judge then hold for the sandbox too), else the hierarchy's top."""
    candidates = []
    if own is not None:
        rel = own
        if mount.root != "/" and (own == mount.root or own.startswith(mount.root + "/")):
            rel = own[len(mount.root):]
        folder = os.path.normpath(os.path.join(mount.point, rel.lstrip("/")))
        if folder.startswith(mount.point) and os.path.isdir(folder):
            candidates.append(folder)
    if mount.point not in candidates:
        candidates.append(mount.point)
    return candidates


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep(parent: str, version: int) -> None:
    """Remove groups left by judges that no longer run (killed before their clean-up)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        try:
            pid = int(name[len(PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if not _alive(pid):
            remove_group(Group(os.path.join(parent, name), version), timeout=1.0)


def _make(parent: str, name: str, version: int) -> Group | None:
    _sweep(parent, version)
    path = os.path.join(parent, name)
    try:
        os.mkdir(path, 0o755)
    except OSError:
        return None
    return Group(path, version)


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _limit_v2(group: Group, memory_bytes: int) -> bool:
    try:
        _write(os.path.join(group.path, "memory.max"), str(memory_bytes))
    except OSError:
        return False
    try:  # no swapping around the limit (the file is absent without swap accounting)
        _write(os.path.join(group.path, "memory.swap.max"), "0")
    except OSError:
        pass
    return True


def _limit_v1(group: Group, memory_bytes: int) -> bool:
    try:
        _write(os.path.join(group.path, "memory.limit_in_bytes"), str(memory_bytes))
    except OSError:
        return False
    try:  # memory + swap: the same limit, so swap does not extend it
        _write(os.path.join(group.path, "memory.memsw.limit_in_bytes"), str(memory_bytes))
    except OSError:
        pass
    return True


def _make_v2(mounts: list[_Mount], own: dict[str, str], name: str,
             memory_bytes: int) -> tuple[Group | None, bool]:
    """A v2 group (with its memory limit set when the memory controller is there)."""
    cpu_only = None
    for mount in (m for m in mounts if m.version == 2):
        for parent in _parents(mount, own.get("")):
            group = _make(parent, name, 2)
            if group is None:
                continue
            if os.path.exists(os.path.join(group.path, "memory.max")) \
                    and _limit_v2(group, memory_bytes):
                if cpu_only is not None:
                    remove_group(cpu_only)
                return group, True
            if cpu_only is None and os.path.exists(os.path.join(group.path, "cpu.stat")):
                cpu_only = group
            else:
                remove_group(group)
        break  # one unified hierarchy
    return cpu_only, False


def _make_v1(mounts: list[_Mount], own: dict[str, str], name: str, controller: str,
             file: str) -> Group | None:
    for mount in (m for m in mounts if m.version == 1 and controller in m.controllers):
        for parent in _parents(mount, own.get(controller)):
            group = _make(parent, name, 1)
            if group is None:
                continue
            if os.path.exists(os.path.join(group.path, file)):
                return group
            remove_group(group)
    return None


def create(memory_bytes: int) -> RunGroups:
    """Make the run's groups; never raises (a RunGroups without groups says why)."""
    name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    mounts, own = _mounts(), _own_paths()
    if not mounts:
        return RunGroups(memory_bytes=memory_bytes, note="no cgroup hierarchy mounted")
    made = RunGroups(memory_bytes=memory_bytes)
    try:
        unified, has_memory = _make_v2(mounts, own, name, memory_bytes)
        if unified is not None and has_memory:
            made.cpu = made.memory = unified
            return made
        made.cpu = _make_v1(mounts, own, name, "cpuacct", "cpuacct.usage")
        made.memory = _make_v1(mounts, own, name, "memory", "memory.limit_in_bytes")
        if made.memory is not None and not _limit_v1(made.memory, memory_bytes):
            remove_group(made.memory)
            made.memory = None
        if made.cpu is None:
            made.cpu, unified = unified, None
        if unified is not None:
            remove_group(unified)
    except Exception as e:  # an unexpected layout: run without groups rather than not at all
        remove(made)
        return RunGroups(memory_bytes=memory_bytes, note=f"cgroup set-up failed: {e}")
    missing = [what for what, group in (("cpu", made.cpu), ("memory", made.memory)) if not group]
    if missing:
        made.note = ("no writable cgroup for " + " and ".join(missing)
                     + (" (not root)" if os.geteuid() != 0 else ""))
    return made


# ---- reading, killing, removing ----------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _keyed(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            try:
                return int(parts[1])
            except ValueError:
                return None
    return None


def cpu_seconds(group: Group) -> float | None:
    if group.version == 2:
        usec = _keyed(_read(os.path.join(group.path, "cpu.stat")), "usage_usec")
        return None if usec is None else usec / 1e6
    text = _read(os.path.join(group.path, "cpuacct.usage"))
    try:
        return int(text) / 1e9 if text is not None else None
    except ValueError:
        return None


def oom_kills(group: Group) -> int | None:
    """How many processes of the group the kernel killed for going over its memory limit."""
    if group.version == 2:
        return _keyed(_read(os.path.join(group.path, "memory.events")), "oom_kill")
    return _keyed(_read(os.path.join(group.path, "memory.oom_control")), "oom_kill")


def pids(group: Group) -> list[int]:
    text = _read(group.procs) or ""
    return [int(x) for x in text.split() if x.isdigit()]


def _in_group(pid: int, group: Group) -> bool:
    text = _read(f"/proc/{pid}/cgroup") or ""
    leaf = os.path.basename(group.path)
    return any(line.rstrip().endswith("/" + leaf) for line in text.splitlines())


def kill_group(group: Group) -> int:
    """SIGKILL every process in the group; return how many were signalled. A pid is pinned with
    a pidfd and checked to still be in the group first, so a reused pid is never hit."""
    if group.version == 2 and os.path.exists(os.path.join(group.path, "cgroup.kill")):
        listed = pids(group)
        try:
            _write(os.path.join(group.path, "cgroup.kill"), "1")
            return len(listed)
        except OSError:
            pass
    count = 0
    for pid in pids(group):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if _in_group(pid, group):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                count += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return count


def remove_group(group: Group, timeout: float = _KILL_TIMEOUT_S) -> bool:
    """Kill what is inside, then remove the folder; True when it is gone."""
    deadline = time.monotonic() + timeout
    while True:
        if not os.path.isdir(group.path):
            return True
        kill_group(group)
        try:
            os.rmdir(group.path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)  # killed tasks leave the group when they finish exiting


def remove(groups: RunGroups) -> bool:
    return all([remove_group(g) for g in groups.groups])


class Meter:
    """What the supervisor reads during a run: the group's CPU seconds, its memory peak (reset
    at each case where the kernel allows it), its OOM kills."""

    def __init__(self, groups: RunGroups):
        self.groups = groups
        self._peak_fd: int | None = None
        mem = groups.memory
        if mem is not None and mem.version == 2:
            try:
                self._peak_fd = os.open(os.path.join(mem.path, "memory.peak"),
                                        os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                self._peak_fd = None

    def join_fds(self) -> list[int]:
        """Descriptors of each group's cgroup.procs, opened now: the forked child writes its pid
        into them before exec (it cannot open them any more once it dropped its privileges)."""
        return [os.open(g.procs, os.O_WRONLY | os.O_CLOEXEC) for g in self.groups.groups]

    def cpu_s(self) -> float | None:
        return cpu_seconds(self.groups.cpu) if self.groups.cpu is not None else None

    def oom_kills(self) -> int:
        mem = self.groups.memory
        return (oom_kills(mem) or 0) if mem is not None else 0

    def reset_peak(self) -> None:
        mem = self.groups.memory
        if mem is None:
            return
        try:
            if self._peak_fd is not None:
                os.write(self._peak_fd, b"reset")  # kernels >= 6.12: a per-descriptor reset
            elif mem.version == 1:
                _write(os.path.join(mem.path, "memory.max_usage_in_bytes"), "0")
        except OSError:
            pass

    def peak_bytes(self) -> int | None:
        mem = self.groups.memory
        if mem is None:
            return None
        if self._peak_fd is not None:
            try:
                return int(os.pread(self._peak_fd, 64, 0))
            except (OSError, ValueError):
                return None
        name = "memory.max_usage_in_bytes" if mem.version == 1 else "memory.current"
        text = _read(os.path.join(mem.path, name))
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def kill_all(self) -> int:
        return sum(kill_group(g) for g in self.groups.groups)

    def members(self) -> list[int]:
        return sorted({pid for g in self.groups.groups for pid in pids(g)})

    def close(self) -> None:
        if self._peak_fd is not None:
            os.close(self._peak_fd)
            self._peak_fd = None


def leftovers() -> list[str]:
    """Every minisgl-judge-* group in every mounted hierarchy (for tests and diagnostics)."""
    found = []
    for mount in _mounts():
        for path, dirs, _ in os.walk(mount.point):
            found += [os.path.join(path, d) for d in dirs if d.startswith(PREFIX)]
            dirs[:] = [d for d in dirs if not d.startswith(PREFIX)]
    return sorted(found)
