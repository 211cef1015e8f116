"""What the screen (judge.screening) looks for: the dotted-name patterns of each rule, the attribute names that
mean one thing whatever their receiver, and the small helpers that read names and lines."""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatchcase


# Resolved dotted names per rule, as fnmatch patterns; "p" also matches "p.x" and "p(...)".
_PATTERNS = {rule: pats.split() for rule, pats in {
    "sys-modules": "sys.modules sys.meta_path sys.path_hooks sys.path_importer_cache importlib.reload imp.reload builtins.__import__",
    "threads": "threading _thread concurrent multiprocessing torch.multiprocessing asyncio signal.signal signal.setitimer "
               "signal.alarm atexit weakref.finalize sys.settrace sys.setprofile sys.setswitchinterval sys.addaudithook sys.monitoring",
    "subprocess": "subprocess os.system os.popen os.exec* os.spawn* os.fork* os.posix_spawn* os.startfile pty pexpect",
    "file-io": "builtins.open io.open io.FileIO os.open os.fdopen os.remove os.unlink os.rename os.renames os.replace os.mkdir "
               "os.makedirs os.rmdir os.removedirs os.chmod os.chown os.symlink os.link os.listdir os.scandir os.walk os.truncate "
               "os.stat os.path.exists os.path.isfile os.path.getmtime shutil tempfile glob pathlib mmap fcntl sqlite3 shelve dbm "
               "torch.save torch.load torch.from_file numpy.save* numpy.load* numpy.fromfile numpy.genfromtxt numpy.memmap pickle.dump*",
    "network": "socket ssl urllib urllib3 http requests httpx aiohttp ftplib smtplib telnetlib xmlrpc paramiko websocket "
               "websockets grpc zmq",
    "sleep": "time.sleep torch.cuda._sleep asyncio.sleep signal.pause",
    "timing": "time.perf_counter* time.time* time.monotonic* time.process_time* time.thread_time* time.clock_gettime* timeit "
              "torch.cuda.Event torch.Event torch.cuda.synchronize torch.cuda.Stream torch.cuda.stream torch.cuda.set_stream "
              "torch.cuda.ExternalStream torch.cuda.streams torch.cuda.set_sync_debug_mode torch.profiler torch.autograd.profiler "
              "torch.cuda.profiler *.cuEvent* *.cudaEvent* *.cuStreamCreate* *.cudaStreamCreate* *Synchronize",
    "reference": "reference judge",
    "introspection": "inspect sys._getframe sys._current_frames gc.get_objects gc.get_referrers gc.get_referents ctypes cffi "
                     "traceback.walk_stack traceback.extract_stack builtins.globals torch.utils._python_dispatch torch.overrides "
                     "torch._subclasses torch.library torch._C torch.Tensor._make_*",
    "env": "os.putenv os.unsetenv os.chdir os.fchdir os.getppid os.getpid os.kill os.killpg os.nice os.sched_setaffinity "
           "resource.setrlimit resource.prlimit signal.pthread_kill signal.raise_signal psutil",
    "dynamic-code": "builtins.exec builtins.eval builtins.compile importlib.import_module importlib.util importlib.machinery "
                    "types.FunctionType types.CodeType types.ModuleType marshal pickle.load* pickle.Unpickler dill cloudpickle "
                    "base64 zlib.decompress* lzma bz2 gzip.decompress codecs.decode runpy code torch.utils.cpp_extension",
}.items()}


_ALLOWED = ("torch._C._cuda_getCurrentRawStream",)  # how launch code gets the current stream's handle; no hook


_CLOCKS = ["time.perf_counter*", "time.time*", "time.monotonic*", "time.process_time*", "time.clock_gettime*"]


# Attribute names that mean one thing whatever the receiver is (a local stream, path or frame).
_ATTRS = {
    **dict.fromkeys("read_text read_bytes write_text write_bytes tofile unlink mkdir rmdir touch symlink_to".split(), "file-io"),
    **dict.fromkeys("synchronize elapsed_time wait_stream wait_event record_event".split(), "timing"),
    **dict.fromkeys("__code__ __closure__ __globals__ __builtins__ __subclasses__ f_back f_locals f_globals f_code gi_frame "
                    "tb_frame cr_frame".split(), "introspection"),
    **dict.fromkeys("ref_kernel check_implementation generate_input".split(), "reference"),
}


_DUNDER_WRITES = {"__code__", "__globals__", "__builtins__", "__dict__", "__class__", "__defaults__", "__kwdefaults__"}


_MUTATORS = {"update", "setdefault", "append", "extend", "insert", "clear", "pop", "popitem", "remove", "discard", "add",
             "appendleft", "__setitem__", "__delitem__"}


# Modules have functions named add, append, insert (torch.add, cute.append): on them only dict writes are writes.
_MODULE_MUTATORS = {"update", "setdefault", "clear", "pop", "popitem", "__setitem__", "__delitem__"}


_LOOKUPS = {"get", "setdefault", "pop", "__contains__", "__getitem__"}


_IDENTITY = {"data_ptr", "untyped_storage", "storage", "_typed_storage", "__hash__"}


_SHAPES = {"shape": "shapes", "size": "shapes", "numel": "shapes", "ndim": "shapes", "dim": "shapes", "dtype": "dtypes",
           "device": "device", "stride": "strides", "is_contiguous": "strides"}


_CONTAINERS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter", "WeakKeyDictionary",
               "WeakValueDictionary", "WeakSet"}


_SETATTRS = {"builtins.setattr", "builtins.delattr", "builtins.object.__setattr__", "builtins.type.__setattr__"}


_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _matches(name: str, patterns) -> bool:
    return any(fnmatchcase(name, p) or fnmatchcase(name, p + ".*") or fnmatchcase(name, p + "(*") for p in patterns)


def _short(node: ast.AST, width: int = 60) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _disp(name: str) -> str:
    return name.removeprefix("builtins.")


def _root(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _lines(source: str) -> list[str]:
    """Lines as Python numbers them: str.splitlines() also breaks at \\f, \\x1c and others, which a
    contestant could put in a comment to show the judges the wrong text for a flagged line."""
    return re.split(r"\r\n|\r|\n", source)


def _const_str(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
