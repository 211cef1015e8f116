"""Where judge's processes spend their time, for a device run (scripts/device_parity.sh with SAMPLE=1): never
part of a contest. Put this directory first on PYTHONPATH, set JUDGE_SAMPLE_DIR for judge's CLI and create
/tmp/judge_sample_on for the processes judge starts with an environment of their own (its oracle and runners, a
forked spare's too): each samples its main thread's stack every 5 ms and rewrites, every 5 s, the count of each
stack as `frame;frame;... count` lines to sample-<role>-<pid>.txt, in JUDGE_SAMPLE_DIR where it has it, else in
its working directory (a runner's workspace or scratch, the only places it may write). A runner's sampling thread
starts before the runner confines itself, so Landlock does not hold for it: diagnostics only."""

import os
import sys

PERIOD_S = 0.005
FLUSH_S = 5.0


def _role():
    try:
        args = [a.decode(errors="replace") for a in open("/proc/self/cmdline", "rb").read().split(b"\0") if a]
    except OSError:
        return None
    if "judge.sandbox.child" in args and "serve" in args:
        try:
            import json

            return json.load(open(args[-1])).get("role")
        except (OSError, ValueError):
            return None
    if "judge.sandbox.forkserver" in args:
        return "forkserver"
    if any(a == "judge" or a.endswith("/judge") or a.startswith("judge.cli") for a in args) and "run" in args:
        return "cli"
    return None


def _start(out, role):
    import threading
    import time
    from collections import Counter

    main = threading.main_thread().ident
    counts = Counter()
    name = f"sample-{role}-{os.getpid()}.txt"
    began = time.monotonic()

    def stack(frame):
        parts = []
        while frame is not None and len(parts) < 60:
            code = frame.f_code
            parts.append(f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})")
            frame = frame.f_back
        return ";".join(reversed(parts))

    def loop():
        last = time.monotonic()
        while True:
            time.sleep(PERIOD_S)
            frame = sys._current_frames().get(main)
            if frame is not None:
                counts[stack(frame)] += 1
            if time.monotonic() - last < FLUSH_S:
                continue
            last = time.monotonic()
            path = os.path.join(out or os.getcwd(), name)
            try:
                with open(path + ".part", "w") as f:
                    f.write(f"# wall {last - began:.1f} s, one sample every {PERIOD_S * 1e3:.0f} ms\n")
                    f.writelines(f"{k} {n}\n" for k, n in counts.most_common())
                os.replace(path + ".part", path)
            except OSError:
                pass

    threading.Thread(target=loop, daemon=True, name="judge-sample").start()


_out = os.environ.get("JUDGE_SAMPLE_DIR")
if _out or os.path.exists("/tmp/judge_sample_on"):
    _r = _role()
    if _r == "forkserver":  # its spares are forked: each starts sampling as it is forked
        os.register_at_fork(after_in_child=lambda: _start(None, "forked"))
    elif _r in ("cli", "oracle", "runner"):
        _start(_out, _r)
