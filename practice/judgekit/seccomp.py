"""A seccomp filter for the learner's processes: no networking and no kernel-level escape hatches.

Installed by the supervisor in the forked child, last thing before exec (after no_new_privs), so
it binds the learner's program and every process it starts. The filter is a short classic-BPF
program built here with ctypes; only x86_64 and aarch64 are known (elsewhere the judge refuses
to run rather than run unfiltered).

What it denies, and why a rule instead of a list of addresses or ports:
* socket() and socketpair() for every family except AF_UNIX: IPv4/IPv6 with any protocol (TCP,
  UDP, MPTCP = 262, SCTP, raw), netlink, packet, vsock, bluetooth... all fail with EPERM. Unix
  sockets stay allowed (Python's multiprocessing uses them); they reach only files the sandbox
  can write and, with Landlock ABI 6, no abstract socket outside it.
* io_uring (it can open sockets and files without the syscalls filtered here).
* new namespaces: unshare, setns, clone with any CLONE_NEW* flag; clone3 answers ENOSYS, so the C
  library falls back to clone, whose flags a filter can read.
* ptrace and reading or writing other processes' memory or descriptors (process_vm_*,
  pidfd_getfd, kcmp), mounts, bpf, perf events, kernel modules, keyrings, kexec, userfaultfd,
  open_by_handle_at, swap, reboot, clock and time changes, raw I/O ports.
Every other syscall is allowed; a syscall of another ABI (x32, or a foreign architecture) kills.
"""

from __future__ import annotations

import ctypes
import errno
import platform

_libc = ctypes.CDLL(None, use_errno=True)

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AF_UNIX = 1
CLONE_NEW_FLAGS = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
                   | 0x40000000)  # NEWNS NEWCGROUP NEWUTS NEWIPC NEWUSER NEWPID NEWNET

# Syscall numbers per architecture: (audit arch, numbers by name).
_DENIED = ("unshare setns ptrace mount umount2 pivot_root chroot bpf perf_event_open "
           "process_vm_readv process_vm_writev pidfd_getfd kcmp kexec_load kexec_file_load "
           "init_module finit_module delete_module add_key request_key keyctl userfaultfd "
           "open_by_handle_at name_to_handle_at io_uring_setup io_uring_enter io_uring_register "
           "open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr swapon swapoff "
           "reboot acct syslog quotactl settimeofday clock_settime clock_adjtime adjtimex "
           "lookup_dcookie iopl ioperm").split()
ARCHES = {
    "x86_64": (0xC000003E, dict(
        socket=41, socketpair=53, clone=56, clone3=435, unshare=272, setns=308, ptrace=101,
        mount=165, umount2=166, pivot_root=155, chroot=161, bpf=321, perf_event_open=298,
        process_vm_readv=310, process_vm_writev=311, pidfd_getfd=438, kcmp=312, kexec_load=246,
        kexec_file_load=320, init_module=175, finit_module=313, delete_module=176, add_key=248,
        request_key=249, keyctl=250, userfaultfd=323, open_by_handle_at=304,
        name_to_handle_at=303, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
        open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433,
        mount_setattr=442, swapon=167, swapoff=168, reboot=169, acct=163, syslog=103,
        quotactl=179, settimeofday=164, clock_settime=227, clock_adjtime=305, adjtimex=159,
        lookup_dcookie=212, iopl=172, ioperm=173)),
    "aarch64": (0xC00000B7, dict(
        socket=198, socketpair=199, clone=220, clone3=435, unshare=97, setns=268, ptrace=117,
        mount=40, umount2=39, pivot_root=41, chroot=51, bpf=280, perf_event_open=241,
        process_vm_readv=270, process_vm_writev=271, pidfd_getfd=438, kcmp=272, kexec_load=104,
        kexec_file_load=294, init_module=105, finit_module=273, delete_module=106, add_key=217,
        request_key=218, keyctl=219, userfaultfd=282, open_by_handle_at=265,
        name_to_handle_at=264, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
        open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433,
        mount_setattr=442, swapon=224, swapoff=225, reboot=142, acct=89, syslog=116,
        quotactl=60, settimeofday=170, clock_settime=112, clock_adjtime=266, adjtimex=171,
        lookup_dcookie=18)),
}
X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes and seccomp return values.
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_{JEQ,JGE,JSET} | BPF_K
_RET = 0x06
RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data (args[0]'s low word, little endian)


def _errno(code: int) -> int:
    return 0x00050000 | code


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions for `machine` (default: this one)."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise OSError(errno.ENOSYS, f"no seccomp syscall table for {machine}")
    arch, nr = ARCHES[machine]
    eperm = _errno(errno.EPERM)
    prog = [(_LD_ABS, 0, 0, _OFF_ARCH), (_JEQ, 1, 0, arch), (_RET, 0, 0, RET_KILL_PROCESS),
            (_LD_ABS, 0, 0, _OFF_NR)]
    if machine == "x86_64":
        prog += [(_JGE, 0, 1, X32_SYSCALL_BIT), (_RET, 0, 0, RET_KILL_PROCESS)]
    for name in ("socket", "socketpair"):  # allowed for AF_UNIX only
        prog += [(_JEQ, 0, 4, nr[name]), (_LD_ABS, 0, 0, _OFF_ARG0), (_JEQ, 0, 1, AF_UNIX),
                 (_RET, 0, 0, RET_ALLOW), (_RET, 0, 0, eperm)]
    prog += [(_JEQ, 0, 4, nr["clone"]), (_LD_ABS, 0, 0, _OFF_ARG0), (_JSET, 1, 0, CLONE_NEW_FLAGS),
             (_RET, 0, 0, RET_ALLOW), (_RET, 0, 0, eperm)]
    prog += [(_JEQ, 0, 1, nr["clone3"]), (_RET, 0, 0, _errno(errno.ENOSYS))]
    for name in _DENIED:
        if name in nr:
            prog += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, eperm)]
    prog.append((_RET, 0, 0, RET_ALLOW))
    return prog


def install() -> None:
    """Filter the calling thread and everything it executes or starts (sets no_new_privs)."""
    insns = program()
    array = (_Insn * len(insns))(*[_Insn(*i) for i in insns])
    prog = _Prog(len(insns), array)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or _libc.prctl(
            PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {errno.errorcode.get(err, err)}")
