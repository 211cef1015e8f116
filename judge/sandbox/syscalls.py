"""The system calls a confined child gives up (judge.sandbox.confine.apply): the seccomp filter it loads, what a
candidate may not call at all and what it may call on itself only (default-allow: the calls Python, torch and CUDA
make stay open), and, where it stays root, its capabilities."""

from __future__ import annotations

import ctypes
import errno
import os

_PR_CAPBSET_DROP = 24
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Namespaces a child may not make for itself (clone's flags): mount, cgroup, uts, ipc, user, pid, net.
_NAMESPACE_FLAGS = [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000]
# Denied outright by seccomp: reach into other processes, the kernel, the clock, or out of the sandbox.
# setsid is denied so that every descendant stays in the worker's session, where judge finds and kills it;
# setpgid is not: build tools (ninja for torch's load_inline) put their jobs in process groups of their own.
_DENIED = [
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal", "pidfd_getfd", "setsid",
    "mount", "umount2", "unshare", "setns", "pivot_root", "chroot", "bpf", "perf_event_open", "keyctl", "add_key",
    "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "init_module",
    "finit_module", "delete_module", "reboot", "kexec_load", "kexec_file_load", "swapon", "swapoff",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    # System V IPC and POSIX message queues: names every process of the machine shares (docs/architecture.md).
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv",
    "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "kcmp",  # compares another process's files and memory with one's own
]
# Calls whose first argument names a process (0: the caller), allowed on itself only: on another process each tells
# whether it exists or reads what it set on itself (a nice value, a policy), a mark the other runner could look for.
_OWN_PROCESS_ONLY = ["getpgid", "getsid", "sched_getscheduler", "sched_getparam", "sched_getattr",
                     "sched_rr_get_interval", "pidfd_open", "get_robust_list", "migrate_pages",
                     "move_pages"]


def syscalls_filter(lib, network: bool) -> tuple[str, str]:
    """Default-allow filter that refuses what reaches other processes, the kernel or the network."""
    if isinstance(lib, BaseException):
        return f"not confined: no seccomp ({type(lib).__name__}: {lib})", ""
    unknown = []
    try:
        sc = lib.SyscallFilter(lib.ALLOW)
        sc.set_attr(lib.Attr.CTL_TSYNC, 1)  # every thread, not only this one

        def deny(name, *args, action=lib.ERRNO(errno.EPERM)):
            if lib.resolve_syscall(lib.Arch.NATIVE, name) < 0:
                unknown.append(name)
            else:
                sc.add_rule(action, name, *args)

        for name in _DENIED:
            deny(name)
        # arg0 is the target; 0 is this process group. The pid is this one's: a forked child may only
        # signal its own group, which is all the judge's killpg needs.
        for name in ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            for arg in outside(lib, [0, os.getpid()]):
                deny(name, arg)
        # Nor may it move itself to other cores than judge gave it (the base has the same), nor pin, renice,
        # reschedule or re-limit another process (the base's runner is one).
        deny("sched_setaffinity")
        for name in ("sched_setscheduler", "sched_setparam", "sched_setattr", "prlimit64", *_OWN_PROCESS_ONLY):
            for arg in outside(lib, [0, os.getpid()]):
                deny(name, arg)
        for name, who_index in (("setpriority", 1), ("ioprio_set", 1), ("getpriority", 1), ("ioprio_get", 1)):
            for arg in outside(lib, [0, os.getpid()], who_index):
                deny(name, arg)
        for name in ("setpriority", "getpriority"):
            deny(name, lib.Arg(0, lib.NE, 0))  # PRIO_PGRP and PRIO_USER reach other processes
        for name in ("ioprio_set", "ioprio_get"):
            deny(name, lib.Arg(0, lib.NE, 1))  # only IOPRIO_WHO_PROCESS
        for flag in _NAMESPACE_FLAGS:
            deny("clone", lib.Arg(0, lib.MASKED_EQ, flag, flag))
        deny("clone3", action=lib.ERRNO(errno.ENOSYS))  # its flags are out of reach; glibc falls back to clone
        if not network:
            for arg in outside(lib, [1, 16]):  # AF_UNIX and AF_NETLINK stay: Python and CUDA use them locally
                deny("socket", arg)
        sc.load()
    except OSError as error:
        return f"not confined: seccomp filter failed ({error.strerror})", ""
    missed = f"; unknown to libseccomp, so allowed: {', '.join(unknown)}" if unknown else ""
    return ("seccomp: ptrace, process_vm_*, changing its own cores, signals to, scheduling, limits and "
            "whereabouts of other processes, System V IPC, message queues, non-unix sockets, setsid, "
            "namespaces, mount, chroot, bpf, perf_event_open, keys, io_uring, userfaultfd, modules, reboot, "
            f"kexec, swap, clock setting denied{missed}",
            "" if network else "non-unix sockets denied (seccomp)")


def outside(lib, allowed: list[int], index: int = 0):
    """Conditions on argument `index` that together match every 64-bit value not in `allowed`: libseccomp takes
    one comparison per argument in a rule, so the gaps below max(allowed) become masked prefix blocks."""
    low = 0
    for value in sorted(allowed):
        while low < value:
            size = low & -low or 1 << 63
            while size > value - low:
                size >>= 1
            yield lib.Arg(index, lib.MASKED_EQ, (1 << 64) - size, low)
            low += size
        low = value + 1
    yield lib.Arg(index, lib.GT, max(allowed))


def drop_capabilities() -> str:
    """Staying root, give up every capability (bounding set, then effective, permitted and inheritable): root
    without them cannot read other processes' /proc entries that their owners made non-dumpable, nor override
    file permissions. Returns the phrase for the record."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability the kernel knows
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(header, data) != 0:
        return f" (keeping its capabilities: capset failed, errno {ctypes.get_errno()})"
    return " without capabilities"


def not_dumpable() -> None:
    """Make this process's /proc entries (its environment, its memory) unreadable to the kernels' processes, which
    give up every capability when they stay root (judge.sandbox.confine): judge's own, where it holds the oracle's
    secrets."""
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
