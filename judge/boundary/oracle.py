"""The oracle: the trusted side of every check. It runs in a process where no candidate code was ever
imported, from a directory no candidate can write, and it alone says what the right answer is.

It makes every input a kernel is called on (the task's generate_input from secret seeds), keeps them, and
writes one set into the memory a runner maps only when that set's call is next (judge.boundary.staging); it runs the
reference, reads each output back from the runner's outbox, compares it in full (correctness) or by projections
(timing), and gives the projections of the right answers.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from . import cuda_ipc, exchange, staging, tensors
from .compare import checked_instead, checker_decides, compare_outputs, failed
from .kept_inputs import DEVICE_SHARE, KeptInputs, host_budget
from .problem_files import generator
from .slot_reads import SlotReads
from .memory import (RELEASE_ABOVE_BYTES, Collections, log_device_memory, peak_noted, ran_out,
                     release as release_cached, without_graph, working_memory)
from ..machine import facts_here, host_memory

# Shown mismatches when the target sets no tolerance (its check_implementation then decides alone).
FALLBACK_RTOL = FALLBACK_ATOL = 1e-3


@dataclass
class TimingSets:
    """A benchmark's timing input sets and what the oracle checks their calls by, each made when first needed: a
    set when it is first written in for a call, its answer's projections when that call's output is first checked.
    A kernel of a second a call runs a few calls per pair; sets it never runs on cost nothing."""

    spec: dict
    distribution: str
    seeds: list[int]  # the warm-up set's, then one per timed set
    projection_seed: int
    sets: dict[Any, Any]  # "warm" or a timed set's index -> its data
    bounds: dict[int, list[dict]]  # a timed set's index -> its answer's projection bounds
    slots: list[str]  # the output slots filled with NaN before a call (judge.boundary.slot_reads)
    projector: Any  # tensors.Projector
    output: tuple[int, int]  # the outboxes its answers need: host and device bytes (staging.outbox_need)
    held: str = ""  # the name its sets and answers are held under between pairs (Oracle.benchmark's `hold`)


class Oracle:
    """The reference of one target, loaded from a pristine copy of its files."""

    def __init__(self, directory: str, generators: dict[str, str], rtol: float | None, atol: float | None):
        sys.path[:] = [directory] + [p for p in sys.path if p not in ("", directory)]
        os.chdir(directory)
        import reference

        self.reference = reference
        self.generators = {name: generator(reference, spec) for name, spec in generators.items()}
        self.checker = getattr(reference, "check_implementation", None)
        self.rtol, self.atol = rtol, atol
        self.files: dict[int, staging.RunnerFiles] = {}
        self.areas: dict[str, staging.Area] = {}
        self.cases: dict[str, tuple] = {}  # key -> (data, expected) of a correctness case
        self.timing: dict[str, TimingSets] = {}  # a timed benchmark's key -> its sets
        self.host_outbox = staging.OUTBOX_MIN_BYTES
        self.case_device = 0  # the device bytes of the largest correctness case's plan so far
        self.kept: dict[str, TimingSets] = {}  # a benchmark's timing sets kept from one pair to the next
        self.held: dict[str, TimingSets] = {}  # a benchmark's answers (bounds, slots, outbox), without its sets
        self.flush: cuda_ipc.Exported | None = None  # the L2 flush buffer, written before each GPU-timed call
        self.unchecked: dict[str, tuple] = {}  # key -> (output, answer, inputs) of a case whose check ran out of room
        self.inputs = KeptInputs(host_budget(), DEVICE_SHARE)  # correctness inputs slower to make than to keep
        self.slot_reads = SlotReads()  # which output slots are filled with NaN before a call
        self.collections = Collections()  # the full collections after benchmarks, and what they left

    @property
    def tolerance(self) -> tuple[float, float]:
        """The tolerance outputs are held to; without one, check_implementation decides and this is for display."""
        if self.rtol is not None or self.atol is not None:
            return self.rtol or 0.0, self.atol or 0.0
        return (FALLBACK_RTOL, FALLBACK_ATOL) if self.checker is not None else (1e-5, 1e-8)

    def _generate(self, spec: dict, distribution: str):
        data = self.generators[distribution](**spec)
        tensors.sync()
        return data

    def _case_input(self, spec: dict, distribution: str):
        """A correctness case's inputs, or a timing set the round shares: a copy of the kept ones, else made now
        and kept where that pays (judge.boundary.kept_inputs: every evaluation of the round is checked on the same
        cases, and times the same sets where the round shares them)."""
        key = KeptInputs.key(spec, distribution)

        def kept(made_s: float) -> None:
            print(f"judge oracle: inputs kept for the round ({made_s:.1f} s to make; "
                  f"{self.inputs.bytes >> 20} MiB kept in all): {key}", file=sys.stderr)

        return self.inputs.made(key, lambda: self._generate(spec, distribution), kept)

    def _answered(self, data) -> tuple[Any, Any]:
        """The reference run on a copy of `data`: the copy as the reference left it, and the answer, made without
        autograd's graph and kept without it (memory.without_graph, tensors.detached)."""
        copies = [tensors.clone_data(data)]

        def fresh() -> tuple:
            copies.append(tensors.clone_data(data))
            return (copies[-1],)

        answer = tensors.detached(without_graph(self.reference.ref_kernel, copies[0], fresh=fresh))
        tensors.sync()
        return copies[-1], answer

    def _answer_and_slots(self, data, spec: dict, distribution: str) -> tuple[Any, list[str]]:
        """The answer on `data` and the output slots to fill with NaN, read off the reference's run on a copy."""
        after, expected = self._answered(data)
        slots = tensors.output_slots(data, after, expected)
        del after
        return expected, self.slot_reads.slots_to_poison(spec, distribution, data, slots, expected, self._reference_on)

    def _reference_on(self, copy) -> Any:
        """The reference's answer on `copy`, which it may write into."""
        return tensors.detached(without_graph(self.reference.ref_kernel, copy))

    def plan(self, spec: dict, distribution: str, keep: bool = False) -> dict:
        """The output slots of a spec (paths of the inputs the reference writes), its inputs' and outputs' bytes,
        its outputs' shapes and the reference's working memory beyond them (judge.stages.budget sizes timing by
        these). With `keep` (a case the round's checks make too) the input made is offered to the kept inputs."""
        import torch

        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
        made = time.perf_counter()
        data = self._generate(spec, distribution)
        making_s = time.perf_counter() - made
        input_bytes = sum(t.numel() * t.element_size() for _, t in tensors.leaves(data) if isinstance(t, torch.Tensor))
        if cuda:  # what making an input takes beyond it (cholesky_py's n=32768: a product and its transpose)
            making = torch.cuda.max_memory_allocated() - start - input_bytes
        after = tensors.clone_data(data)
        if cuda:  # from an empty cache, as a runner's first call of a benchmark has it (Runner.build)
            release_cached(always=True)
            torch.cuda.reset_peak_memory_stats()
            before, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        # with autograd as a kernel's own call has it: the runners' working memory is estimated from this peak
        expected = tensors.detached(self.reference.ref_kernel(after))
        tensors.sync()
        outputs = [t for _, t in tensors.leaves(expected) if isinstance(t, torch.Tensor)]
        output_bytes = sum(t.numel() * t.element_size() for t in outputs)
        # Without a device's allocator to ask (a CPU target), the working memory is taken as the output's size.
        work = working_memory(before, reserved, output_bytes) if cuda else output_bytes
        if keep:
            self.inputs.offer(KeptInputs.key(spec, distribution), data, making_s)
        return {"slots": tensors.output_slots(data, after, expected), "shapes": [list(t.shape) for t in outputs],
                "input_bytes": input_bytes, "output_bytes": output_bytes, "work_bytes": work,
                "making_bytes": max(0, making) if cuda else 0, "making_s": round(making_s, 4)}

    def memory(self, timing: bool = False) -> dict:
        """The memory of the device timing runs on, as it is now (the oracle's cache given back first): a GPU's, or
        the host's for a CPU target (the cgroup's limit where it is lower). For `timing`'s plan, the correctness
        inputs kept on the GPU are given back first, and none are kept there from then on (KeptInputs.leave_device):
        the plan has the device without them."""
        import torch

        freed = self.inputs.leave_device() if timing else 0
        if freed:
            print(f"judge oracle: {freed >> 20} MiB of correctness inputs and answers kept on the device given back "
                  f"for the timing's plan", file=sys.stderr)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            free, total = torch.cuda.mem_get_info()
            return {"name": torch.cuda.get_device_name(), "total": total, "free": free, "cache": RELEASE_ABOVE_BYTES}
        return host_memory()

    # ---- runners' files and the outboxes --------------------------------------------------------------

    def attach(self, runner: int, directory: str, owner: int | None = None) -> dict:
        """The host files of a new runner, in the directory judge made for it, owned by the runner's user."""
        self.detach(runner)  # a pid used again: the earlier runner with it has ended
        self.files[runner] = staging.open_files(directory, owner)
        return {"inbox": str(self.files[runner].inbox.path), "outbox": str(self.files[runner].outbox.path)}

    def detach(self, runner: int) -> None:
        files = self.files.pop(runner, None)
        if files is not None:
            files.close()

    def bind(self, runner: int, handle: str | None) -> dict:
        """Map the device memory `runner` allocated for its inputs in its last `build` (its reply's handle); the
        problem, where its process handed over none or too little, is that kernel's (staging.RunnerFiles.bind)."""
        return {"problem": self.files[runner].bind(handle)}

    def _outbox(self, expected) -> dict:
        """The outboxes' sizes for outputs like `expected`."""
        return self._outbox_for(staging.outbox_need(expected))

    def _outbox_for(self, need: tuple[int, int]) -> dict:
        """The outboxes for outputs of `need` (staging.outbox_need): the host file grown to fit, and the bytes of the
        device outbox each runner keeps after its inputs (staging.plan_for), sized for these outputs."""
        host, device = need
        self.host_outbox = max(self.host_outbox, host)
        return {"device": device, "host": self.host_outbox}

    # ---- correctness ----------------------------------------------------------------------------------

    def case(self, key: str, spec: dict, distribution: str, runner: int) -> dict:
        """Make a correctness case's inputs and answer, lay them out for `runner`; its `build` plan."""
        self.unchecked.clear()  # a case left unchecked is given up once the next one starts
        with peak_noted(f"case {key} (inputs and answer)"):
            data = self._case_input(spec, distribution)
            expected, slots = self.inputs.made("answer " + KeptInputs.key(spec, distribution),
                                               lambda: self._answer_and_slots(data, spec, distribution))
        release_cached()  # the reference's working memory, cached: the runner's call and the check need the room
        self._retire(key)
        area = staging.lay_out(data, slots, 1)
        area.sets["case"] = staging.tensors_of(data)
        self.areas[key] = area
        self.cases[key] = (data, expected)
        paths = [path for path, leaf in tensors.leaves(data) if _is_tensor(leaf)]
        # Every check of the round runs the same cases: a runner's memory is sized for the largest at its first, not
        # grown (allocated, exported, mapped here again) at each larger one. Its peak is the one that case reaches.
        plan = staging.plan_for(area, self.files[runner], self._outbox(expected), self.case_device)
        self.case_device = max(self.case_device, (plan["device"] or {}).get("bytes", 0))
        return {"plan": plan, "poisoned": [paths[i] for i in area.poison]}

    def stage(self, key: str, name: Any, copies: list[int], runners: list[int], flush: bool = False) -> dict:
        """Write set `name` of `key` into each of `copies` for `runners` (judge.boundary.staging.stage)."""
        area = self.areas[key]
        for copy in copies:
            staging.stage(area, name, copy, [self.files[r] for r in runners], flush)
        return {"staged": len(copies)}

    def verify_case(self, key: str, runner: int, leaves: Any, structure: Any = None) -> dict:
        """Compare the output `runner` handed over for case `key` (its tensors' layouts and its description,
        judge.boundary.callframe's) with the reference, ask check_implementation too, and drop the case. Without a
        description the case is only dropped."""
        data, expected = self.cases.pop(key)
        try:
            if structure is None:
                return failed("no output was handed over")
            got = staging.output(leaves, structure, self.files.get(runner), like=expected)
        except exchange.ExchangeError as error:
            return failed(str(error))
        finally:
            self._retire(key)
        return self._compared(key, got, expected, data)

    def check_again(self, key: str) -> dict:
        """The check of case `key` once more, after it ran out of device memory: the parent has closed the kernel's
        runner since, whose memory a kernel may hold as it likes (trimul's wrong variant held 62 GiB of an H200)."""
        got, expected, data = self.unchecked.pop(key)
        release_cached(always=True)
        return self._compared(key, got, expected, data)

    def _compared(self, key: str, got, expected, data) -> dict:
        try:
            with peak_noted(f"the check of {key}"):
                result = compare_outputs(got, expected, data, self.tolerance, self.rtol, self.atol, self.checker)
        except Exception as error:
            if ran_out(error):
                self.unchecked[key] = (got, expected, data)  # for check_again
            raise
        del data, expected, got
        release_cached()
        return result

    # ---- timing -----------------------------------------------------------------------------------------

    def benchmark(self, key: str, spec: dict, distribution: str, seeds: list[int], projection_seed: int,
                  copies: int, runners: list[int], shift: int = 0, flush: bool = False, keep: str = "",
                  hold: str = "", reserve: int = 0, eager: bool = False) -> dict:
        """A benchmark's timing sets for one comparison: the warm-up set (seeds[0], never timed) and a set per
        later seed, each with its answer's projections, made as they are first needed (TimingSets); the area
        `copies` copies wide. Sets asked for again under the same `keep` name with the same seeds are not made again
        (judge.stages.evaluation says when a round keeps them). Sets the round shares but the device does not keep
        are made again for each pair from host copies where that pays, and their answers' bounds are held under
        `hold` (judge.stages.seeds). `reserve`: the bytes the benchmark needs on the
        device with its sets (judge.stages.budget); `eager`: every set made now, before the runners run the
        benchmark, where making one beside their outputs would not fit, and each one answered (the runners then hold
        nothing of it). Returns each runner's `build` plan."""
        started = time.perf_counter()
        made = self.kept.get(keep) if keep else None
        if made is not None and (made.seeds != seeds or made.projection_seed != projection_seed):
            del self.kept[keep]  # other seeds: made again
            made = None
        self._make_room(reserve, keep)
        if made is None:
            made = self._timing_sets(spec, distribution, seeds, projection_seed, "" if keep else hold)
            for index in range(1, len(seeds) - 1) if eager else ():
                made.sets[index] = self._set_input(made, index)
                release_cached(always=True)
            for index in range(len(seeds) - 1) if eager else ():  # answered too, while the runners hold nothing
                self._answer(made, index)
            if keep:
                self.kept[keep] = made
        self._retire(key)
        release_cached(always=True)  # what making the sets left in torch's cache: the runners need the room
        area = staging.lay_out(made.sets["warm"], made.slots, copies, shift=shift,
                               flush=self._flush_buffer() if flush else None)
        area.sets = {name: staging.tensors_of(data) for name, data in made.sets.items()}
        self.areas[key] = area
        self.timing[key] = made
        outbox = self._outbox_for(made.output)
        plans = {str(r): staging.plan_for(area, self.files[r], outbox) for r in runners}
        log_device_memory(f"benchmark {key} laid out ({len(seeds) - 1} sets, {copies} copies)", reserve)
        return {"plans": plans, "sets": len(seeds) - 1, "copies": copies,
                "seconds": round(time.perf_counter() - started, 3)}

    def _flush_buffer(self) -> Any:
        """The buffer whose writing empties L2 before a GPU-timed call: the oracle's own, made once."""
        if self.flush is None:
            from .runner import flush_bytes

            self.flush = staging.exported_zeroed(flush_bytes())
        return cuda_ipc.view(self.flush.pointer, {"offset": 0, "dtype": "int32", "shape": [self.flush.nbytes // 4],
                                                  "stride": [1]})

    def _make_room(self, reserve: int, keep: str = "") -> bool:
        """Give back the sets kept for benchmarks other than `keep` when the device has less free than `reserve`
        (less what `keep`'s own kept sets already hold): what the plan could not see (caches of the processes beside
        the oracle) took the room, and kept sets only save time. Whether anything was given back."""
        import torch

        others = [name for name in self.kept if name != keep]
        if not others or not torch.cuda.is_available():
            return False
        own = self.kept.get(keep)
        held = _set_bytes(own) if own else 0
        free = torch.cuda.mem_get_info()[0]
        if free >= reserve - held:
            return False
        for name in others:
            del self.kept[name]
        torch.cuda.empty_cache()
        print(f"judge oracle: {free >> 20} MiB free of the {max(0, reserve - held) >> 20} MiB a benchmark needs: the "
              f"sets kept for {len(others)} other benchmarks given back, {torch.cuda.mem_get_info()[0] >> 20} MiB "
              "free now", file=sys.stderr)
        return True

    def _timing_sets(self, spec: dict, distribution: str, seeds: list[int], projection_seed: int,
                     hold: str = "") -> TimingSets:
        """The warm-up set and the first timed set made, and the first set's answer: the output slots are read off
        its reference call (on a copy), the outbox is sized from it. The other sets come when first used. Where
        the same sets were held under `hold`, their answers are known: no reference runs again."""
        made = TimingSets(spec, distribution, seeds, projection_seed, {}, {}, [], tensors.Projector(projection_seed),
                          (0, False), hold)
        known = self.held.get(hold) if hold else None
        made.sets["warm"] = self._set_input(made, "warm")
        first = made.sets[0] = self._set_input(made, 0)
        if known is not None and (known.spec, known.distribution, known.seeds, known.projection_seed) == \
                (spec, distribution, seeds, projection_seed):
            made.slots, made.output, made.bounds = known.slots, known.output, dict(known.bounds)
            return made
        answer, made.slots = self._answer_and_slots(first, spec, distribution)
        made.output = staging.outbox_need(answer)
        made.bounds[0] = made.projector.bounds(answer, *self.tolerance)
        return made

    def _set_input(self, made: TimingSets, which: Any) -> Any:
        """Timing set `which` ("warm" or a timed set's index) of `made`: made from its seed, or, where the round
        shares its sets (`made.held`), a copy of the one kept in host memory (made and kept now where that pays)."""
        seed = made.seeds[0] if which == "warm" else made.seeds[which + 1]
        spec = _with_seed(made.spec, seed)
        if made.held:
            return self._case_input(spec, made.distribution)
        return self._generate(spec, made.distribution)

    def _timing_set(self, key: str, index: int) -> list:
        """The tensors of timed set `index` of `key`, made now if this is its first use."""
        area, made = self.areas[key], self.timing[key]
        if index not in area.sets:
            if index not in made.sets:
                made.sets[index] = self._set_input(made, index)
                release_cached()  # what making it took: the plan counts it only while a set is made
            area.sets[index] = staging.tensors_of(made.sets[index])
        return area.sets[index]

    def _bounds(self, key: str, index: int) -> list[dict]:
        """The projection bounds of timed set `index`'s answer, computed on a copy of the set at its first check."""
        return self._answer(self.timing[key], index)

    def _answer(self, made: TimingSets, index: int) -> list[dict]:
        if index not in made.bounds:
            with peak_noted(f"the answer to timed set {index} of {made.spec}"):
                _, answer = self._answered(made.sets[index])
            made.bounds[index] = made.projector.bounds(answer, *self.tolerance)
            del answer
            release_cached()  # the copy, the answer and the reference's working memory: only while answering
        return made.bounds[index]

    def turn(self, key: str, verify: dict | None = None, stage: dict | None = None) -> dict:
        """One step between two timed calls: check the output of the call that just ran (`verify`: runner, set,
        copy and the leaves it reported), then write the next call's set (`stage`) into the memory of the runner
        that calls next."""
        out: dict[str, Any] = {"problem": None}
        if verify is not None:
            out["problem"] = self._check_timed(key, verify)
        if stage is not None:
            self._timing_set(key, stage["set"])
            self.stage(key, stage["set"], [stage["copy"]], stage["runners"], stage.get("flush", False))
        return out

    def _check_timed(self, key: str, verify: dict) -> str | None:
        """What is wrong with a timed call's output (`verify`: runner, set, leaves and structure), or None: its
        projections and numbers against the reference's answer for that set, and where those are far and the
        problem's checker decides, the checker on that set (compare.checked_instead)."""
        want = self._bounds(key, verify["set"])
        try:
            got = staging.output(verify["leaves"], verify.get("structure"), self.files.get(verify["runner"]))
        except exchange.ExchangeError as error:
            return str(error)
        made = self.timing[key]
        problem = tensors.projection_failure(made.projector.project(got, order=[w["path"] for w in want]), want)
        if problem and checker_decides(self.rtol, self.atol, self.checker):
            with peak_noted(f"the checker on timed set {verify['set']} of {key} (its projections were far)"):
                problem = checked_instead(problem, self.checker, made.sets[verify["set"]], got)
            release_cached()  # the checker's working memory
        return problem

    def release(self, key: str) -> None:
        """Forget a benchmark's sets (unless kept): torch frees them as their last reference goes, and a collection
        frees what a reference cycle still held (memory.Collections)."""
        self._retire(key)
        done = self.timing.pop(key, None)
        if done is not None and done.held:  # what its answers came to, for the next pair's same sets
            self.held[done.held] = replace(done, sets={}, projector=None)
        kept = sum(_set_bytes(made) for made in self.kept.values())
        self.collections.collect_beyond(kept, f"after benchmark {key}")

    def _retire(self, key: str) -> None:
        self.areas.pop(key, None)  # its device part is the runners' memory; they keep it for their next area

    def facts(self) -> dict | None:
        """The GPU and its clocks as this trusted process sees them (None on a CPU)."""
        facts = facts_here()
        return facts.to_dict() if facts else None


def _set_bytes(made: TimingSets) -> int:
    """The bytes of a benchmark's timing sets: what keeping them holds."""
    return sum(getattr(t, "nbytes", 0) for data in made.sets.values() for t in staging.tensors_of(data))


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _with_seed(spec: dict, seed: int) -> dict:
    return {**spec, "seed": seed} if "seed" in spec else dict(spec)
