"""CPU checks of the Hopper FP8 grouped GEMM's tile scheduler and global layouts, run by judge on every proposal.

Nothing here needs a GPU. The kernel's tile scheduler (`count_tiles`, `locate`) and its host-side `__call__`
are CuTe DSL code; the checks compile them into small host functions (`cute.compile` for sm_90a, on the
CPU) and run them there, on host buffers: the scheduler on random group sizes, and `__call__` with its
device kernel replaced by a reader that reads every element through the views `__call__` hands the
kernel. Where the device kernel's own lines matter (the N tile count, the grid-stride loop over tiles),
a check mirrors them and says so.

Contract (judge's layout-check stage): `CHECKS` is a list of `check(kernel, reference, rng) -> str`; a
check returns one line saying what it verified or raises AssertionError with one line saying what is
wrong and where.
"""

import contextlib
import inspect
import math
import os
import tempfile

import numpy as np
import torch

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.cute.nvgpu.cpasync as cpasync
from cutlass.cute.runtime import make_ptr

DEFAULT_ARCH = "sm_90a"
SENTINEL = -(2**40)  # written into output buffers first: an element never read keeps it
OUTSIDE = -(2**41)  # what an element the kernel would read from outside its input reads as here


# ---------------------------------------------------------------------------------------------------------
# Running host-side CuTe DSL code on the CPU


@contextlib.contextmanager
def _scratch_cwd():
    """cute.compile may drop files into the working directory: keep them in a temporary one."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="layout-checks-") as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(before)


def _compile_host(fn, constants, dynamic):
    """Compile for the target's arch (the DSL fixes its default arch per process) into CPU-runnable host code."""
    arch = os.environ.get("CUTE_DSL_ARCH") or DEFAULT_ARCH
    with _scratch_cwd():
        return cute.compile(fn, *constants, *dynamic, options=f"--gpu-arch {arch}")


def _run_host(fn, constants, dynamic):
    """Compile, then run on the CPU: the host code reads and writes the host buffers it is given."""
    _compile_host(fn, constants, dynamic)(*dynamic)


def _ptr(dtype, tensor: torch.Tensor):
    return make_ptr(dtype, tensor.data_ptr(), assumed_align=16)


def _gemm(kernel):
    """The kernel object as custom_kernel builds it, from the module's knobs."""
    return kernel.GroupedFp8GemmSm90(
        (kernel.TILE_M, kernel.TILE_N, kernel.TILE_K), kernel.NUM_STAGES, kernel.CLUSTER_SHAPE_MN,
        kernel.EPILOGUE_STORE)


# ---------------------------------------------------------------------------------------------------------
# 1. Tile scheduler: every element of C covered exactly once


@cute.jit
def _schedule_jit(self: cutlass.Constexpr, offs_ptr: cute.Pointer, out_ptr: cute.Pointer, total_ptr: cute.Pointer,
                  num_groups: cutlass.Int32, n: cutlass.Int32, capacity: cutlass.Int32):
    """count_tiles, then locate for every tile index, as kernel() calls them (its N tile count mirrored).

    The kernel object is named `self` on purpose: the DSL lets `self`'s jit methods run inside a dynamic
    loop, where another name is taken for a value the loop carries.
    """
    offs = cute.make_tensor(offs_ptr, cute.make_layout(num_groups))
    n_tiles = (n + self.tile_n - 1) // self.tile_n
    total = self.count_tiles(offs, num_groups, n_tiles)
    total_out = cute.make_tensor(total_ptr, cute.make_layout(1))
    total_out[0] = total
    out = cute.make_tensor(out_ptr, cute.make_layout((capacity, 4), stride=(4, 1)))
    for tile in cutlass.range(cutlass.min(total, capacity), unroll=1):
        group, row0, rows, n_tile = self.locate(offs, num_groups, n_tiles, tile)
        out[tile, 0] = group
        out[tile, 1] = row0
        out[tile, 2] = rows
        out[tile, 3] = n_tile


def _schedule(gemm, m_sizes, n, compiled):
    """(count_tiles' total, [(group, first row, rows, N tile)] per tile) from the kernel's own code.

    `compiled` holds the compiled host function: sizes are run-time arguments, so one compile serves all.
    """
    offs = torch.tensor(np.cumsum([0] + list(m_sizes))[1:], dtype=torch.int32)
    n_tiles = -(-n // gemm.tile_n)
    capacity = 2 * sum(-(-m // gemm.tile_m) + 1 for m in m_sizes) * n_tiles + 16
    out = torch.full((capacity, 4), -1, dtype=torch.int32)
    total = torch.full((1,), -1, dtype=torch.int32)
    args = (_ptr(cutlass.Int32, offs), _ptr(cutlass.Int32, out), _ptr(cutlass.Int32, total),
            cutlass.Int32(len(m_sizes)), cutlass.Int32(n), cutlass.Int32(capacity))
    if not compiled:
        compiled.append(_compile_host(_schedule_jit, (gemm,), args))
    compiled[0](*args)
    total = int(total[0])
    assert total <= capacity, f"count_tiles gives {total} tiles where the groups have at most {capacity // 2}"
    return total, [tuple(int(v) for v in row) for row in out[:total]]


def _tile_error(tile, index, starts, m_sizes, gemm, n_tiles):
    group, row0, rows, n_tile = tile
    if not 0 <= group < len(m_sizes):
        return f"tile {index} is in group {group} of {len(m_sizes)}"
    start, end = starts[group], starts[group] + m_sizes[group]
    if not 1 <= rows <= gemm.tile_m:
        return f"tile {index} (group {group}, from row {row0}) covers {rows} rows; a tile covers 1 to {gemm.tile_m}"
    if row0 < start or row0 + rows > end:
        return f"tile {index} covers rows {row0}-{row0 + rows - 1}, outside group {group}'s rows {start}-{end - 1}"
    if not 0 <= n_tile < n_tiles:
        return f"tile {index} has N tile {n_tile} of {n_tiles}"
    return None


def _schedule_error(gemm, m_sizes, n, compiled):
    """None when count_tiles/locate cover each of C's sum(M) x N elements exactly once, inside its group."""
    total, tiles = _schedule(gemm, m_sizes, n, compiled)
    starts = [int(v) for v in np.cumsum([0] + list(m_sizes))[:-1]]
    n_tiles = -(-n // gemm.tile_n)
    counts = np.zeros((sum(m_sizes), n), dtype=np.int16)
    for index, tile in enumerate(tiles):
        error = _tile_error(tile, index, starts, m_sizes, gemm, n_tiles)
        if error:
            return error
        _group, row0, rows, n_tile = tile
        counts[row0:row0 + rows, n_tile * gemm.tile_n:(n_tile + 1) * gemm.tile_n] += 1
    wrong = np.argwhere(counts != 1)
    if len(wrong):
        r, c = (int(v) for v in wrong[0])
        group = int(np.searchsorted(np.cumsum(m_sizes), r, side="right"))
        return (f"C[{r}, {c}] (group {group}) is covered {int(counts[r, c])} times by the {total} tiles of "
                f"{gemm.tile_m}x{gemm.tile_n}")
    return None


def _schedule_cases(rng, tile_m):
    """(M per group, N): the task's edge cases first (empty and 1-row groups, N tails), then random ones."""
    cases = [([1, 64, 0, 130], 128), ([17], 192), ([0, 0, 5], 8), ([tile_m - 1, tile_m, tile_m + 1], 136)]
    for _ in range(24):
        groups = rng.choice((1, 2, 3, 8, 16, 64))
        m_sizes = [rng.choice((0, 1, tile_m - 1, tile_m, tile_m + 1, rng.randint(1, 600))) for _ in range(groups)]
        cases.append((m_sizes, 8 * rng.randint(1, 128)))
    return cases


def check_tile_scheduler_coverage(kernel, reference, rng) -> str:
    """The persistent scheduler's tiles (count_tiles + locate) cover every element of C exactly once."""
    gemm = _gemm(kernel)
    cases = _schedule_cases(rng, gemm.tile_m)
    compiled = []
    for m_sizes, n in cases:
        error = _schedule_error(gemm, m_sizes, n, compiled)
        if error:
            shown = m_sizes if len(m_sizes) <= 8 else f"{len(m_sizes)} groups"
            raise AssertionError(f"M = {shown}, N = {n}: {error}")
    groups = sum(len(m) for m, _n in cases)
    return (f"tile scheduler (count_tiles, locate) covers every element of C exactly once, inside its group: "
            f"{len(cases)} problems, {groups} groups (empty, 1-row, N tails, up to 64 groups)")


# ---------------------------------------------------------------------------------------------------------
# 2. Global layouts: what the kernel's views of A, B, C and the scales read is the reference's element

# (the view: a kernel() argument, or "A"/"B" for the tensors __call__ builds its TMA atoms from; the reference
# input it must show; the permutation of that input's axes into the view's logical order)
VIEWS = (
    ("A", "a", (0, 1)),
    ("B", "b", (1, 2, 0)),
    ("mC", "c", (0, 1)),
    ("mSA", "sa", (0,)),
    ("mSB", "sb", (1, 0)),
    ("mOffs", "offs", (0,)),
)
INPUT_NAMES = ("a", "b", "sa", "sb", "offs", "c")
BITS_TYPES = {8: cutlass.Uint8, 16: cutlass.Int16, 32: cutlass.Int32}


@cute.jit
def _read_view(view: cute.Tensor, limit: cutlass.Constexpr, shape_out: cutlass.Constexpr,
               values_out: cutlass.Constexpr):
    """The view's shape and every element's raw bits, in CuTe's colexicographic order; an element whose
    offset falls outside the input's `limit` elements is not read (OUTSIDE is written instead)."""
    for mode in cutlass.range_constexpr(cute.rank(view)):
        shape_out[mode] = cute.size(view, mode=[mode])
    bits = cute.recast_tensor(view, BITS_TYPES[view.element_type.width])
    for i in cutlass.range(cutlass.min(cute.size(view), values_out.shape[0]), unroll=1):
        offset = cute.crd2idx(i, view.layout)
        values_out[i] = cutlass.Int64(OUTSIDE)
        if offset >= 0 and offset < limit:
            values_out[i] = cutlass.Int64(bits[i])


def _device_tensor(buffer: torch.Tensor):
    """A CuTe view of a host int64 buffer, made while tracing: its address is baked into the host code."""
    pointer = cute.make_ptr(cutlass.Int64, buffer.data_ptr(), cute.AddressSpace.generic, assumed_align=16)
    return cute.make_tensor(pointer, cute.make_layout(tuple(buffer.shape), stride=tuple(buffer.stride())))


class _Launch:
    """Stands in for `self.kernel(...)`: `.launch` records the grid, block and cluster."""

    def __init__(self, misc):
        self.misc = misc

    def launch(self, grid, block, cluster=(1, 1, 1), **_options):
        for slot, value in enumerate((grid[0], grid[1] * grid[2], block[0] * block[1] * block[2],
                                      cluster[0] * cluster[1] * cluster[2])):
            self.misc[slot] = value


def _data(reference, rng):
    """Small CPU inputs with an empty group; C filled with distinct bits so that its layout shows."""
    data = reference.generate_input(m=[3, 0, 70], n=24, k=48, seed=rng.randint(1, 2**31 - 1))
    a, b, sa, sb, offs, c = (t.cpu() for t in data)
    c.view(torch.int16).copy_(torch.arange(c.numel(), dtype=torch.int16).reshape(c.shape))
    return a, b, sa, sb, offs, c


def _launch_args(data, num_ctas):
    """__call__'s arguments, as custom_kernel builds them (custom_kernel itself needs a GPU to ask for SMs)."""
    a, b, sa, sb, offs, c = data
    pointers = [_ptr(dtype, t) for dtype, t in zip(
        (cutlass.Float8E4M3FN, cutlass.Float8E4M3FN, cutlass.Float32, cutlass.Float32, cutlass.Int32,
         cutlass.BFloat16), (a, b, sa, sb, offs, c))]
    sizes = [cutlass.Int32(v) for v in (a.shape[0], b.shape[1], a.shape[1], b.shape[0], num_ctas)]
    return (*pointers, *sizes, cuda.CUstream(0))


def _colex_bits(tensor: torch.Tensor, order) -> torch.Tensor:
    """Raw bits of `tensor` with its axes in `order`, flattened first-axis-fastest (CuTe's colexicographic order)."""
    width = tensor.element_size()
    bits = tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[width]).long().permute(*order)
    return bits.permute(*reversed(range(bits.dim()))).reshape(-1)


def _trace_views(gemm, data, num_ctas, buffers, misc):
    """Run the kernel's __call__ on the CPU with kernel() replaced by reads of every view it hands kernel()."""
    gmem = {}
    original = cpasync.make_tiled_tma_atom

    def recording(op, tensor, *args, **kwargs):
        gmem["B" if "A" in gmem else "A"] = tensor  # __call__ builds A's TMA atom first, then B's
        return original(op, tensor, *args, **kwargs)

    names = list(inspect.signature(type(gemm).kernel).parameters)[1:]

    def stub(*args, **kwargs):
        bound = {**dict(zip(names, args)), **kwargs, **gmem}
        for name, (limit, shape, values) in buffers.items():
            _read_view(bound[name], limit, _device_tensor(shape), _device_tensor(values))
        return _Launch(_device_tensor(misc))

    gemm.kernel = stub
    cpasync.make_tiled_tma_atom = recording
    try:
        _run_host(gemm, (), _launch_args(data, num_ctas))
    finally:
        cpasync.make_tiled_tma_atom = original
        del gemm.kernel


def _view_error(name, source, order, tensor, shape, values):
    want_shape = tuple(tensor.permute(*order).shape)
    got_shape = tuple(int(v) for v in shape[:len(want_shape)])
    if got_shape != want_shape:
        return f"the kernel's {name} view has shape {got_shape}, {source} in that order is {want_shape}"
    want = _colex_bits(tensor, order)
    bad = torch.nonzero(values[:want.numel()] != want)
    if len(bad) == 0:
        return None
    index = int(bad[0])
    coord = tuple(int(v) for v in np.unravel_index(index, want_shape, order="F"))
    if int(values[index]) == OUTSIDE:
        return f"the kernel's {name} view at {list(coord)} reaches outside {source}'s {tensor.numel()} elements"
    source_index = [0] * len(order)
    for axis, value in zip(order, coord):
        source_index[axis] = value
    return (f"the kernel's {name} view reads 0x{int(values[index]) & 0xFFFFFFFF:X} at {list(coord)}, where "
            f"{source}{source_index} holds 0x{int(want[index]) & 0xFFFFFFFF:X}")


def check_operand_layouts(kernel, reference, rng) -> str:
    """A, B, C, the row scales sa/sb and offs as the kernel's __call__ views them address the reference's elements."""
    gemm = _gemm(kernel)
    data = _data(reference, rng)
    inputs = dict(zip(INPUT_NAMES, data))
    # A cluster kernel's grid is a whole number of clusters (custom_kernel sizes it so).
    cluster_size = math.prod(gemm.cluster_shape_mn)
    num_ctas = 5 * cluster_size
    buffers = {name: (inputs[source].numel(), torch.full((4,), -1, dtype=torch.int64),
                      torch.full((inputs[source].numel() + 64,), SENTINEL, dtype=torch.int64))
               for name, source, _order in VIEWS}
    misc = torch.full((8,), SENTINEL, dtype=torch.int64)
    _trace_views(gemm, data, num_ctas, buffers, misc)
    for name, source, order in VIEWS:
        error = _view_error(name, source, order, inputs[source], *buffers[name][1:])
        assert error is None, error
    grid, grid_yz, block, cluster = (int(v) for v in misc[:4])
    assert (grid, grid_yz) == (num_ctas, 1), f"__call__ launches a grid of {grid} x {grid_yz} for num_ctas = {num_ctas}"
    assert block == gemm.num_threads, (
        f"__call__ launches {block} threads per CTA, the kernel is built for {gemm.num_threads}")
    assert cluster == cluster_size, (
        f"__call__ launches clusters of {cluster} CTAs; the kernel is built for CLUSTER_SHAPE_MN "
        f"{tuple(gemm.cluster_shape_mn)}, {cluster_size} CTAs")
    m_sizes = [int(v) for v in torch.diff(data[4], prepend=torch.zeros(1, dtype=data[4].dtype))]
    return (f"global views of A, B, C, sa, sb and offs from __call__ (M = {m_sizes}, N = {data[1].shape[1]}, "
            f"K = {data[0].shape[1]}) address exactly the reference's elements; grid and block as planned")


CHECKS = [check_tile_scheduler_coverage, check_operand_layouts]
