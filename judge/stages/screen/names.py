"""What the screen (judge.stages.screen.stage) looks for: the dotted-name patterns of each rule, the attribute names that
mean one thing whatever their receiver, and the small helpers that read names and lines."""

from __future__ import annotations

import ast
import functools
import re
from fnmatch import fnmatchcase


# Resolved dotted names per rule, as fnmatch patterns; "p" also matches "p.x" and "p(...)".
_PATTERNS = {rule: pats.split() for rule, pats in {
    "sys-modules": "sys.modules sys.meta_path sys.path_hooks sys.path_importer_cache importlib.reload imp.reload builtins.__import__",
    "threads": "threading _thread concurrent multiprocessing torch.multiprocessing asyncio sys.setswitchinterval",
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
    "introspection": "inspect builtins.globals torch.utils._python_dispatch torch.overrides torch._subclasses torch.library "
                     "torch._C torch.Tensor._make_*",
    "env": "os.putenv os.unsetenv os.chdir os.fchdir os.getppid os.getpid os.kill os.killpg os.nice os.sched_setaffinity "
           "resource.setrlimit resource.prlimit signal.pthread_kill signal.raise_signal psutil",
    "dynamic-code": "builtins.exec builtins.eval builtins.compile importlib.import_module importlib.util importlib.machinery "
                    "types.FunctionType types.CodeType types.ModuleType marshal pickle.load* pickle.Unpickler dill cloudpickle "
                    "base64 zlib.decompress* lzma bz2 gzip.decompress codecs.decode runpy code torch.utils.cpp_extension "
                    "torch.ops.load_library torch.classes.load_library",
}.items()}


# Mechanisms with a rule and words of their own, checked before _PATTERNS (a name flags under one of them):
# (rule, patterns, what it lets a kernel do, in words a shark reads without knowing Python's internals).
MECHANISMS = [(rule, pats.split(), meaning) for rule, pats, meaning in [
    ("frames", "sys._getframe sys._current_frames inspect.currentframe inspect.stack inspect.trace inspect.getouterframes "
     "inspect.getinnerframes inspect.getframeinfo traceback.walk_stack traceback.extract_stack traceback.format_stack "
     "traceback.print_stack traceback.walk_tb",
     "reads the call stack: its callers' frames and their locals (judge's runner, the input sets it holds)"),
    ("hooks", "sys.settrace sys.setprofile sys.monitoring threading.settrace* threading.setprofile*",
     "installs a trace or profile hook: its code runs inside every later call, judge's own included"),
    ("hooks", "sys.addaudithook", "installs an audit hook: its code runs on every audited event (imports, opens, exec) "
     "until the process ends"),
    ("hooks", "signal.signal signal.setitimer signal.alarm signal.set_wakeup_fd signal.siginterrupt "
     "faulthandler.dump_traceback_later faulthandler.register",
     "sets a signal handler or a timer: its code interrupts whatever runs then, judge's timing included"),
    ("hooks", "atexit os.register_at_fork", "registers code to run at exit or at a fork, after or around judge's measurements"),
    ("hooks", "weakref.finalize", "registers a finalizer: its code runs when the object is collected, at a moment "
     "judge does not choose"),
    ("hooks", "gc.callbacks", "adds a garbage-collection callback: its code runs at every collection, inside judge's own calls"),
    ("introspection", "gc.get_objects gc.get_referrers gc.get_referents",
     "walks the process's live objects: reaches judge's runner, its inputs and its outputs"),
    ("introspection", "ctypes _ctypes cffi", "native calls and raw memory: can read or write any object of the process"),
]]


_ALLOWED = ("torch._C._cuda_getCurrentRawStream",)  # how launch code gets the current stream's handle; no hook


_CLOCKS = ["time.perf_counter*", "time.time*", "time.monotonic*", "time.process_time*", "time.clock_gettime*"]


# Attribute names that mean one thing whatever the receiver is (a local stream, path or frame).
_ATTRS = {
    **dict.fromkeys("read_text read_bytes write_text write_bytes tofile unlink mkdir rmdir touch symlink_to".split(), "file-io"),
    **dict.fromkeys("synchronize elapsed_time wait_stream wait_event record_event".split(), "timing"),
    **dict.fromkeys("__code__ __closure__ __globals__ __builtins__ __subclasses__ cell_contents".split(), "introspection"),
    **dict.fromkeys("f_back f_locals f_globals f_builtins f_code gi_frame tb_frame tb_next cr_frame ag_frame".split(),
                    "frames"),
    **dict.fromkeys("ref_kernel check_implementation generate_input".split(), "reference"),
}


# Attributes whose write changes what a function or an object is, whatever it is: what each write does.
_DUNDER_WRITES = {
    "__code__": "swaps the function's code: same name and identity, other behaviour",
    "__defaults__": "changes the function's default arguments", "__kwdefaults__": "changes the function's default arguments",
    "__closure__": "replaces the function's closure", "cell_contents": "rewrites a closure's cell: every function that "
    "closes over it now sees another value",
    "__class__": "changes the object's class", "__bases__": "changes the class's bases",
    "__dict__": "replaces the object's namespace", "__globals__": "", "__builtins__": "",
}


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


@functools.lru_cache(maxsize=8192)  # a file names the same few hundred names thousands of times
def _mechanism(name: str) -> tuple[str, str] | None:
    """The rule and the words of the mechanism a resolved name is, if it is one of MECHANISMS."""
    return next(((rule, meaning) for rule, pats, meaning in MECHANISMS if _matches(name, pats)), None)


@functools.lru_cache(maxsize=8192)
def _pattern_rules(name: str) -> tuple[str, ...]:
    """The rules whose _PATTERNS a resolved name matches."""
    return tuple(rule for rule, pats in _PATTERNS.items() if _matches(name, pats))


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
