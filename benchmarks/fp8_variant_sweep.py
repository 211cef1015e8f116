"""Kernel variants of the FP8 target against each other and the peer, for exploring before pitching.

Each variant is a kernel file and knob overrides, listed in a JSON file:
    [{"name": "smem", "file": "path/to/submission.py", "knobs": {"EPILOGUE_STORE": "smem", "NUM_STAGES": 5}}, ...]
First every variant runs every test and benchmark spec of task.yml twice (fresh poison the second time) in a child
process with a 150 s limit (a hang or a wrong result drops it); then the passing ones and the peer are timed
interleaved on every benchmark (L2 flush and GPU spin before each call, CUDA events, medians), and a table of
geomean peer/ours over the four contest cases and the large case is printed.

    python benchmarks/fp8_variant_sweep.py variants.json [reps]
Needs a GPU and CuTe DSL. Not a test."""
import json, math, statistics, subprocess, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "kernels" / "fp8_group_gemm_sm90"
sys.path.insert(0, str(TARGET))
sys.path.insert(0, str(ROOT / "benchmarks"))

def load(name, path, knobs):
    from peer_fp8_group_gemm import load_module

    m = load_module(name, path)
    for k, v in knobs.items(): setattr(m, k, v)
    return m

def check_child(path, knobs):
    import torch, yaml
    ref = load("reference", TARGET / "reference.py", {})
    m = load("cand", path, knobs)
    task = yaml.safe_load((TARGET / "task.yml").read_text())
    bad = 0
    for kind in ("tests", "benchmarks"):
        for i, spec in enumerate(task[kind]):
            data = ref.generate_input(**spec)
            out = m.custom_kernel(data).clone(); torch.cuda.synchronize()
            ok, msg = ref.check_implementation(data, out)
            if not ok: bad += 1; print(f"  {kind}[{i}] WRONG {msg}", flush=True)
            # second call on fresh poison
            data[-1].fill_(float('nan')); out2 = m.custom_kernel(data); torch.cuda.synchronize()
            ok2, msg2 = ref.check_implementation(data, out2)
            if not ok2: bad += 1; print(f"  {kind}[{i}] second call WRONG {msg2}", flush=True)
            del data, out
    print("RESULT", "ok" if bad == 0 else f"{bad} wrong", flush=True)

def main():
    variants = json.loads(Path(sys.argv[1]).read_text())
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    passing = []
    for v in variants:
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, __file__, "--check", v["file"], json.dumps(v["knobs"])],
                               capture_output=True, text=True, timeout=150)
            out = p.stdout + p.stderr[-1500:]
        except subprocess.TimeoutExpired as e:
            out = f"TIMEOUT after 150 s\n{(e.stdout or b'')[-500:]}"
        ok = "RESULT ok" in out
        print(f"== {v['name']}: {'PASS' if ok else 'FAIL'} ({time.time()-t0:.0f} s)\n{out.strip()[-1200:]}", flush=True)
        if ok: passing.append(v)
    import torch, yaml
    from peer_fp8_group_gemm import peer, time_calls, bootstrap_ratio_ci, host_us_per_call
    ref = load("reference", TARGET / "reference.py", {})
    mods = [load(f"v{i}", v["file"], v["knobs"]) for i, v in enumerate(passing)]
    task = yaml.safe_load((TARGET / "task.yml").read_text())
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}; torch {torch.__version__}; {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; reps {reps}")
    table = {v["name"]: [] for v in passing}; peer_t = []
    for bi, spec in enumerate(task["benchmarks"]):
        data = ref.generate_input(**spec)
        for m in mods: m.custom_kernel(data)
        torch.cuda.synchronize()
        fns = [lambda: peer(data)] + [(lambda m=m: m.custom_kernel(data)) for m in mods]
        hosts = [host_us_per_call(fn) for fn in fns]
        print(f"[{bi}] host us/call: " + ", ".join(f"{n} {h:.0f}" for n, h in zip(["peer"] + [v["name"] for v in passing], hosts)), flush=True)
        times = time_calls(fns, reps, flush, host_us=hosts)
        mp = statistics.median(times[0]); peer_t.append(mp)
        line = [f"[{bi}] peer {mp:.1f}"]
        for v, t in zip(passing, times[1:]):
            mo = statistics.median(t); lo, hi = bootstrap_ratio_ci(t, times[0])
            table[v["name"]].append((mo, mp / mo, lo, hi))
            line.append(f"{v['name']} {mo:.1f} ({mp/mo:.3f} {lo:.3f}-{hi:.3f})")
        print("  ".join(line), flush=True)
        del data; torch.cuda.empty_cache()
    print("\n| variant | #0 | #1 | #2 | #3 | large | geomean peer/ours (4) | large peer/ours |")
    print("|---|---|---|---|---|---|---|---|")
    print("| peer | " + " | ".join(f"{t:.1f}" for t in peer_t) + " | 1.000 | 1.000 |")
    for name, rows in table.items():
        geo = math.exp(sum(math.log(r[1]) for r in rows[:4]) / 4)
        print(f"| {name} | " + " | ".join(f"{r[0]:.1f}" for r in rows) + f" | {geo:.3f} | {rows[4][1]:.3f} |")

if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check_child(sys.argv[2], json.loads(sys.argv[3]))
    else:
        main()
