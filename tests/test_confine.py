"""judge/sandbox/confine.py: a confined child cannot read or write past its workspace, reach the network, signal
the judge or leave its process group, yet still runs torch; what was not in force is recorded, never fatal.

The probes run tests/fixtures/confine/probe.py in a real child, as a candidate's process would be started."""

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from judge.sandbox import confine, syscalls
from judge.sandbox.confine import Confinement, Policy

HERE = Path(__file__).parent
PROBE = HERE / "fixtures" / "confine" / "probe.py"
CHECKOUT = HERE.parent
LEDGER_BYTES = b"SQLite format 3\x00 the judge's ledger"


def _landlock_abi() -> int:
    try:
        return confine._landlock_abi()
    except OSError:
        return 0


def _has_seccomp() -> bool:
    try:
        confine._import_seccomp()
    except (ImportError, OSError, RuntimeError):
        return False
    return True


def _can_unshare_net() -> bool:
    code = "from judge.sandbox import confine; confine._unshare_net()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=CHECKOUT).returncode == 0


ABI = _landlock_abi()
SECCOMP = _has_seccomp()
NETNS = _can_unshare_net()
needs_landlock = pytest.mark.skipif(ABI == 0, reason="needs Landlock; this kernel has none")
needs_seccomp = pytest.mark.skipif(not SECCOMP, reason="needs pyseccomp and libseccomp")
needs_landlock_scopes = pytest.mark.skipif(ABI < 6, reason="needs Landlock ABI 6 (signal scoping)")
needs_landlock_tcp = pytest.mark.skipif(ABI < 4, reason="needs Landlock ABI 4 (TCP rules)")


def run_probe(root: Path, disable=(), with_torch=False, extra_env=None) -> dict:
    """Lay out a judge-like tree under `root` (ledger beside the workspaces), confine a child in one
    workspace and return what it printed."""
    workspace, other = root / "work" / "cand-1", root / "work" / "cand-2"
    for directory in (workspace, other):
        directory.mkdir(parents=True)
    (other / "submission.py").write_text("# another contestant's kernel\n")
    (root / "ledger.db").write_bytes(LEDGER_BYTES)
    shutil.copy(PROBE, workspace)
    policy = Policy(writable=[workspace], readable=[])
    confine.prepare(policy)
    env = confine.child_env(policy, {**os.environ, "JUDGE_LEDGER": str(root / "ledger.db")})
    # As judge.sandbox.isolation does: the checkout's root on the child's path.
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(CHECKOUT), env.get("PYTHONPATH")] if p)
    env.update(extra_env or {})
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        args = {"workspace": str(workspace), "ledger": str(root / "ledger.db"), "other": str(other / "submission.py"),
                "checkout": str(CHECKOUT), "port": listener.getsockname()[1], "disable": list(disable),
                "torch": with_torch}
        done = subprocess.run([sys.executable, "probe.py", json.dumps(args)], cwd=workspace, env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    probe = run_probe(root, with_torch=importlib.util.find_spec("torch") is not None)
    return SimpleNamespace(root=root, record=Confinement.from_dict(probe["confinement"]), **probe["results"])


def test_record_says_what_is_in_force(full):
    fs = f"landlock abi {ABI}" if ABI else "no landlock"
    net = "no network" if SECCOMP or NETNS else "no tcp" if ABI >= 4 else "network not confined"
    user = "uid nobody" if full.uid == confine.NOBODY else f"uid {os.getuid()}"
    if os.geteuid() == 0 and full.uid != confine.NOBODY:
        user += " without capabilities"  # root that stays root gives up its capabilities
    assert full.record.summary() == f"{fs}, {net}, {'seccomp' if SECCOMP else 'no seccomp'}, {user}"
    assert full.record.network.startswith("none (network namespace)") == NETNS


def test_workspace_is_writable(full):
    assert full.write_workspace == "ok"
    assert (full.root / "work" / "cand-1" / "out.txt").read_text() == "mine"


@needs_landlock
def test_ledger_beside_the_workspace_can_be_neither_read_nor_written(full):
    assert full.read_ledger == "EACCES"
    assert full.write_ledger == "EACCES"
    assert full.cat_ledger == 1  # a program the candidate starts is confined too
    assert (full.root / "ledger.db").read_bytes() == LEDGER_BYTES


@needs_landlock
def test_tmp_other_workspaces_and_the_checkout_are_closed(full):
    assert full.create_tmp == "EACCES"
    # beside its own workspace, nothing where a mount namespace hid it (root), unreadable elsewhere
    assert full.read_other_workspace == ("ENOENT" if "hidden" in full.record.filesystem else "EACCES")
    assert full.read_checkout == "EACCES"  # on the child's path, yet never readable
    assert full.import_judge_module == "ok"  # the judge package itself stays importable


def test_network_is_unreachable(full):
    if SECCOMP:
        assert full.connect == "EPERM"  # no inet socket at all
    elif NETNS:
        assert full.connect == "ENETUNREACH"
    elif ABI >= 4:
        assert full.connect == "EACCES"
    else:
        pytest.skip("needs seccomp, CAP_SYS_ADMIN or Landlock ABI 4")


@needs_seccomp
def test_no_signals_to_the_judge_and_no_leaving_the_process_group(full):
    assert full.kill_parent == "EPERM"
    assert full.kill_self == "ok"
    assert full.kill_own_group == "ok"
    assert full.setsid == "EPERM"


def test_torch_still_works(full):
    if not hasattr(full, "torch"):
        pytest.skip("needs torch")
    assert full.torch == [2.0, 2.0, 2.0]


@pytest.mark.gpu
def test_cuda_still_works(full):
    assert full.cuda == 64.0


@needs_landlock_scopes
@needs_landlock_tcp
def test_without_seccomp_or_a_namespace_landlock_still_holds(tmp_path):
    probe = run_probe(tmp_path, disable=["_import_seccomp", "_unshare_net", "_unshare_ipc", "_private_shm"])
    record, results = Confinement.from_dict(probe["confinement"]), probe["results"]
    assert record.syscalls == "not confined: no seccomp (OSError: [Errno 38] disabled by the test)"
    assert record.network == "tcp denied (landlock)"
    assert results["connect"] == "EACCES"
    assert results["kill_parent"] == "EPERM"  # Landlock's signal scope
    assert results["setsid"] == "ok"
    assert results["read_ledger"] == "EACCES"


@needs_seccomp
def test_without_landlock_the_record_says_so_and_seccomp_still_holds(tmp_path):
    probe = run_probe(tmp_path, disable=["_landlock_abi"])
    record, results = Confinement.from_dict(probe["confinement"]), probe["results"]
    assert record.filesystem == "none: landlock unavailable (disabled by the test)"
    assert record.summary().startswith("no landlock, no network, seccomp, ")
    assert results["read_ledger"] == "ok"  # honestly recorded as not confined
    assert results["kill_parent"] == "EPERM"


def test_with_nothing_available_the_child_runs_and_says_so(tmp_path):
    probe = run_probe(tmp_path, disable=["_import_seccomp", "_unshare_net", "_landlock_abi"])
    record, results = Confinement.from_dict(probe["confinement"]), probe["results"]
    assert record.network == ("not confined: no network namespace (disabled by the test), "
                              "no landlock tcp rules, no seccomp")
    without = " without capabilities" if os.geteuid() == 0 and "without capabilities" in record.user else ""
    assert record.summary() == f"no landlock, network not confined, no seccomp, uid {os.getuid()}{without}"
    assert results["write_workspace"] == "ok"
    assert results["connect"] == "ok"


@pytest.fixture
def open_dir():
    """A directory everyone can search (pytest's tmp_path lies in one only its owner can)."""
    root = Path(tempfile.mkdtemp(prefix="judge-confine-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root)


def test_drops_to_nobody_where_everything_needed_is_open_to_it(open_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop privileges")
    policy = Policy(writable=[open_dir / "work" / "cand-1"], readable=[])
    blocker = confine._drop_blocker(policy, confine._read_paths(policy))
    if blocker:
        pytest.skip(f"uid nobody cannot read what the child needs here: {blocker}")
    probe = run_probe(open_dir, with_torch=importlib.util.find_spec("torch") is not None)
    assert probe["confinement"]["user"] == "uid 65534 (nobody)"
    assert probe["results"]["uid"] == confine.NOBODY
    assert probe["results"]["write_workspace"] == "ok"
    assert probe["results"]["read_ledger"] == ("EACCES" if ABI else "ok")
    assert probe["results"].get("cuda", 64.0) == 64.0  # where there is a GPU, CUDA works as nobody


def test_summary_and_round_trip():
    record = Confinement(
        filesystem="landlock abi 7: write only in 1 path, no /dev/shm, read only in 16 paths and 5 devices, /proc "
                   "only its own",
        network="none (network namespace), tcp denied (landlock), non-unix sockets denied (seccomp)",
        syscalls="seccomp: ptrace, process_vm_*, signals to other processes denied",
        user="uid 65534 (nobody)",
    )
    assert record.summary() == "landlock abi 7, no network, seccomp, uid nobody"
    assert Confinement.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    assert record.to_dict()["user"] == "uid 65534 (nobody)"
    weak = Confinement("none: landlock unavailable (Function not implemented)", "tcp denied (landlock)",
                       "not confined: no seccomp (RuntimeError: Unable to find libseccomp)",
                       "same uid 0: /root is mode 0700: uid 65534 cannot search it")
    assert weak.summary() == "no landlock, no tcp, no seccomp, uid 0"
    assert Confinement("x", "allowed", "y", "same uid 1000: not root, nothing to drop").summary() == \
        "no landlock, network allowed, no seccomp, uid 1000"


def test_child_env_drops_judge_settings_and_points_caches_into_the_workspace(tmp_path):
    workspace = tmp_path / "ws"
    policy = Policy(writable=[workspace], readable=[])
    env = confine.child_env(policy, {"JUDGE_LEDGER": "/x/ledger.db", "HOME": "/root", "PATH": "/usr/bin",
                                     "CUTE_DSL_DUMP_DIR": str(workspace / "scratch")})
    assert "JUDGE_LEDGER" not in env
    assert env["PATH"] == "/usr/bin"
    assert env["HOME"] == str(workspace)
    assert env["TMPDIR"] == str(workspace / ".tmp")
    assert env["TRITON_CACHE_DIR"] == str(workspace / ".cache" / "triton")
    assert env["CUTE_DSL_DUMP_DIR"] == str(workspace / "scratch")  # already inside: kept
    confine.prepare(policy)
    assert (workspace / ".tmp").is_dir() and (workspace / ".cache" / "nv").is_dir()


def test_child_env_starts_no_blas_threads_before_confinement(tmp_path):
    """A thread running before `apply` keeps the old filesystem and network: one BLAS thread means none."""
    policy = Policy(writable=[tmp_path / "ws"], readable=[])
    assert confine.child_env(policy, {"OPENBLAS_NUM_THREADS": "16"})["OPENBLAS_NUM_THREADS"] == "1"
    assert confine.child_env(policy, {})["OPENBLAS_NUM_THREADS"] == "1"


def test_system_readable_leaves_out_the_checkout_root_and_the_cwd(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(CHECKOUT))
    monkeypatch.chdir(tmp_path)
    paths = confine.system_readable()
    assert CHECKOUT.resolve() not in paths
    assert tmp_path.resolve() not in paths
    assert Path(confine.__file__).resolve().parents[1] in paths
    assert Path(sys.prefix).resolve() in paths


def test_outside_covers_exactly_the_values_not_allowed():
    lib = SimpleNamespace(MASKED_EQ="masked", GT="gt", Arg=lambda arg, op, a, b=0: (op, a, b))
    conditions = list(syscalls.outside(lib, [0, 1234]))

    def matches(value):
        return any(value & a == b if op == "masked" else value > a for op, a, b in conditions)

    assert [v for v in range(5000) if not matches(v)] == [0, 1234]
    assert matches(2**64 - 1)  # kill(-1, ...) as the kernel sees it
    assert len(conditions) <= 2 * 11 + 1


def test_unreadable_reason_names_the_closed_directory(open_dir):
    closed = open_dir / "closed"
    (closed / "inner").mkdir(parents=True)
    secret = closed / "inner" / "f"
    secret.write_text("x")
    closed.chmod(0o700)
    assert confine._unreadable_reason(secret) == f"{closed} is mode 0700: uid 65534 cannot search it"
    closed.chmod(0o755)
    secret.chmod(0o600)
    assert confine._unreadable_reason(secret) == f"{secret} is mode 0600: uid 65534 cannot read it"
    assert confine._unreadable_reason(secret, search_only=True) == ""


COLLUDE = HERE / "fixtures" / "confine" / "collude.py"


def collude(root: Path, confined: bool, cuda: bool = False, disable: tuple[str, ...] = ()
            ) -> tuple[dict, dict, Confinement | None]:
    """A candidate that leaves every mark it can, and a base that looks for them while it lives: each a child
    confined as a runner is (or not), in a workspace of its own. What the marker did, what the looker found and
    the looker's confinement."""
    name, key = f"jmark{os.getpid()}"[:15], 0x4A000000 | (os.getpid() & 0xFFFF)
    children = {}
    for role in ("cand", "base"):
        workspace = root / ("confined" if confined else "open") / role
        workspace.mkdir(parents=True)
        policy = Policy(writable=[workspace], readable=[])
        confine.prepare(policy)
        env = confine.child_env(policy, dict(os.environ))
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(CHECKOUT), env.get("PYTHONPATH")] if p)
        children[role] = (workspace, env)
    args = {"confine": confined, "name": name, "key": key, "cuda": cuda, "disable": list(disable)}
    marker = subprocess.Popen([sys.executable, str(COLLUDE), json.dumps({**args, "role": "mark"})],
                              cwd=children["cand"][0], env=children["cand"][1], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = marker.stdout.readline()
        assert line, "the marker ended before it marked"
        marked = json.loads(line)["marked"]
        looked = subprocess.run(
            [sys.executable, str(COLLUDE), json.dumps({**args, "role": "look", "pid": marker.pid,
                                                       "socket": str(children["cand"][0] / "mark.sock"),
                                                       "file": str(children["cand"][0] / "mark"),
                                                       "workspace": str(children["cand"][0])})],
            cwd=children["base"][0], env=children["base"][1], capture_output=True, text=True, timeout=60)
        assert looked.returncode == 0, looked.stderr
    finally:
        marker.stdin.close()
        marker.wait(timeout=30)
    look = json.loads(looked.stdout)
    return marked, look["found"], look["confinement"] and Confinement.from_dict(look["confinement"])


def test_unconfined_a_base_finds_every_mark_its_candidate_leaves(tmp_path):
    """The channels of issue 39 exist: without confinement a colluding base sees its candidate."""
    marked, found, _ = collude(tmp_path, confined=False)
    assert set(marked.values()) == {"ok"}
    assert found["comm"] is True and found["comm_of_pid"] is True and found["cwd_of_pid"] is True
    assert found["shm"] is True and found["sysv"] is True and found["mqueue"] is True
    assert found["abstract_socket"] == found["path_socket"] == "ok"
    assert found["nice"] is True and found["file"] is True


UNPRIVILEGED = ("_private_shm", "_unshare_ipc", "_unshare_net")  # what a machine without CAP_SYS_ADMIN lacks


@needs_landlock
@needs_seccomp
@pytest.mark.parametrize("disable", [(), UNPRIVILEGED], ids=["as-it-comes", "no-namespaces"])
def test_a_confined_base_cannot_see_its_confined_candidate(tmp_path, disable):
    """Issue 39: a base whose backdoor turns on when its candidate is running finds no mark of it, with or without
    namespaces: no /proc but its own, no shared /dev/shm, no System V IPC or message queues, no unix socket to
    reach, no other process's nice value; nothing beside its own workspace where it has a mount namespace."""
    marked, found, looker = collude(tmp_path, confined=True, disable=disable)
    assert marked["comm"] == "ok" and marked["nice"] == "ok"  # what a process may do to itself
    assert marked["sysv"] == marked["mqueue"] == "EPERM"
    assert marked["path_socket"] == "EACCES"  # no socket file in its workspace
    assert marked["shm"] in ("ok", "EACCES")  # a private /dev/shm (where it may mount one), or none at all
    assert found["comm"] == found["comm_of_pid"] == found["loadavg"] == "EACCES"
    assert found["cwd_of_pid"] == "EACCES"  # a link, not a file to open: Landlock's ptrace rule refuses it
    assert found["own_comm"] is True
    assert found["shm"] is False
    assert found["sysv"] == found["mqueue"] == found["nice"] == "EPERM"
    if ABI >= 6 or "network namespace" in looker.network:  # else a residual channel (docs/architecture.md)
        assert found["abstract_socket"] in ("EPERM", "ECONNREFUSED")  # Landlock's scope, or a network namespace
    assert found["path_socket"] == "ENOENT"
    # Landlock does not govern stat(): only a mount namespace (CAP_SYS_ADMIN) hides what lies beside its own
    # workspace; without one a base can test whether its candidate made a file at a path it guesses (a residual).
    if "a private /dev/shm" in looker.filesystem:  # it could mount: then it hides
        assert "hidden" in looker.filesystem
    assert found["file"] is ("hidden" not in looker.filesystem)


@pytest.mark.gpu
@needs_landlock
@needs_seccomp
def test_on_a_gpu_confined_runners_run_cuda_and_still_cannot_see_each_other(tmp_path):
    """CUDA works with the /proc and /sys that confine.PROC_FACTS and SYS_TREES allow: a context made before
    confinement (a spare's), one made after (the looker's), cuBLAS loaded after. What the looker reads of the
    device's free memory is printed: the residual channel of a candidate holding a gigabyte (docs/architecture.md)."""
    marked, found, looker = collude(tmp_path, confined=True, cuda=True)
    print(json.dumps({"marked": marked, "found": found, "looker": looker.to_dict()}, indent=1))
    assert marked["cuda"] == found["cuda"] == 64.0
    assert marked["hold"] == "ok"
    assert found["comm"] == found["comm_of_pid"] == found["loadavg"] == "EACCES"
    assert found["shm"] is False
    assert found["file"] is ("hidden" not in looker.filesystem)  # a residual where judge may not mount
    assert found["sysv"] == found["mqueue"] == found["nice"] == "EPERM"
    assert found["path_socket"] == "ENOENT"
