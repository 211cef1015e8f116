"""OS confinement of a child process, applied before it imports a contestant's code.

Candidates are hostile: one that can read or rewrite the ledger, read another candidate's workspace, signal
the judge or reach the network can win a round without a faster kernel. judge.sandbox.isolation gives every candidate
its own process and workspace; apply() then takes away the rest of the machine with what the kernel offers:
rlimits, a network namespace, Landlock, seccomp and a drop to uid nobody. Machines differ, so every mechanism
is optional: what is missing is recorded in the Confinement (for the report), never fatal.
"""

from __future__ import annotations

import ctypes
import glob
import os
import resource
import signal
import stat
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .libc import MS_NODEV, MS_NOSUID, MS_PRIVATE, MS_REC, checked as _check, libc as _libc
from .mounts import hide_neighbours, inside as _inside, show_caches_at
from .syscalls import drop_capabilities, syscalls_filter

FSIZE_LIMIT = 8 << 30  # no single file a candidate writes may fill the disk
NOBODY = 65534
_PACKAGE = Path(__file__).resolve().parents[1]
# Cache and scratch variables, pointed inside the workspace: everywhere else is read-only or unreadable.
_ENV_DIRS = {
    "HOME": ".", "TMPDIR": ".tmp", "XDG_CACHE_HOME": ".cache", "CUDA_CACHE_PATH": ".cache/nv",
    "TRITON_HOME": ".", "TRITON_CACHE_DIR": ".cache/triton", "TORCHINDUCTOR_CACHE_DIR": ".cache/inductor",
    "CUTE_DSL_CACHE_DIR": ".cache/cutedsl", "CUTE_DSL_DUMP_DIR": ".",
}
# Character devices CUDA and Python open; block devices stay out, since root could read the disk raw.
_DEVICES = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/nvidia*",
            "/dev/nvidia-caps"]

# /proc and /sys as far as Python, torch and CUDA read them, besides the process's own /proc/<pid>: facts that no
# other process moves, and the device trees. Never /proc itself (its listing names every process), another
# process's /proc/<pid>, /proc/stat and /proc/loadavg (fork counts, the last pid), /proc/sys/kernel/ns_last_pid,
# /proc/modules (a module's count of users) or /sys/fs (the cgroups' counters of judge's processes). A runner
# that could read these sees the other runners (docs/architecture.md, "What a runner shares").
PROC_FACTS = ["/proc/cpuinfo", "/proc/meminfo", "/proc/version", "/proc/filesystems", "/proc/devices",
              "/proc/driver/nvidia", "/proc/sys/vm", "/proc/sys/kernel/osrelease", "/proc/sys/kernel/ostype",
              "/proc/sys/kernel/version", "/proc/sys/kernel/cap_last_cap", "/proc/sys/kernel/pid_max",
              "/proc/sys/kernel/threads-max", "/proc/sys/kernel/random", "/proc/sys/kernel/numa_balancing",
              "/proc/sys/kernel/perf_event_paranoid", "/proc/sys/kernel/yama"]
SYS_TREES = ["/sys/devices", "/sys/bus", "/sys/class", "/sys/dev", "/sys/module", "/sys/kernel/mm"]

_CLONE_NEWNET = 0x40000000
_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
# Landlock (include/uapi/linux/landlock.h): filesystem rights by bit, with the ABI that introduced each.
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_LL_MAKE_CHAR, _LL_MAKE_SOCK, _LL_MAKE_BLOCK = 1 << 6, 1 << 9, 1 << 11
_LL_REFER, _LL_TRUNCATE, _LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_LL_FILE_RIGHTS = _LL_EXECUTE | _LL_WRITE_FILE | _LL_READ_FILE | _LL_TRUNCATE | _LL_IOCTL_DEV
_LL_NET_TCP = 0b11  # BIND_TCP | CONNECT_TCP, ABI 4
_LL_SCOPES = 0b11  # abstract unix sockets and signals outside the domain, ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass
class Policy:
    """What a confined child may touch besides the system: its workspace, and extra read-only inputs."""

    writable: list[Path]
    readable: list[Path]
    network: bool = False
    # Files judge made for the child (a runner's inbox and outbox) in a directory judge owns: read and written,
    # never created, removed or renamed there (judge.stages.evaluation.Evaluator.exchange_dir).
    exchange: list[Path] = field(default_factory=list)
    caches_at: Path | None = None  # where its own .cache is shown (a timed runner's: its workspace's; mounts)

    def __post_init__(self):
        self.writable = [Path(p).resolve() for p in self.writable]
        self.readable = [Path(p).resolve() for p in self.readable]
        self.exchange = [Path(p).resolve() for p in self.exchange]
        if self.caches_at is not None:  # its directory resolved, never the place itself: it may be a link by now
            self.caches_at = Path(self.caches_at).parent.resolve() / Path(self.caches_at).name


@dataclass
class Confinement:
    """What was actually in force in the child, one line per mechanism, for the ledger and the report."""

    filesystem: str
    network: str
    syscalls: str
    user: str

    def summary(self) -> str:
        fs = self.filesystem.split(":")[0] if self.filesystem.startswith("landlock") else "no landlock"
        if self.network.startswith("none") or "non-unix sockets denied" in self.network:
            net = "no network"
        elif "tcp denied" in self.network:
            net = "no tcp"
        else:
            net = "network allowed" if self.network == "allowed" else "network not confined"
        calls = "seccomp" if self.syscalls.startswith("seccomp") else "no seccomp"
        user = "uid nobody" if self.user.startswith(f"uid {NOBODY}") else f"uid {self.user.split()[2].rstrip(':')}"
        if "without capabilities" in self.user:
            user += " without capabilities"
        return f"{fs}, {net}, {calls}, {user}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> Confinement:
        return cls(**{f.name: d[f.name] for f in fields(cls)})


# What a child's environment keeps of the user's: what Python, torch, CUDA and the compilers read, never
# the rest (credentials, tokens, the judge's own JUDGE_* settings).
_ENV_KEEP = {"HOME", "TMPDIR", "PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED",
             "PYTHONDONTWRITEBYTECODE", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "USER", "LOGNAME",
             "SHELL", "CC", "CXX"}
_ENV_PREFIXES = ("LC_", "CUDA", "NVIDIA_", "CUTE_DSL_", "TORCH", "PYTORCH_", "TRITON_", "OMP_", "MKL_",
                 "OPENBLAS_", "CUBLAS_", "CUDNN_", "NCCL_", "NVCC_", "CUTLASS_")


# Landlock and the network namespace hold for the thread that applies them and the threads it starts later,
# never for threads already running. numpy's OpenBLAS starts its workers when torch imports it (one fewer than
# the cores the process may use), before `apply`; candidate code could hand such a thread work through its
# queue. With one BLAS thread none is started; torch's own pool starts on first use, after `apply`, confined.
_NO_EARLY_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def minimal_env(base_env: dict[str, str]) -> dict[str, str]:
    """The part of an environment a kernel's process needs; the rest could hold the user's secrets."""
    return {k: v for k, v in base_env.items()
            if k in _ENV_KEEP or (k.startswith(_ENV_PREFIXES) and not k.startswith("JUDGE_"))}


def child_env(policy: Policy, base_env: dict[str, str]) -> dict[str, str]:
    """`minimal_env(base_env)`, with every cache and scratch variable inside the workspace (a value already
    inside a writable path, such as the compile stage's dump dir, is kept)."""
    env = minimal_env(base_env)
    for name, sub in _ENV_DIRS.items():
        if not (name in env and _inside(Path(env[name]), policy.writable)):
            env[name] = str(policy.writable[0] / sub)
    env.update(_NO_EARLY_THREADS)
    return env


def prepare(policy: Policy) -> None:
    """Parent side, before spawning: create the scratch directories, and hand the writable trees to uid
    nobody when the child will be able to drop to it."""
    for path in policy.writable + [policy.writable[0] / sub for sub in _ENV_DIRS.values()]:
        path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or _drop_blocker(policy, _read_paths(policy)):
        return
    for root in policy.writable:
        os.chown(root, NOBODY, NOBODY)
        for parent, dirs, files in os.walk(root):
            for name in dirs + files:
                os.chown(os.path.join(parent, name), NOBODY, NOBODY, follow_symlinks=False)


def system_readable() -> list[Path]:
    """What a Python + torch + CUDA process reads: system trees, the interpreter, every import path, the judge
    package; never a directory holding a judge working tree (its ledger, reports and other workspaces)."""
    candidates = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/opt", *PROC_FACTS, *SYS_TREES,
                  "/run/nvidia-persistenced", sys.prefix, sys.base_prefix, *sys.path,
                  *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    # An editable install puts the checkout's root on the path; beside judge/ lie ledger.db and work/.
    checkout = _PACKAGE.parent
    protected = [Path.cwd().resolve()] + ([checkout] if (checkout / "pyproject.toml").exists() else [])
    paths = []
    for entry in candidates:
        path = Path(entry or ".").resolve()
        if path.exists() and path not in paths and not any(_inside(p, [path]) for p in protected):
            paths.append(path)
    return paths + [_PACKAGE]


def apply(policy: Policy) -> Confinement:
    """Confine this process for good, before candidate code is imported, and say what is in force."""
    try:
        seccomp_lib = _import_seccomp()  # before Landlock: finding libseccomp runs ldconfig
    except (ImportError, OSError, RuntimeError) as error:
        seccomp_lib = error
    readable = _read_paths(policy)
    threads = len(os.listdir("/proc/self/task")) - 1
    # Landlock domains and namespaces are per thread: threads started earlier keep the old view.
    unconfined = f"; {threads} earlier threads are not confined" if threads else ""

    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    cap = FSIZE_LIMIT if hard == resource.RLIM_INFINITY else min(hard, FSIZE_LIMIT)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    layers, missing = [], []
    shm = _optional(_private_shm)
    hidden = hide_neighbours(policy.writable + policy.exchange, readable) if shm else 0
    caches = show_caches_at(policy.writable, policy.caches_at, _ENV_DIRS) if shm else None
    ipc = "; System V IPC and message queues of its own (IPC namespace)" if _optional(_unshare_ipc) else ""
    if not policy.network:
        try:
            _unshare_net()
            layers.append("none (network namespace" + unconfined + ")")
        except OSError as error:
            missing.append(f"no network namespace ({error.strerror})")

    # Landlock needs it without CAP_SYS_ADMIN; it also keeps setuid binaries from raising privileges.
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    filesystem, tcp = _landlock(policy, readable, shm, hidden, caches)
    filesystem += unconfined if filesystem.startswith("landlock") else ""
    syscalls, sockets = syscalls_filter(seccomp_lib, policy.network)
    layers += [layer for layer in (tcp, sockets) if layer]
    if policy.network:
        network = "allowed"
    else:
        network = ", ".join(layers) or "not confined: " + ", ".join(missing + ["no landlock tcp rules, no seccomp"])
    return Confinement(filesystem, network, syscalls + ipc, _drop_user(policy, readable))


def _read_paths(policy: Policy) -> list[Path]:
    # Ancestors of a writable path would expose the workspaces beside it, so they go, system trees included.
    return [p for p in system_readable() if not any(_inside(w, [p]) for w in policy.writable)] + policy.readable


def _unshare_net() -> None:
    _check(_libc.unshare(_CLONE_NEWNET))


def _optional(mechanism) -> bool:
    """Whether a mechanism that needs privileges took effect; where it did not, another covers for it."""
    try:
        mechanism()
    except OSError:
        return False
    return True


def _unshare_ipc() -> None:
    """An IPC namespace of its own where permitted (CAP_SYS_ADMIN); seccomp denies System V IPC and message
    queues anyway, so this only backs that up where seccomp is missing."""
    _check(_libc.unshare(_CLONE_NEWIPC))


def _private_shm() -> None:
    """A /dev/shm of its own: a mount namespace and an empty tmpfs over /dev/shm, where permitted (CAP_SYS_ADMIN).
    Without one, Landlock keeps the child out of the machine's /dev/shm altogether."""
    _check(_libc.unshare(_CLONE_NEWNS))
    _check(_libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None))
    _check(_libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                       b"mode=1777,size=1g"))


def _landlock_abi() -> int:
    return _check(_libc.syscall(ctypes.c_long(444), None, ctypes.c_long(0), ctypes.c_long(1)))


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers, 0 where it has none: what a child's filesystem confinement will be."""
    try:
        return _landlock_abi()
    except OSError:
        return 0


def _landlock(policy: Policy, readable: list[Path], private_shm: bool = False, hidden: int = 0,
              caches: Path | None = None) -> tuple[str, str]:
    """Filesystem (and from ABI 4, TCP) rules; returns the filesystem line and the TCP line ('' if none)."""
    try:
        abi = _landlock_abi()
    except OSError as error:
        return f"none: landlock unavailable ({error.strerror})", ""
    handled = (1 << 13) - 1 | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0) \
        | (_LL_IOCTL_DEV if abi >= 5 else 0)
    net = _LL_NET_TCP if abi >= 4 and not policy.network else 0
    # A device node made in the workspace is a way out; a unix socket bound there is a name another runner
    # could connect to (Landlock does not govern connect).
    write = handled & ~(_LL_MAKE_CHAR | _LL_MAKE_BLOCK | _LL_MAKE_SOCK)
    device = handled & (_LL_READ_FILE | _LL_WRITE_FILE | _LL_TRUNCATE | _LL_IOCTL_DEV)
    dev_paths = [Path(p) for pattern in _DEVICES for p in sorted(glob.glob(pattern))]
    rules = [(p, _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR) for p in readable]
    # Shown caches get a rule of their own: Landlock's walk up from them meets the workspace, not their writable path.
    extra = ([Path("/dev/shm")] if private_shm else []) + ([caches] if caches else [])
    rules += [(p, write) for p in policy.writable + extra]
    rules += [(p, handled & (_LL_READ_FILE | _LL_WRITE_FILE | _LL_TRUNCATE)) for p in policy.exchange]
    rules += [(Path("/dev"), _LL_READ_DIR)] + [(p, device) for p in dev_paths]
    # Its own /proc/<pid> (/proc/self), no other: neither the listing of /proc nor another process's entries.
    rules += [(Path(f"/proc/{os.getpid()}"), _LL_READ_FILE | _LL_READ_DIR)]
    # CUDA names its threads through /proc/<pid>/task/<tid>/comm; cuInit fails (error 304) when it cannot.
    rules += [(Path(f"/proc/{os.getpid()}/task"), handled & (_LL_READ_FILE | _LL_WRITE_FILE | _LL_TRUNCATE))]
    # The kernel takes the largest struct it knows and checks that the fields it does not know are zero.
    attr = _RulesetAttr(handled, net, _LL_SCOPES if abi >= 6 else 0)
    try:
        ruleset = _check(_libc.syscall(ctypes.c_long(444), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                                       ctypes.c_long(0)))
        try:
            for path, rights in rules:
                _allow(ruleset, path, rights)
            _check(_libc.syscall(ctypes.c_long(446), ctypes.c_long(ruleset), ctypes.c_long(0)))
        finally:
            os.close(ruleset)
    except OSError as error:
        return f"none: landlock abi {abi} failed ({error.strerror})", ""
    scoped = ", signals and abstract unix sockets scoped" if abi >= 6 else ""
    shm = "a private /dev/shm" if private_shm else "no /dev/shm"
    if hidden:
        shm += f", what lies beside its own directories hidden ({_plural(hidden, 'mount')})"
    exchange = ", its exchange files" if policy.exchange else ""
    exchange += ", its caches shown at its workspace's" if caches else ""
    return (f"landlock abi {abi}: write only in {_plural(len(policy.writable), 'path')}{exchange}, {shm}, read "
            f"only in {_plural(len(readable), 'path')} and {_plural(len(dev_paths), 'device')}, /proc only its own"
            f"{scoped}",
            "tcp denied (landlock)" if net else "")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _allow(ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone or never there: nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _LL_FILE_RIGHTS
        attr = _PathBeneath(rights, fd)
        _check(_libc.syscall(ctypes.c_long(445), ctypes.c_long(ruleset), ctypes.c_long(1), ctypes.byref(attr),
                             ctypes.c_long(0)))
    finally:
        os.close(fd)


def _import_seccomp():
    import pyseccomp  # raises RuntimeError where libseccomp is missing

    return pyseccomp


def _drop_user(policy: Policy, readable: list[Path]) -> str:
    uid = os.getuid()
    if os.geteuid() != 0:
        return f"same uid {uid}: not root, nothing to drop"
    reason = _drop_blocker(policy, readable)
    if not reason and any(p.exists() and p.stat().st_uid != NOBODY for p in policy.writable):
        reason = f"the writable paths are not owned by {NOBODY} (prepare() was not called)"
    if reason:
        return f"same uid {uid}{drop_capabilities()}: {reason}"
    parent = os.getppid()
    try:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    except OSError as error:
        return f"same uid {os.getuid()}: dropping to {NOBODY} failed ({error.strerror})"
    # A new uid clears the parent-death signal: set again, a runner never outlives the process that started it
    # (judge, or the spares' template), and one whose parent ended in between leaves now.
    _libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0),
                ctypes.c_ulong(0))
    if os.getppid() != parent:
        os._exit(1)
    return f"uid {NOBODY} (nobody)"


def _drop_blocker(policy: Policy, readable: list[Path]) -> str:
    """Why uid nobody could not read what the child needs ('' when it could), from mode bits alone."""
    for path in readable:
        if path.exists() and (reason := _unreadable_reason(path)):
            return reason
    for path in policy.writable + policy.exchange:
        if reason := _unreadable_reason(path.parent, search_only=True):
            return reason
    return ""


def _unreadable_reason(path: Path, search_only: bool = False) -> str:
    """Why `path` (or, with search_only, only the way to it) is closed to others ('' when it is open)."""
    for ancestor in [*reversed(path.parents), path]:
        if not ancestor.exists():
            break  # prepare() will create the rest, open to others
        mode = ancestor.stat().st_mode
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return f"{ancestor} is mode {stat.S_IMODE(mode):04o}: uid {NOBODY} cannot search it"
        if ancestor == path and not search_only and not mode & stat.S_IROTH:
            return f"{ancestor} is mode {stat.S_IMODE(mode):04o}: uid {NOBODY} cannot read it"
    return ""
