"""The oracle's side of the exchange (judge.boundary.exchange): the memory it writes runners' inputs into, and how it
reads an output back.

An `Area` lays out one piece of data in as many copies as the timed calls take in turn. Its host part lives in
each runner's own file; its device part in each runner's own device memory, which the runner allocates when it
builds the area and the oracle maps (`RunnerFiles.bind`): a kernel reads its inputs from memory of its own process,
as it would in GPU MODE's eval.py (judge.boundary.cuda_ipc says what reading mapped memory cost). Before a call the
oracle writes one input set into the copy the call takes, in the memory of the runner that calls, fills its
floating output slots with NaN and, on the GPU timing path, writes its own buffer that empties L2; after a call it
reads that runner's outboxes (its host file, and on a GPU the tail of its device memory), zeroing what it read. No
runner maps another runner's memory or files, so nothing a kernel leaves in its own reaches the other kernel of its
pair.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import callframe, cuda_ipc, exchange, host_area, output_copy, tensors

# An output may take this many times the reference's bytes (a wider dtype, padding) before it is refused: the size
# of a runner's host outbox. It was 4: for a 4 GiB output that is a 16 GiB outbox, which helped the oracle run out of
# an 80 GB H100's memory. A runner's device outbox holds the reference's bytes once; a larger output's tensors go to
# the host outbox instead (judge.boundary.output_copy), so that the pair's two device outboxes hold what the
# oracle's one shared outbox held before, twice the output.
OUTBOX_FACTOR = 2
OUTBOX_MIN_BYTES = 1 << 20


@dataclass
class RunnerFiles:
    """A runner's host files (inputs in, outputs out) and, on a GPU, its device memory for inputs as mapped here."""

    inbox: host_area.HostFile
    outbox: host_area.HostFile
    device: cuda_ipc.Imported | None = None
    device_handle: str = ""
    device_wanted: int = 0  # the bytes the last plan asked the runner to have
    outbox_at: int = 0  # where in that memory the last plan put the runner's device outbox
    outbox_bytes: int = 0  # and its size (0: outputs go to the host file alone)

    def want_device(self, nbytes: int, at_least: int = 0) -> int:
        """The runner is asked for `nbytes` of device memory, or for `at_least` where what is mapped here must grow
        (Oracle.case: the largest case's so far, so that a runner allocates, and the oracle maps, once per check, not
        at each larger case); the bytes asked for. A smaller one mapped here is let go first, so that the runner may
        free it when it allocates the larger (memory another process still maps must not be freed)."""
        if nbytes and (self.device is None or self.device.nbytes < nbytes):
            nbytes = max(nbytes, at_least)
        self.device_wanted = nbytes
        if self.device is not None and self.device.nbytes < nbytes:
            self.device.close()
            self.device = None
        return nbytes

    def bind(self, handle: str | None) -> str | None:
        """Map the device memory the runner says it allocated for the plan (`handle`, its `build` reply): None, or
        what is wrong with it. A runner's process can send anything here, so the driver's own size of the
        allocation must hold every byte the plan writes: the oracle writes nothing outside it."""
        if self.device_wanted == 0:
            return None
        if self.device is not None and handle == self.device_handle:
            return None
        if self.device is not None:
            self.device.close()
            self.device = None
        if not isinstance(handle, str):
            return "the runner handed over no device memory for its inputs"
        try:
            mapped = cuda_ipc.Imported(handle)
        except cuda_ipc.IpcError as error:
            return f"the runner's device memory for its inputs could not be mapped ({error})"
        if mapped.nbytes < self.device_wanted:
            mapped.close()
            return (f"the runner handed over {mapped.nbytes} bytes of device memory for inputs that need "
                    f"{self.device_wanted}")
        self.device, self.device_handle = mapped, handle
        return None

    def close(self) -> None:
        self.inbox.close()
        self.outbox.close()
        if self.device is not None:
            self.device.close()
            self.device = None


@dataclass
class Area:
    """One piece of data laid out for the runners: its skeleton, each copy's layouts, where each lives."""

    skeleton: Any
    copies: list[list[dict]]
    host_bytes: int
    device_bytes: int  # what each runner's device memory must hold (0: no tensor on the device)
    poison: list[int]  # indices (skeleton order) of the floating output tensors
    sets: dict[Any, list] = field(default_factory=dict)  # set name -> its tensors, skeleton order
    flush: Any = None  # the oracle's L2 flush buffer (GPU timing), or None
    nans: dict[int, Any] = field(default_factory=dict)  # a NaN tensor per poisoned output, made once

    def nan(self, index: int, like):
        if index not in self.nans:
            import torch

            self.nans[index] = torch.full_like(like, float("nan"))
        return self.nans[index]


def lay_out(data, slots: list[str], copies: int, *, shift: int = 0, flush: Any = None) -> Area:
    """An Area for `data` (its tensors define the layouts), `copies` copies, every offset moved by `shift` bytes;
    `flush`: the oracle's L2 flush buffer, written before each GPU-timed call."""
    import torch

    tree, leaves = exchange.skeleton(data)
    layouts, ends = exchange.plan(leaves, copies, {exchange.DEVICE: shift, exchange.HOST: shift})
    device_bytes = exchange.aligned(ends[exchange.DEVICE]) if any(t.is_cuda for t in leaves) else 0
    paths = [path for path, leaf in tensors.leaves(data) if isinstance(leaf, torch.Tensor)]
    poison = [i for i, (path, leaf) in enumerate(zip(paths, leaves))
              if path in slots and leaf.is_floating_point()]
    return Area(tree, layouts, ends[exchange.HOST], device_bytes, poison, flush=flush)


def exported_zeroed(nbytes: int) -> cuda_ipc.Exported:
    """A new exported allocation, zeroed: memory the driver hands out again can hold what this process freed,
    the reference's answers among it."""
    exported = cuda_ipc.Exported(nbytes)
    _zero(exported)
    tensors.sync()
    return exported


def tensors_of(data) -> list:
    return exchange.skeleton(data)[1]


def plan_for(area: Area, files: RunnerFiles, outbox: dict, at_least: int = 0) -> dict:
    """What a runner's `build` is sent: the skeleton, the layouts, where the host part and the outboxes are, and how
    much device memory the runner must have for the device part and its device outbox, which follows the inputs in
    the same memory (its reply's handle then goes to `files.bind`). A runner's outbox is its own: no other runner
    maps it, so what a kernel leaves there reaches no rival, and the oracle zeroes only the spans it reads.
    `at_least`: what to ask for where the runner's memory must grow (RunnerFiles.want_device)."""
    files.inbox.reserve(area.host_bytes)
    device_out = outbox.get("device") or 0
    at = exchange.aligned(area.device_bytes)
    total = files.want_device(at + device_out if device_out else area.device_bytes, at_least)
    files.outbox_at, files.outbox_bytes = (at, device_out) if device_out else (0, 0)
    device = {"bytes": total} if total else None
    host_out = outbox["host"]
    files.outbox.reserve(host_out)
    return {"skeleton": area.skeleton, "copies": area.copies, "device": device,
            "host": {"path": str(files.inbox.path), "bytes": area.host_bytes},
            "outbox": {"device": {"offset": at, "bytes": device_out} if device_out else None,
                       "host": {"path": str(files.outbox.path), "bytes": host_out}}}


def stage(area: Area, name: Any, copy: int, files: list[RunnerFiles], flush: bool) -> None:
    """Write set `name` into copy `copy` of each runner of `files` (device and host parts alike), NaN into its
    floating output slots and, for the GPU clocks, the L2 flush buffer last."""
    values = list(area.sets[name])
    layouts = area.copies[copy]
    for index in area.poison:
        values[index] = area.nan(index, values[index])
    for value, layout in zip(values, layouts):
        for runner in files:
            if layout["area"] == exchange.DEVICE:
                if runner.device is None:
                    raise exchange.ExchangeError("a device input for a runner whose device memory is not mapped")
                cuda_ipc.view(runner.device.pointer, layout).copy_(value)
            else:
                runner.inbox.write(layout, value)
    if flush and area.flush is not None:
        area.flush.zero_()
    tensors.sync()


def _zero(exported: cuda_ipc.Exported) -> None:
    cuda_ipc.view(exported.pointer, exchange.raw_layout(exported.nbytes)).zero_()


def received(leaves: Any, files: RunnerFiles | None) -> list:
    """The output a runner said it copied into its outboxes (judge.boundary.callframe's leaves), read here and checked to
    stay inside them, and each span read zeroed there at once; what is read is judged as it is. Both outboxes are
    the runner's alone (its host file, and on a GPU the tail of its own device memory), so nothing it leaves
    elsewhere in them reaches another runner."""
    if not isinstance(leaves, list) or len(leaves) > output_copy.MAX_LEAVES:
        raise exchange.ExchangeError("the kernel's process described its output in a way judge does not write")
    out = []
    for leaf in leaves:
        if not (isinstance(leaf, list) and len(leaf) == 5 and leaf[0] in (exchange.DEVICE, exchange.HOST)
                and type(leaf[1]) is int and 0 <= leaf[1] < len(callframe.DTYPE_NAMES)):
            raise exchange.ExchangeError("the kernel's process described its output in a way judge does not write")
        layout = {"area": leaf[0], "dtype": callframe.DTYPE_NAMES[leaf[1]], "offset": leaf[2], "shape": leaf[3],
                  "stride": leaf[4]}
        nbytes = exchange.span(layout["shape"], layout["stride"], exchange.itemsize(layout["dtype"]))
        if leaf[0] == exchange.DEVICE:
            if files is None or files.device is None or not files.outbox_bytes:
                raise exchange.ExchangeError("a device output without a device outbox")
            exchange.check_layout(layout, files.outbox_bytes)
            start = files.outbox_at + layout["offset"]
            out.append(cuda_ipc.view(files.device.pointer, {**layout, "offset": start}).clone())
            cuda_ipc.view(files.device.pointer, exchange.raw_layout(nbytes, start)).zero_()
        else:
            exchange.check_layout(layout, files.outbox.nbytes)
            out.append(files.outbox.read(layout))
            files.outbox.zero(layout["offset"], layout["offset"] + nbytes)
    return out


def output(leaves: Any, structure: Any, files: RunnerFiles | None, like: Any = None) -> Any:
    """The output a runner handed over, rebuilt with the nesting it described (judge.boundary.exchange's
    build_output, named tuples as `like`'s classes where their fields match): its tensors read from the outboxes
    (`received`) and moved to the device of `like`'s tensors, where the reference computed its answer."""
    import torch

    got = received(leaves, files)
    device = next((t.device for _, t in tensors.leaves(like) if isinstance(t, torch.Tensor)), None)
    if device is not None:
        got = [t.to(device) for t in got]
    return exchange.build_output(structure, got, like)


def outbox_need(expected) -> tuple[int, int]:
    """What a runner's outboxes need for outputs like `expected`: the host file's bytes (OUTBOX_FACTOR times their
    aligned spans, at least OUTBOX_MIN_BYTES) and the device outbox's (the aligned spans of those on the GPU, once)."""
    import torch

    spans = [(exchange.aligned(exchange.span(list(t.shape), list(t.stride()), t.element_size())), t.is_cuda)
             for _, t in tensors.leaves(expected) if isinstance(t, torch.Tensor)]
    host = max(OUTBOX_MIN_BYTES, OUTBOX_FACTOR * sum(n for n, _ in spans))
    return host, sum(n for n, on_device in spans if on_device)


def open_files(directory: str, owner: int | None = None) -> RunnerFiles:
    """A runner's two host files in `directory`, which judge made for it, owned by `owner` (the runner's user).
    The directory is opened component by component without following a link and must be this process's own
    and empty, and the files are made relative to it: the oracle never writes where a link someone else made
    points (host_area.open_own_directory)."""
    folder = host_area.open_own_directory(directory)
    try:
        inbox = host_area.HostFile(Path(directory) / "inbox", owner, folder)
        try:
            outbox = host_area.HostFile(Path(directory) / "outbox", owner, folder)
        except BaseException:
            inbox.close()
            raise
    finally:
        os.close(folder)
    return RunnerFiles(inbox, outbox)


