"""The one frame in which a kernel is called: its inputs arrive only while it waits, and its output leaves before
anything the kernel could have hooked runs.

A runner enters `serve_calls` once per stretch of calls (a correctness case, a benchmark of a process pair) and
stays in it. The parent sends fixed binary records on the command pipe; the frame answers each with one JSON
line that it builds by bytes formatting. Between two calls the frame waits in a blocking read, and the parent
stops the whole process (SIGSTOP) while the oracle writes the next input set into memory the process maps
(judge.boundary.exchange). When the record arrives the frame starts the clock and calls the kernel with nothing in
between that the kernel could have hooked:

- every callable the frame uses after entry is a local, captured on entry from references the runner bound
  before the kernel was imported and checked to be C code; no module attribute, global or builtin name is looked
  up after entry, so replacing `torch.X`, `torch.Tensor.Y` or `builtins.Z` reaches nothing here (a builtin replaced
  since before the kernel's import is named on entry and on the call that replaced it: a hook there reaches the
  kernel's own next call);
- profiling, tracing and sys.monitoring are switched off and the garbage collector is held on entry and again
  right after each call, inside the clock: a hook the kernel installs runs, if at all, while it is timed;
- signals are blocked in this thread while the frame waits and copies, and every signal handler installed since
  before the kernel's import is set to SIG_IGN on entry and right after each call, inside the clock (another
  thread of the process can still take a signal, and CPython then runs its Python handler in this thread), so
  no handler runs between a set's arrival and its call or after the clock stops;
- what a call returned is kept until the stretch ends or the parent asks for a release after the oracle has
  read the outbox, so no finalizer runs between a set's arrival and its call or between an output's copy and
  its read;
- the output is taken apart without calling anything of the kernel's (exact types; a named tuple's items read
  through tuple's own slots, its class's fields from the class's own namespace, its metaclass exactly `type`): its
  tensors are copied into the runner's outboxes by C-level tensor methods on plain tensors, its nesting and Python
  numbers written into the reply (judge.boundary.exchange's description), and every reply
  says what could have run Python during that copy (torch modes, a kernel registered for the operators it uses,
  threads, hooks the call left) and how much CPU the process's other Python threads spent between the last output's
  copy and this call's start, where an honest kernel's threads are idle: the parent, not this process, decides
  whether that is tampering.

What the kernel does inside its call is its own business: that is timed, and its output is checked.
"""

from __future__ import annotations

import struct
from json.encoder import c_encode_basestring_ascii as json_string  # C: a str as a JSON string literal

from .output_copy import output_objects, output_values, taker

# Parent -> frame: magic, serial, op, clock, copy, the GPU wait's most cycles, null-tail cycles, its least (36 bytes).
COMMAND = struct.Struct("<4sIBBHqqq")
MAGIC = b"JCAL"
OP_CALL, OP_RELEASE, OP_STOP = 1, 2, 3
CLOCKS = {"none": 0, "gpu": 1, "call": 2, "host": 3}
OK, RAISED, BAD_OUTPUT = 0, 1, 2
MAX_DIMS = 8
ERROR_CHARS = 2000
# Bytes of results the frame keeps (outside its inputs) before it asks the parent for a release: on a GPU, the
# growth of torch's allocated memory since the stretch began, which counts what hangs on the outputs (an autograd
# graph holds every activation: a small output can keep gigabytes), elsewhere the outputs' own bytes.
KEEP_BYTES = 256 << 20
# The dtypes an output may have; the index travels in the reply.
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2", "int8", "uint8",
               "int16", "int32", "int64", "bool", "complex64", "complex128", "float4_e2m1fn_x2", "uint16",
               "uint32", "uint64", "float8_e8m0fnu")
# The operators the frame's copy dispatches: a kernel of the candidate's registered for one would run here.
COPY_OPERATORS = ("aten::copy_", "aten::as_strided", "aten::view.dtype", "aten::slice.Tensor")
_HEAP_TYPE = 1 << 9


def command(serial: int, op: int, clock: str = "none", copy: int = 0, spin_cycles: int = 0,
            null_cycles: int = 0, least_cycles: int = 0) -> bytes:
    """One record for the frame (the parent's side): `least_cycles` to `spin_cycles` of judge.boundary.gpu_wait."""
    return COMMAND.pack(MAGIC, serial, op, CLOCKS[clock], copy, spin_cycles, null_cycles, least_cycles)


class Primitives:
    """The C-level callables and types the frame uses, bound by the runner before the kernel is imported."""

    def __init__(self):
        import _thread
        import _signal  # the C module: signal.pthread_sigmask is a Python wrapper around it
        import builtins
        import gc
        import os
        import signal
        import sys
        import time

        import torch

        tb = torch._C.TensorBase
        monitoring = getattr(sys, "monitoring", None)
        self.values = {
            "read": os.read, "write": os.write, "unpack": COMMAND.unpack, "perf": time.perf_counter,
            "setprofile": sys.setprofile, "settrace": sys.settrace, "getprofile": sys.getprofile,
            "gettrace": sys.gettrace, "gc_disable": gc.disable, "gc_enable": gc.enable, "gc_isenabled": gc.isenabled,
            "sigmask": _signal.pthread_sigmask, "frames": sys._current_frames, "len": len, "list": list, "type": type,
            "tuple": tuple, "dict": dict, "reversed": reversed, "slice": slice, "range": range, "zip": zip,
            "str": str, "hash": hash, "max": max, "base_exception": BaseException, "cpu_ns": time.clock_gettime_ns,
            "clock_of": time.pthread_getcpuclockid, "ident": _thread.get_ident,
            "getsignal": _signal.getsignal, "setsignal": _signal.signal,
            "json_str": json_string,
            "modes_f": torch._C._len_torch_function_stack, "modes_d": torch._C._len_torch_dispatch_stack,
            "dump": torch._C._dispatch_dump, "size": tb.size, "stride": tb.stride,
            "element_size": tb.element_size, "dtype": tb.dtype.__get__, "is_cuda": tb.is_cuda.__get__,
            "layout": tb.layout.__get__, "is_conj": tb.is_conj, "is_neg": tb.is_neg, "copy_": tb.copy_,
            "as_strided": tb.as_strided, "view": tb.view, "getitem": tb.__getitem__, "join": b", ".join,
            "mon_get": monitoring.get_tool if monitoring else None,
            "mon_set": monitoring.set_events if monitoring else None,
            "mon_local": monitoring.set_local_events if monitoring else None,
            **output_values(),
        }
        self.objects = {"tensor": torch.Tensor, "strided": torch.strided, "sig_block": signal.SIG_BLOCK,
                        "sig_setmask": signal.SIG_SETMASK,
                        "dtypes": tuple(getattr(torch, name, None) for name in DTYPE_NAMES),
                        **output_objects(json_string)}
        self.blocked = frozenset(signal.valid_signals()) - {signal.SIGUSR1, signal.SIGKILL, signal.SIGSTOP}
        # Every signal's handler as it was before the kernel was imported: the frame sets any other to SIG_IGN.
        self.signals = tuple(sorted(frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}))
        self.handlers = tuple(_signal.getsignal(number) for number in self.signals)
        self.objects["sig_ign"] = _signal.SIG_IGN  # the C module's own object: signal.SIG_IGN is an enum it refuses
        # Python's builtins as they were before the kernel's import. The frame looks none up, but one the kernel
        # replaces stays for the kernel's own next call (a hook there can finish the last output late): no honest
        # kernel replaces one, so each reply names any that changed, the crash's too. They are compared before the
        # first wait that lets another thread run: a library's thread that calls the hook while the frame waits for
        # the GPU puts them back (an H200, 2026-11-29: the FP8 kernel's next call then crashed on a hooked `str`).
        self.objects["builtins"], self.objects["missing"] = builtins.__dict__, object()
        self.builtins = tuple(builtins.__dict__.items())
        self.cuda = torch.cuda.is_available()
        if self.cuda:
            event = torch._C._CudaEventBase
            self.values.update(sync=torch._C._cuda_synchronize, sleep=torch._C._cuda_sleep, record=event.record,
                               elapsed=event.elapsed_time, ev_sync=event.synchronize,
                               mem_stats=torch._C._cuda_memoryStats, get_device=torch._C._cuda_getDevice)
        self.digest = dispatch_digest(self.values["dump"])
        self.wait = None

    def bind_wait(self, wait) -> None:
        """judge.boundary.gpu_wait's wait (or None), and the C-level reads the frame checks its objects by."""
        from .gpu_wait import frame_primitives

        self.wait, (values, objects) = wait, frame_primitives(wait) if wait is not None else ({}, {})
        self.values.update(values)
        self.objects.update(objects)


def dispatch_digest(dump) -> int:
    """A hash of what the dispatcher runs for the operators the frame's copy uses."""
    return hash(tuple(dump(name) for name in COPY_OPERATORS))


def not_c_level(values: dict) -> list[str]:
    """The names among `values` whose value is not C code: a Python function there could be a hook."""
    import types

    c_types = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
               types.MethodWrapperType, types.ClassMethodDescriptorType)
    return sorted(name for name, value in values.items()
                  if value is not None and type(value) not in c_types
                  and not (type(value) is type and not value.__flags__ & _HEAP_TYPE))


def serve_calls(prims: Primitives, cmd_fd: int, reply_fd: int, kernel, datas: list, outboxes: dict,
                events: tuple, stream, workspace: str, threads_before: int | None, entered_serial: int,
                remake=None) -> dict:
    """Answer call records until the parent says stop; returns what the stretch saw (for the JSON reply).
    `remake(copy)`: the copy's data made again, called after each call on it and before the reply, while the next
    input set is not yet written in (None: data with no object whose state a call changes).

    `outboxes`: area ("device" or "host") -> (a uint8 tensor over that outbox, its capacity in bytes).
    `threads_before`: the Python threads no call may add to, or None where new threads are not counted."""
    v, o = prims.values, prims.objects
    replaced = not_c_level(v)
    if replaced or o["tensor"].__flags__ & _HEAP_TYPE == 0:
        return {"entered": False, "found": [f"judge's primitives in this process were replaced ({', '.join(replaced)})"]}
    read, write, unpack, perf, join, encode = v["read"], v["write"], v["unpack"], v["perf"], v["join"], v["encode"]
    setprofile, settrace, getprofile, gettrace = v["setprofile"], v["settrace"], v["getprofile"], v["gettrace"]
    gc_disable, sigmask, frames = v["gc_disable"], v["sigmask"], v["frames"]
    mon_get, mon_set, mon_local = v["mon_get"], v["mon_set"], v["mon_local"]
    modes_f, modes_d, dump, hash_, length = v["modes_f"], v["modes_d"], v["dump"], v["hash"], v["len"]
    tuple_, range_, base_exception = v["tuple"], v["range"], v["base_exception"]
    cuda = prims.cuda
    sync, sleep, record = v.get("sync"), v.get("sleep"), v.get("record")
    elapsed, ev_sync = v.get("elapsed"), v.get("ev_sync")
    start_ev, stream_end_ev, end_ev = events if cuda else (None, None, None)
    blocked, sig_block, sig_setmask = prims.blocked, o["sig_block"], o["sig_setmask"]
    operators, digest_before, keep_limit = COPY_OPERATORS, prims.digest, KEEP_BYTES
    code = serve_calls.__code__
    cpu_ns, clock_of, own = v["cpu_ns"], v["clock_of"], v["ident"]()
    getsignal, setsignal, sig_ign, zip_ = v["getsignal"], v["setsignal"], o["sig_ign"], v["zip"]
    signals, handlers = prims.signals, prims.handlers

    def others_cpu(frames, own, clock_of, cpu_ns, base_exception, before):
        """(CPU ns the process's other Python threads spent since `before`, their CPU ns now): a thread new since
        then counts all of its time. Native threads (CUDA's, OpenMP's) are not Python threads and not counted:
        on an H200 they spent 0.2-0.35 ms between an honest kernel's calls (2026-11-25)."""
        spent, now = 0, {}
        for ident in frames():
            if ident != own:
                try:
                    ns = cpu_ns(clock_of(ident))
                except base_exception:
                    continue
                now[ident] = ns
                earlier = before.get(ident, 0)
                spent += ns - earlier if ns >= earlier else ns
        return spent, now

    def handlers_off(getsignal, setsignal, sig_ign, zip_, signals, handlers):
        """Set SIG_IGN for each signal whose handler is not the one from before the kernel's import: a Python
        handler runs in this thread at any bytecode boundary once any thread of the process takes its signal."""
        for number, handler in zip_(signals, handlers):
            if getsignal(number) is not handler:
                setsignal(number, sig_ign)

    def builtins_replaced(dict_get, now, then, missing):
        """The names of the builtins replaced or removed since before the kernel's import."""
        names = []
        for name, value in then:
            if dict_get(now, name, missing) is not value:
                names.append(name)
        return names

    def monitoring_off(mon_get, mon_set, mon_local, code, range_):
        on = 0
        if mon_get is not None:
            for tool in range_(6):
                if mon_get(tool) is not None:
                    on += 1
                    mon_set(tool, 0)
                    mon_local(tool, code, 0)
        return on

    def threads_now(frames, length, str_, workspace, code):
        """(Python threads, the first place a thread other than this frame's runs the kernel's code, or '')."""
        current = frames()
        count, where = length(current), ""
        for frame in current.values():
            depth = 0
            while frame is not None and depth < 64 and not where:
                name = frame.f_code.co_filename
                if name.startswith(workspace) and frame.f_code is not code:
                    where = name[length(workspace):] + ":" + str_(frame.f_lineno)
                frame = frame.f_back
                depth += 1
            if where:
                break
        # the dict holds this function's own frame: kept, that cycle would keep every caller's frame and its locals
        # (the last call's output, and what hangs on it) alive until a collection (trimul's 38.5 GiB, 2026-11-29)
        current = frame = None
        return count, where

    take = taker(v, o)
    was_enabled = v["gc_isenabled"]()
    old_mask = sigmask(sig_block, blocked)
    handlers_off(getsignal, setsignal, sig_ign, zip_, signals, handlers)
    gc_disable()
    found = []
    if getprofile() is not None or gettrace() is not None:
        found.append("a profile or trace function is set (sys.setprofile, sys.settrace)")
    setprofile(None)
    settrace(None)
    if monitoring_off(mon_get, mon_set, mon_local, code, range_):
        found.append("a sys.monitoring tool is registered")
    counted = threads_before is not None
    threads, where = threads_now(frames, length, v["str"], workspace, code)
    if counted and threads > threads_before:
        found.append(f"{threads - threads_before} Python thread(s) started by the kernel are alive")
    if where:
        found.append(f"a thread runs the kernel's code ({where})")
    if modes_f() or modes_d():
        found.append("a torch function or dispatch mode is active")
    dict_get, builtins_now, builtins_then, missing = v["dict_get"], o["builtins"], prims.builtins, o["missing"]
    swapped = builtins_replaced(dict_get, builtins_now, builtins_then, missing)
    if swapped:
        found.append(", ".join(["builtins." + name for name in swapped]) + " replaced since before the kernel's import")
    if hash_(tuple_([dump(name) for name in operators])) != digest_before:
        found.append("the kernel registered a kernel of its own for an operator judge's copy uses")
    kept, kept_bytes, calls = [], 0, 0
    max_ = v["max"]
    if cuda:
        mem_stats, device = v["mem_stats"], v["get_device"]()

        def allocated():  # torch's allocated bytes now, through the primitive bound before the kernel's import
            return mem_stats(device)["allocated_bytes"]["all"]["current"]

        held_before = allocated()
    wait, wait_changed, record_size = prims.wait if cuda else None, 0, COMMAND.size
    if wait is not None:  # judge.boundary.gpu_wait's: its ctypes objects as bound, the stream's as set for this stretch
        c_call, tobytes, c_int, launch, page = v["c_call"], v["tobytes"], o["c_int"], o["wait_launch"], o["wait_page"]
        errcheck_of, argtypes_of, restype_of, pins = v["errcheck_of"], v["argtypes_of"], v["restype_of"], o["wait_pins"]
        wait_args, held = o["wait_args"], o["wait_held"][:2] + (tobytes(pins[2]),) + o["wait_held"][3:]
    json_str = v["json_str"]
    write(reply_fd, b'{"serial": %d, "ok": true, "value": {"entered": true, "found": [%s]}}\n'
          % (entered_serial, ", ".join(json_str(f) for f in found).encode()))
    # CPU time of the process's other threads (exited ones included) since the last call's output was copied:
    # between calls the runner is stopped or in this loop, so an honest kernel's threads spend none of it.
    others_mark = others_cpu(frames, own, clock_of, cpu_ns, base_exception, {})[1]
    try:
        while True:
            raw = read(cmd_fd, record_size)
            if length(raw) != record_size:
                return {"calls": calls, "ended": "the command pipe closed"}
            magic, serial, op, clock, copy, spin, null_cycles, least = unpack(raw)
            received = perf()  # the phases of the call, for the parent's tally: shown, never trusted
            if magic != b"JCAL" or op == 3:
                return {"calls": calls, "ended": "stop" if op == 3 else "a record judge did not send"}
            if op == 2:
                kept, kept_bytes = [], 0  # finalizers run here: the outbox was read and nothing is staged
                if cuda:
                    held_before = allocated()
                write(reply_fd, b'{"serial": %d, "ok": true, "value": {"released": true}}\n' % serial)
                continue
            data = datas[copy]
            null, tail, raised = -1.0, 0.0, None
            if clock == 1:  # gpu: the launch hidden behind a wait, events on the stream; the tail after a sync
                sync()
                if null_cycles:
                    sleep(null_cycles)
                    record(stream_end_ev, stream)
                    sync()
                    record(end_ev, stream)
                    ev_sync(end_ev)
                    null = elapsed(stream_end_ev, end_ev) * 1e3
                armed = wait is not None  # the wait, where nothing its launch reads was changed; else the spin
                if armed:
                    armed = tuple_([tobytes(pin) for pin in pins]) == held and errcheck_of(launch) is None and \
                        argtypes_of(launch) is None and restype_of(launch) is c_int
                    wait_changed |= not armed
                    page[1], page[2], page[3] = serial, least, spin  # gpu_wait's CODE, LEAST and MOST words
                    armed = armed and c_call(launch, *wait_args) == 0
                if not armed:
                    sleep(spin)
                between = others_cpu(frames, own, clock_of, cpu_ns, base_exception, others_mark)[0]
                record(start_ev, stream)
                h0 = perf()
                try:
                    out = kernel(data)
                except base_exception as error:  # the kernel's exception is its verdict
                    out, raised = None, error
                h1 = perf()
                record(stream_end_ev, stream)
                hooks = (getprofile() is not None) + 2 * (gettrace() is not None)
                setprofile(None)
                settrace(None)
                gc_disable()
                swapped = builtins_replaced(dict_get, builtins_now, builtins_then, missing)
                sigmask(sig_block, blocked)
                handlers_off(getsignal, setsignal, sig_ign, zip_, signals, handlers)
                if wait is not None:  # the call's launches are in: the wait ends (gpu_wait's FLAG, read over the bus)
                    page[0] = serial
                try:
                    sync()
                    record(end_ev, stream)
                    ev_sync(end_ev)
                    us = elapsed(start_ev, stream_end_ev) * 1e3
                    tail = elapsed(stream_end_ev, end_ev) * 1e3
                except base_exception as error:  # the kernel's GPU work faulted: CUDA says so at the next sync
                    out, raised = None, raised or error
            elif cuda:  # call clock, or a correctness call on a GPU: the GPU idle, events around everything
                sync()
                between = others_cpu(frames, own, clock_of, cpu_ns, base_exception, others_mark)[0]
                record(start_ev, stream)
                # The driver may hold a recorded event back until the next launch: host work before the kernel's
                # first launch (a 40 us busy loop on the H100) then fell outside the interval. Waiting for the start
                # event makes it a time stamp of now.
                ev_sync(start_ev)
                h0 = perf()
                try:
                    out = kernel(data)
                except base_exception as error:
                    out, raised = None, error
                h1 = perf()
                hooks = (getprofile() is not None) + 2 * (gettrace() is not None)
                setprofile(None)
                settrace(None)
                gc_disable()
                swapped = builtins_replaced(dict_get, builtins_now, builtins_then, missing)
                sigmask(sig_block, blocked)
                handlers_off(getsignal, setsignal, sig_ign, zip_, signals, handlers)
                try:
                    sync()
                    record(end_ev, stream)
                    ev_sync(end_ev)
                    us = elapsed(start_ev, end_ev) * 1e3
                except base_exception as error:  # the kernel's GPU work faulted: CUDA says so at the next sync
                    out, raised = None, raised or error
            else:  # the host clock, or a correctness call on a CPU
                between = others_cpu(frames, own, clock_of, cpu_ns, base_exception, others_mark)[0]
                h0 = perf()
                try:
                    out = kernel(data)
                except base_exception as error:
                    out, raised = None, error
                hooks = (getprofile() is not None) + 2 * (gettrace() is not None)
                setprofile(None)
                settrace(None)
                gc_disable()
                sigmask(sig_block, blocked)
                handlers_off(getsignal, setsignal, sig_ign, zip_, signals, handlers)
                h1 = perf()
                us = (h1 - h0) * 1e6
                swapped = builtins_replaced(dict_get, builtins_now, builtins_then, missing)
            synced = perf()
            monitored = monitoring_off(mon_get, mon_set, mon_local, code, range_)
            calls += 1
            kept.append(out)
            modes = modes_f() + 2 * modes_d()
            digest = hash_(tuple_([dump(name) for name in operators]))
            # not copied where a mode or kernel is active: the parent names it
            leaves, structure, problem, extra = b"", b"null", "", 0
            if raised is None:
                try:
                    if not modes and digest == digest_before:
                        leaves, structure, problem, extra = take(out, outboxes)
                    if cuda:
                        sync()
                except base_exception as error:  # a fault of the kernel's GPU work that surfaced in the copy
                    raised = error
            taken = perf()
            if raised is None and remake is not None:
                try:
                    datas[copy] = remake(copy)
                except base_exception as error:  # the kernel changed what its objects are made from
                    raised = error
            if raised is not None:  # the kernel's error, or its GPU work's fault: its verdict is a crash
                kept.append(raised)  # what the call left set is named with it: a hook that broke judge is tampering
                write(reply_fd, b'{"serial": %d, "ok": true, "value": {"status": 1, "raised": true, "modes": %d, '
                      b'"hooks": %d, "monitoring": %d, "dispatch_changed": %d, "builtins": [%s]}}\n'
                      % (serial, modes, hooks, monitored, digest != digest_before,
                         join([encode(json_str(name)) for name in swapped])))
                return {"calls": calls, "ended": "the kernel raised", "error": raised}
            out = None  # the kept list alone holds it, so that a release frees it before the next call runs
            kept_bytes += extra
            if cuda:
                kept_bytes = max_(kept_bytes, allocated() - held_before)
            threads, where = threads_now(frames, length, v["str"], workspace, code)
            others_mark = others_cpu(frames, own, clock_of, cpu_ns, base_exception, {})[1]
            replied = perf()
            write(reply_fd, b'{"serial": %d, "ok": true, "at": [%a, %a], "value": {"status": %d, "us": %a, '
                  b'"tail_us": %a, "host_us": %a, "null_tail_us": %a, "leaves": [%s], "structure": %s, "problem": %s, '
                  b'"modes": %d, "hooks": %d, "monitoring": %d, "dispatch_changed": %d, "threads": %d, '
                  b'"thread_in_kernel": %s, "others_cpu_us": %a, "release": %d, "builtins": [%s], "wait_changed": %d, '
                  b'"phases_us": '
                  b'{"before the call": %a, "the call and its syncs": %a, "the checks and the output copy": %a, '
                  b'"the rest": %a}}}\n'
                  % (serial, received, replied, 2 if problem else 0, us, tail, (h1 - h0) * 1e6, null, leaves,
                     structure, json_str(problem).encode(), modes, hooks, monitored, digest != digest_before,
                     threads - threads_before if counted else 0, json_str(where).encode(), between / 1e3,
                     kept_bytes > keep_limit, join([encode(json_str(name)) for name in swapped]), wait_changed,
                     (h0 - received) * 1e6, (synced - h0) * 1e6, (taken - synced) * 1e6, (replied - taken) * 1e6))
    finally:
        sigmask(sig_setmask, old_mask)
        if was_enabled:
            v["gc_enable"]()
