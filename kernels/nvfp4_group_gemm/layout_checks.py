"""CPU checks of the NVFP4 grouped GEMM's layouts and launch plan, run by judge on every proposal.

Nothing here needs a GPU. Each check reads the candidate through its module-level functions and classes
and runs the kernel's own host-side CuTe DSL code on the CPU: `cute.compile` of a small `@cute.jit` host
function that calls the kernel's layout builders with host pointers, then the compiled host code writes
the offsets or bytes those layouts address into numpy/torch buffers, which are compared with the
reference (`to_blocked`, `unpack_e2m1`, the input tensors). Where the kernel's device code is inline in
`GroupedBlockScaledGemm.kernel`, a check mirrors the few lines it needs and says so.

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

import cutlass
import cutlass.cute as cute
import cutlass.cute.runtime as cute_runtime
import cutlass.utils.blockscaled_layout as blockscaled_utils
from cutlass.cute.nvgpu import tcgen05

DEFAULT_ARCH = "sm_100a"
# Bound at import: the launch-argument check swaps the runtime module's make_ptr for a recorder.
_make_ptr = cute_runtime.make_ptr
_cute_compile = cute.compile
SENTINEL = -(2**30)  # written into output buffers first: an element the host code never wrote keeps it


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
    """Compile a @cute.jit host function for the target's arch (the DSL fixes its default arch per process)."""
    arch = os.environ.get("CUTE_DSL_ARCH") or DEFAULT_ARCH
    with _scratch_cwd():
        return _cute_compile(fn, *constants, *dynamic, options=f"--gpu-arch {arch}")


def _run_host(fn, constants, dynamic):
    """Compile, then run on the CPU: the compiled host code reads and writes the host buffers it is given."""
    _compile_host(fn, constants, dynamic)(*dynamic)


def _ptr(dtype, tensor: torch.Tensor, align=16):
    return _make_ptr(dtype, tensor.data_ptr(), cute.AddressSpace.gmem, assumed_align=align)


def _filled(shape, dtype=torch.int64):
    return torch.full(shape, SENTINEL, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------
# 1. Scale-factor layout in global memory


@cute.jit
def _sf_offsets_jit(gemm: cutlass.Constexpr, sf_dtype: cutlass.Constexpr, out_ptr: cute.Pointer,
                    cosize_ptr: cute.Pointer, rows: cutlass.Int32, k: cutlass.Int32):
    """Offset of every (row, K) of the kernel's scale view, built as the kernel builds it (dynamic sizes)."""
    base = cute.make_ptr(sf_dtype, 0, cute.AddressSpace.gmem, assumed_align=16)
    layout = gemm._scales(base, rows, k).layout
    out = cute.make_tensor(out_ptr, cute.make_layout((rows, k), stride=(k, 1)))
    for r in cutlass.range(rows, unroll=1):
        for c in cutlass.range(k, unroll=1):
            out[r, c] = cute.crd2idx((r, c, 0), layout)
    cosize = cute.make_tensor(cosize_ptr, cute.make_layout(1))
    cosize[0] = cute.cosize(layout)


def _blocked_positions(reference, rows: int, cols: int):
    """Where reference.to_blocked puts each (row, scale column): a (rows, cols) tensor, and the buffer length."""
    ids = torch.arange(1, rows * cols + 1, dtype=torch.int64).reshape(rows, cols)
    blocked = reference.to_blocked(ids)
    hits = torch.nonzero(blocked, as_tuple=True)[0]
    where = torch.full((rows * cols,), -1, dtype=torch.int64)
    where[blocked[hits] - 1] = hits
    return where.reshape(rows, cols), blocked.numel()


def _scale_shapes(rng, count=20):
    """Edge shapes first (so that a broken layout fails on the same shape whatever the seed), then random ones."""
    shapes = [(1, 256), (31, 64), (127, 256), (128, 512), (129, 320), (300, 192), (700, 7168)]
    for _ in range(count):
        shapes.append((rng.randint(1, 700), 64 * rng.randint(1, 40)))
    return shapes


def check_scale_factor_layout(kernel, reference, rng) -> str:
    """The kernel's global SFA/SFB view (`_scales`, as its TMA descriptors see it) equals to_blocked's placement."""
    gemm = kernel.GroupedBlockScaledGemm()
    vec = reference.SF_VEC_SIZE
    shapes = _scale_shapes(rng)
    compiled = None  # sizes are run-time arguments, as in the kernel: one compile serves every shape
    for rows, k in shapes:
        offsets, cosize = _filled((rows, k), torch.int32), _filled((1,), torch.int64)
        args = (_ptr(cutlass.Int32, offsets), _ptr(cutlass.Int64, cosize), cutlass.Int32(rows), cutlass.Int32(k))
        if compiled is None:
            compiled = _compile_host(_sf_offsets_jit, (gemm, kernel.SF_DTYPE), args)
        compiled(*args)
        where, length = _blocked_positions(reference, rows, math.ceil(k / vec))
        expected = where.repeat_interleave(vec, dim=1)[:, :k]
        bad = torch.nonzero(offsets.long() != expected)
        if len(bad):
            r, c = (int(v) for v in bad[0])
            raise AssertionError(
                f"{rows}x{k} operand: the kernel's scale layout puts the scale of (row {r}, K {c}) at byte "
                f"{int(offsets[r, c])}, to_blocked at byte {int(expected[r, c])}")
        if int(cosize[0]) > length:
            raise AssertionError(f"{rows}x{k} operand: the kernel's scale layout spans {int(cosize[0])} bytes, "
                                 f"to_blocked's buffer has {length}")
    ms, ks = [s[0] for s in shapes], [s[1] for s in shapes]
    return (f"scale-factor layout (GroupedBlockScaledGemm._scales) equals reference.to_blocked at every (row, K) "
            f"of {len(shapes)} shapes (M {min(ms)}-{max(ms)}, K {min(ks)}-{max(ks)})")


# ---------------------------------------------------------------------------------------------------------
# 2. Tensor-memory columns


def _tmem_cols(dtype, layout) -> int:
    """Columns a tensor-memory tensor of this layout spans, by CuTe's own rule (cosize in 32-bit columns)."""
    return tcgen05.find_tmem_tensor_col_offset(
        cute.make_tensor(cute.make_ptr(dtype, 0, cute.AddressSpace.tmem), layout))


@cute.jit
def _tmem_needs_jit(gemm: cutlass.Constexpr, kernel: cutlass.Constexpr, found: cutlass.Constexpr):
    """Columns the accumulator, SFA and SFB of one MMA tile need, from the layouts the kernel builds."""
    tiled_mma = gemm._make_tiled_mma()
    acc_shape = tiled_mma.partition_shape_C(gemm.mma_tiler[:2])
    acc_layout = tiled_mma.make_fragment_C(cute.append(acc_shape, gemm.num_acc_stages)).layout
    found["acc"] = _tmem_cols(kernel.ACC_DTYPE, acc_layout)
    sfa_smem = blockscaled_utils.make_smem_layout_sfa(tiled_mma, gemm.mma_tiler, kernel.SF_VEC_SIZE, 1)
    sfb_smem = blockscaled_utils.make_smem_layout_sfb(tiled_mma, gemm.mma_tiler, kernel.SF_VEC_SIZE, 1)
    sfa = blockscaled_utils.make_tmem_layout_sfa(
        tiled_mma, gemm.mma_tiler, kernel.SF_VEC_SIZE, cute.slice_(sfa_smem, (None, None, None, 0)))
    sfb = blockscaled_utils.make_tmem_layout_sfb(
        tiled_mma, gemm.mma_tiler, kernel.SF_VEC_SIZE, cute.slice_(sfb_smem, (None, None, None, 0)))
    found["sfa"] = _tmem_cols(kernel.SF_DTYPE, sfa)
    found["sfb"] = _tmem_cols(kernel.SF_DTYPE, sfb)


def _tmem_needs(kernel, gemm) -> dict:
    found = {}
    _compile_host(_tmem_needs_jit, (gemm, kernel, found), ())
    return found


def _tmem_verdict(kernel, gemm, need) -> str:
    """The kernel places SFA right after the accumulators and SFB right after SFA: check that plan."""
    tile = "x".join(str(v) for v in gemm.mma_tiler)
    where = f"tile {tile}, {gemm.num_acc_stages} accumulator stage(s)"
    acc, sfa, sfb, alloc = gemm.acc_tmem_cols, gemm.sfa_tmem_cols, gemm.sfb_tmem_cols, gemm.tmem_alloc_cols
    plan = tuple(kernel.tmem_columns(gemm.mma_tiler, gemm.num_acc_stages))
    assert plan == (acc, sfa, sfb, alloc), (
        f"{where}: the kernel uses columns {(acc, sfa, sfb, alloc)}, tmem_columns gives {plan}")
    sfa_at, sfb_at = acc, acc + sfa
    assert need["acc"] <= sfa_at, (f"{where}: accumulator columns 0-{need['acc'] - 1} overlap SFA, "
                                   f"which starts at column {sfa_at}")
    assert sfa_at + need["sfa"] <= sfb_at, (f"{where}: SFA columns {sfa_at}-{sfa_at + need['sfa'] - 1} overlap SFB, "
                                            f"which starts at column {sfb_at}")
    end = sfb_at + need["sfb"]
    assert end <= alloc, f"{where}: SFB columns {sfb_at}-{end - 1} run past the {alloc} allocated columns"
    assert 32 <= alloc <= 512 and alloc & (alloc - 1) == 0, (
        f"{where}: {alloc} allocated columns is not a power of two between 32 and 512")
    for name, key, have in (("accumulator", "acc", acc), ("SFA", "sfa", sfa), ("SFB", "sfb", sfb)):
        assert have == need[key], f"{where}: tmem_columns gives the {name} {have} columns, one tile needs {need[key]}"
    return (f"accumulator 0-{acc - 1}, SFA {sfa_at}-{sfb_at - 1}, SFB {sfb_at}-{end - 1} "
            f"in {alloc} allocated columns ({where})")


def _other_configs(kernel, gemm):
    """Tile shapes and accumulator stages a proposal may switch to, where the kernel accepts them."""
    keywords = inspect.signature(kernel.GroupedBlockScaledGemm).parameters
    if not {"mma_tiler_mnk", "num_acc_stages"} <= set(keywords):
        return []
    configs = []
    # N = 64 and 192 are left out: tmem_columns undercounts SFB there (CuTe rounds SFB's N up to 128).
    for tile_n in (128, 256):
        for stages in (1, 2):
            tile = (gemm.mma_tiler[0], tile_n, gemm.mma_tiler[2])
            if (tile, stages) == (tuple(gemm.mma_tiler), gemm.num_acc_stages):
                continue
            try:
                configs.append(kernel.GroupedBlockScaledGemm(mma_tiler_mnk=tile, num_acc_stages=stages))
            except ValueError:  # more than 512 columns: the kernel refuses it itself
                continue
    return configs


def check_tensor_memory_columns(kernel, reference, rng) -> str:
    """Accumulator, SFA and SFB columns lie inside the allocation, apart, sized as CuTe's tcgen05 layouts need."""
    gemm = kernel.GroupedBlockScaledGemm()
    verdict = _tmem_verdict(kernel, gemm, _tmem_needs(kernel, gemm))
    others = _other_configs(kernel, gemm)
    for other in others:
        _tmem_verdict(kernel, other, _tmem_needs(kernel, other))
    return f"tensor memory: {verdict}; {len(others)} other tile/stage configurations also fit"


# ---------------------------------------------------------------------------------------------------------
# 3. Launch plan: every output element of every group covered exactly once


def _coverage_error(sizes, tile_mn, cta_work):
    """None when the CTAs' tiles cover each group's M x N output exactly once, else a one-line description."""
    tile_m, tile_n = tile_mn
    counts = [np.zeros((m, n), dtype=np.int16) for (m, n, *_rest) in sizes]
    for index, (group, m_tile, n_tile) in enumerate(cta_work):
        if not 0 <= group < len(sizes) or m_tile < 0 or n_tile < 0:
            return f"CTA {index} has work (group {group}, M tile {m_tile}, N tile {n_tile}) outside the problem"
        # Tiles past a group's edge (cluster padding) store nothing: the epilogue clips at M and N.
        counts[group][m_tile * tile_m:(m_tile + 1) * tile_m, n_tile * tile_n:(n_tile + 1) * tile_n] += 1
    for group, count in enumerate(counts):
        wrong = np.argwhere(count != 1)
        if len(wrong):
            r, c = (int(v) for v in wrong[0])
            m, n = count.shape
            return (f"group {group} of {len(sizes)} (M={m}, N={n}): output element ({r}, {c}) is covered "
                    f"{int(count[r, c])} times by {tile_m}x{tile_n} tiles ({len(cta_work)} CTAs launched)")
    return None


def _plan_cases(rng, tile_k, n_step):
    """Group lists: a fixed edge case first (empty and 1-row groups, N tails), then random ones, many groups."""
    cases = [[(1, n_step, tile_k), (0, 128, tile_k), (129, 5 * n_step, 2 * tile_k), (128, 3 * n_step, tile_k),
              (700, 1024, 3 * tile_k), (255, 128 + n_step, tile_k)]]
    for _ in range(24):
        groups = []
        for _ in range(rng.choice((1, 2, 3, 8, 16, 64))):
            m = rng.choice((0, 1, 127, 128, 129, rng.randint(1, 700)))
            groups.append((m, n_step * rng.randint(1, 48), tile_k * rng.randint(1, 8)))
        cases.append(groups)
    return cases


def _plan_shape_error(plan, sizes, cluster_size):
    if plan.num_ctas != len(plan.cta_work) or tuple(plan.grid) != (plan.num_ctas, 1, 1):
        return f"grid {plan.grid} does not launch the plan's {len(plan.cta_work)} CTAs"
    if plan.num_ctas % cluster_size:
        return f"{plan.num_ctas} CTAs is not a whole number of {cluster_size}-CTA clusters"
    for start in range(0, plan.num_ctas, cluster_size):
        if len({work[0] for work in plan.cta_work[start:start + cluster_size]}) != 1:
            return f"the cluster of CTAs {start}-{start + cluster_size - 1} mixes groups"
    if [tuple(s) for s in plan.problem_sizes] != [tuple(s) for s in sizes]:
        return "the plan's problem sizes differ from the ones it was given"
    return None


def _plan_variants(kernel):
    """The kernel's own plan, and cluster shapes a proposal may switch to when plan_launch takes them."""
    if "cluster_mn" not in inspect.signature(kernel.plan_launch).parameters:
        return [{}]
    return [{}, {"cluster_mn": (2, 1)}, {"cluster_mn": (1, 2)}, {"cluster_mn": (2, 2)}]


def check_launch_plan_coverage(kernel, reference, rng) -> str:
    """plan_launch's CTAs cover every output element of every group exactly once, with the kernel's tile."""
    gemm = kernel.GroupedBlockScaledGemm()
    tile_mn, tile_k = tuple(gemm.mma_tiler[:2]), gemm.mma_tiler[2]
    cases = _plan_cases(rng, tile_k, getattr(kernel, "EPILOGUE_TILE_N", 32))
    variants = _plan_variants(kernel)
    for groups in cases:
        sizes = [(m, n, k, 1) for m, n, k in groups]
        for variant in variants:
            plan = kernel.plan_launch(sizes, **variant)
            where = f"plan_launch({sizes if len(sizes) <= 6 else f'{len(sizes)} groups'}, {variant or 'defaults'})"
            assert tuple(plan.tile_mn) == tile_mn, f"{where}: plans {plan.tile_mn} tiles, the kernel computes {tile_mn}"
            cluster = variant.get("cluster_mn", tuple(gemm.cluster_shape_mn))
            error = _plan_shape_error(plan, sizes, cluster[0] * cluster[1]) or _coverage_error(
                sizes, tile_mn, plan.cta_work)
            if error:
                raise AssertionError(f"{where}: {error}")
    count = sum(len(groups) for groups in cases)
    return (f"launch plan covers every output element exactly once: {len(cases)} problems, {count} groups "
            f"(empty, 1-row, N tails, up to 64 groups), {len(variants)} cluster shapes")


# ---------------------------------------------------------------------------------------------------------
# 4. Launch arguments: what the kernel's views read is the reference's data (FP4 nibbles included)

VIEW_NAMES = ("A", "B", "SFA", "SFB", "C")


class _FakePtr:
    """What custom_kernel asked make_ptr for, kept as numbers: the launch is replaced, not run."""

    def __init__(self, dtype, address, space=None, assumed_align=None):
        self.dtype, self.address = dtype, int(address)
        self.space = space if space is not None else cute.AddressSpace.generic
        self.align = assumed_align

    def real(self):
        """A real pointer to the same address; alignment lowered to what a CPU allocation gives."""
        align = self.align or 1
        if self.address:
            align = min(align, self.address & -self.address)
        return _make_ptr(self.dtype, self.address, self.space, assumed_align=align)


class _Launch:
    """Stands in for `self.kernel(...)`: `.launch` records the grid, block and cluster the host code asks for."""

    def __init__(self, misc):
        self.misc = misc

    def launch(self, grid, block, cluster=(1, 1, 1), **_options):
        self.misc[0] = grid[0]
        self.misc[1] = grid[1] * grid[2]
        self.misc[2] = block[0] * block[1] * block[2]
        self.misc[3] = cluster[0] * cluster[1] * cluster[2]


@cute.jit
def _read_extents(gemm: cutlass.Constexpr, kernel: cutlass.Constexpr, sizes_t, strides_t, abc_t, sf_t, work_t,
                  out: cutlass.Constexpr):
    """Mirror of kernel(): per group, the sizes it reads and the start and cosize of each view it builds."""
    for group in cutlass.range(cutlass.min(cute.size(sizes_t, mode=[0]), out["sizes"].shape[0]), unroll=1):
        m, n, k = sizes_t[group, 0], sizes_t[group, 1], sizes_t[group, 2]
        for slot in cutlass.range_constexpr(3):
            out["sizes"][group, slot] = (m, n, k)[slot]
        # A group without output has no CTA, so kernel() never builds its views (their algebra divides by 0).
        if m > 0 and n > 0 and k > 0:
            views = _group_views(gemm, kernel, m, n, k, strides_t, abc_t, sf_t, group)
            for slot in cutlass.range_constexpr(5):
                out["extents"][group, slot, 0] = (abc_t[group, 0], abc_t[group, 1], sf_t[group, 0], sf_t[group, 1],
                                                  abc_t[group, 2])[slot]
                out["extents"][group, slot, 1] = cute.cosize(views[slot].layout)
    out["misc"][4] = cute.size(work_t, mode=[0])
    out["misc"][5] = cute.size(sizes_t, mode=[0])
    for cta in cutlass.range(cutlass.min(cute.size(work_t, mode=[0]), out["work"].shape[0]), unroll=1):
        for j in cutlass.range_constexpr(3):
            out["work"][cta, j] = work_t[cta, j]


def _group_views(gemm, kernel, m, n, k, strides_t, abc_t, sf_t, group):
    """The five global views kernel() builds for one group (A, B, SFA, SFB, C), with the kernel's own helpers."""
    def at(dtype, address):
        return cute.make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=16)

    return (
        gemm._matrix(at(kernel.AB_DTYPE, abc_t[group, 0]), m, k, strides_t[group, 0]),
        gemm._matrix(at(kernel.AB_DTYPE, abc_t[group, 1]), n, k, strides_t[group, 1]),
        gemm._scales(at(kernel.SF_DTYPE, sf_t[group, 0]), m, k),
        gemm._scales(at(kernel.SF_DTYPE, sf_t[group, 1]), n, k),
        gemm._matrix(at(kernel.C_DTYPE, abc_t[group, 2]), m, n, strides_t[group, 2]),
    )


@cute.jit
def _read_values(gemm: cutlass.Constexpr, kernel: cutlass.Constexpr, sizes_t, strides_t, abc_t, sf_t,
                 out: cutlass.Constexpr):
    """What each view holds: FP4 codes as CuTe unpacks them, scale bytes, C's fp16 bits."""
    for group in cutlass.range(cute.size(sizes_t, mode=[0]), unroll=1):
        m, n, k = sizes_t[group, 0], sizes_t[group, 1], sizes_t[group, 2]
        if m > 0 and n > 0 and k > 0:
            a, b, sfa, sfb, c = _group_views(gemm, kernel, m, n, k, strides_t, abc_t, sf_t, group)
            _fp4_codes(a, out["A"][group, None, None], m, k)
            _fp4_codes(b, out["B"][group, None, None], n, k)
            _scale_bytes(sfa, sf_t[group, 0], out["SFA"][group, None, None], m, k)
            _scale_bytes(sfb, sf_t[group, 1], out["SFB"][group, None, None], n, k)
            c_bits = cute.recast_tensor(c, cutlass.Int16)
            for r in cutlass.range(m, unroll=1):
                for col in cutlass.range(n, unroll=1):
                    out["C"][group, r, col] = cutlass.Int32(c_bits[r, col, 0])


@cute.jit
def _fp4_codes(view, dst, rows, k):
    """4-bit codes of an FP4 view, read 32 at a time (CuTe has no scalar FP4 load) through an Int4 recast."""
    for r in cutlass.range(rows, unroll=1):
        for j in cutlass.range(k // 32, unroll=1):
            src = cute.recast_tensor(cute.local_tile(view, (1, 32, 1), (r, j, 0)), cutlass.Int4)
            cute.local_tile(dst, (1, 32), (r, j)).store(src.load().to(cutlass.Int32))


@cute.jit
def _scale_bytes(view, address, dst, rows, k):
    """The byte at the scale view's offset of each (row, 16-element K block)."""
    raw = cute.make_tensor(cute.make_ptr(cutlass.Uint8, address, cute.AddressSpace.gmem, assumed_align=16),
                           cute.make_layout(cute.cosize(view.layout)))
    for r in cutlass.range(rows, unroll=1):
        for j in cutlass.range(k // 16, unroll=1):
            dst[r, j] = cutlass.Int32(raw[cute.crd2idx((r, j * 16, 0), view.layout)])


def _device_tensor(buffer: torch.Tensor):
    """A CuTe view of a host buffer, for use while tracing: its address is baked into the host code."""
    dtype = {torch.int32: cutlass.Int32, torch.int64: cutlass.Int64}[buffer.dtype]
    pointer = cute.make_ptr(dtype, buffer.data_ptr(), cute.AddressSpace.gmem, assumed_align=16)
    return cute.make_tensor(pointer, cute.make_layout(tuple(buffer.shape), stride=tuple(buffer.stride())))


METADATA_NAMES = ("problem_sizes", "strides", "abc_ptrs", "sf_ptrs", "cta_work")


def _run_launch(kernel, gemm, launch_args, buffers, reader):
    """Compile the kernel's own __call__ with kernel() replaced by `reader`, and run that host code on the CPU.

    __call__ builds the metadata views and the launch exactly as on a GPU; `reader(gemm, kernel, metadata,
    outputs)` then reads through them (host code, CPU memory) where kernel() would run on the device.
    """
    names = list(inspect.signature(type(gemm).kernel).parameters)[1:]

    def stub(*args, **kwargs):
        bound = {**dict(zip(names, args)), **kwargs}
        outputs = {key: _device_tensor(value) for key, value in buffers.items()}
        reader(gemm, kernel, [bound[name] for name in METADATA_NAMES], outputs)
        return _Launch(outputs["misc"])

    gemm.kernel = stub
    try:
        _run_host(gemm, (), tuple(launch_args))
    finally:
        del gemm.kernel


def _extents_reader(gemm, kernel, metadata, outputs):
    _read_extents(gemm, kernel, *metadata, outputs)


def _values_reader(gemm, kernel, metadata, outputs):
    _read_values(gemm, kernel, *metadata[:4], outputs)


class _NoStream:
    """torch.cuda.current_stream() on a machine without CUDA: stream 0, never used (the launch is replaced)."""

    cuda_stream = 0


def _swaps(kernel, fake_compile):
    """(owner, name, stand-in) for everything custom_kernel touches that needs a GPU or would cache a fake."""
    swaps = [(cute_runtime, "make_ptr", _FakePtr), (kernel, "make_ptr", _FakePtr), (cute, "compile", fake_compile),
             (torch.cuda, "current_stream", lambda *_a, **_k: _NoStream())]
    for name in ("_compiled", "_metadata"):  # caches of compiled kernels and device metadata: start empty
        cache = getattr(kernel, name, None)
        if isinstance(cache, dict):
            swaps.append((kernel, name, type(cache)()))
    return [(owner, name, value) for owner, name, value in swaps if hasattr(owner, name)]


def _intercept_launch(kernel, data, on_launch):
    """Run custom_kernel on CPU tensors with cute.compile and make_ptr replaced; on_launch sees its launch."""
    seen = {}

    def fake_compile(gemm, *_args, **_kwargs):
        def launch(*args):
            seen["result"] = on_launch(gemm, [a.real() if isinstance(a, _FakePtr) else a for a in args])
        return launch

    saved = []
    for owner, name, value in _swaps(kernel, fake_compile):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)
    try:
        kernel.custom_kernel(data)
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
    assert "result" in seen, "custom_kernel returned without launching the kernel"
    return seen["result"]


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _launch_spec(rng):
    """Empty and 1-row groups, an M past one tile, N tails; values from a seed drawn from rng."""
    return {"m": [1, 129, 0, 72], "n": [128, 160, 96, 256], "k": [256, 512, 256, 256], "g": 4,
            "seed": rng.randint(1, 2**31 - 1)}


def _readable(address: int, span: int) -> bool:
    """Whether [address, address + span) lies in readable mappings of this process, one after another without a gap
    (Linux; True elsewhere). A buffer may straddle two mappings the kernel keeps apart (anonymous memory of
    different protections or origins): a check of one mapping alone failed the nibble-swap mutant now and then with
    "points outside every input buffer and readable memory" for a buffer it held alive."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return True
    reach, end = address, address + span  # reach: the first byte not yet known to be readable
    for line in lines:  # in address order
        bounds, perms = line.split()[:2]
        low, high = (int(v, 16) for v in bounds.split("-"))
        if high <= reach:
            continue
        if low > reach or not perms.startswith("r"):
            return False
        reach = high
        if reach >= end:
            return True
    return False


def _input_buffers(data):
    """(name, tensor) of every input tensor, named as in generate_input's tuple."""
    names = ("abc_tensors", "sfasfb_tensors", "sfasfb_reordered_tensors")
    return [(f"{names[field]}[{group}][{slot}]", tensor)
            for field in range(3) for group, tensors in enumerate(data[field]) for slot, tensor in enumerate(tensors)]


def _storage_error(what, address, span, inputs):
    """None when the view's `span` bytes can be read safely: inside the input buffer its pointer falls in, or
    (a buffer custom_kernel made itself) inside readable memory; what the bytes hold is compared afterwards."""
    for name, tensor in inputs:
        start, length = tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes()
        if length and start <= address < start + length:
            if address + span > start + length:
                return (f"the kernel's {what} view spans {span} bytes from offset {address - start} of {name}'s "
                        f"{length}-byte buffer")
            return None
    if not _readable(address, span):
        return f"the kernel's {what} view ({span} bytes) points outside every input buffer and readable memory"
    return None


def _check_extents(kernel, gemm, data, buffers):
    """Sizes, pointers and spans the kernel's views take, before anything is read through them."""
    sizes, inputs = data[3], _input_buffers(data)
    misc, seen = buffers["misc"].tolist(), buffers["sizes"].tolist()
    assert misc[5] == len(sizes), f"the kernel sees {misc[5]} groups, the data has {len(sizes)}"
    bits = [kernel.AB_DTYPE.width, kernel.AB_DTYPE.width, kernel.SF_DTYPE.width, kernel.SF_DTYPE.width,
            kernel.C_DTYPE.width]
    for group, (m, n, k, _l) in enumerate(sizes):
        assert tuple(seen[group][:3]) == (m, n, k), (
            f"group {group}: the kernel reads (M, N, K) = {tuple(seen[group][:3])}, the data has {(m, n, k)}")
        if min(m, n, k) == 0:
            continue
        for slot, what in enumerate(VIEW_NAMES):
            address, cosize = (int(v) for v in buffers["extents"][group, slot])
            error = _storage_error(what, address, (cosize * bits[slot] + 7) // 8, inputs)
            assert error is None, f"group {group}: {error}"
    grid, grid_yz, _block, cluster, ctas = misc[:5]
    assert (grid, grid_yz) == (ctas, 1), f"the launch's grid is {grid} x {grid_yz} for {ctas} CTAs of work"
    assert grid % cluster == 0, f"the grid of {grid} CTAs is not a whole number of {cluster}-CTA clusters"
    work = [tuple(int(v) for v in row) for row in buffers["work"][:ctas]]
    error = _coverage_error([s[:2] for s in sizes], tuple(gemm.mma_tiler[:2]), work)
    assert error is None, f"custom_kernel's cta_work: {error}"
    return ctas


def _first_mismatch(got: torch.Tensor, want: torch.Tensor):
    bad = torch.nonzero(got != want)
    return None if len(bad) == 0 else tuple(int(v) for v in bad[0])


def _check_values(reference, data, buffers):
    """Every FP4 code, scale byte and C element the kernel's views address equals the reference's."""
    abc, scales, _, sizes = data
    for group, (m, n, k, _l) in enumerate(sizes):
        if min(m, n, k) == 0:
            continue
        a, b, c = abc[group]
        for what, operand, rows in (("A", a, m), ("B", b, n)):
            codes = buffers[what][group, :rows, :k] & 0xF
            got, want = reference.e2m1_decode(codes), reference.unpack_e2m1(operand[:, :, 0])
            at = _first_mismatch(torch.stack((got, got.signbit().float())), torch.stack((want, want.signbit().float())))
            if at:
                r, col = at[1:]
                raise AssertionError(
                    f"group {group}: {what}[{r}, {col}] reads e2m1 code 0x{int(codes[r, col]):X} "
                    f"({float(got[r, col])}) through the kernel's view, the reference unpacks {float(want[r, col])} "
                    "(even K = low nibble)")
        for what, sf, rows in (("SFA", scales[group][0], m), ("SFB", scales[group][1], n)):
            want = sf[:, :, 0].view(torch.uint8).long()
            at = _first_mismatch(buffers[what][group, :rows, :k // 16].long(), want)
            if at:
                raise AssertionError(f"group {group}: {what}{list(at)} reads byte {int(buffers[what][group][at])} "
                                     f"through the kernel's view, the reference's scale is byte {int(want[at])}")
        want = c[:, :, 0].view(torch.int16).long()
        at = _first_mismatch(buffers["C"][group, :m, :n].long(), want)
        assert at is None, f"group {group}: C{list(at)} is not where the kernel's C view puts it"


def _value_buffers(sizes, misc):
    big_m, big_n, big_k = (max([s[i] for s in sizes] + [1]) for i in range(3))
    groups = len(sizes)
    return {"A": _filled((groups, big_m, big_k), torch.int32), "B": _filled((groups, big_n, big_k), torch.int32),
            "SFA": _filled((groups, big_m, big_k // 16), torch.int32),
            "SFB": _filled((groups, big_n, big_k // 16), torch.int32),
            "C": _filled((groups, big_m, big_n), torch.int32), "misc": misc}


def check_launch_arguments(kernel, reference, rng) -> str:
    """custom_kernel's launch, replayed on the CPU: the kernel's views of its arguments hold the reference's data.

    custom_kernel runs on CPU tensors with cute.compile and make_ptr replaced; at the launch, the kernel's
    own __call__ is compiled with kernel() replaced by a reader that mirrors kernel()'s per-group views
    (`_matrix`, `_scales`) and reads through them, on the CPU. FP4 codes come out through CuTe's own
    sub-byte unpacking (an Int4 recast), so a nibble swap in the host code shows; the tensor cores' own
    nibble order cannot be checked here.
    """
    data = _to_cpu(reference.generate_input(**_launch_spec(rng)))
    sizes = data[3]
    capacity = 4 * kernel.plan_launch(sizes).num_ctas + 64

    def on_launch(gemm, args):
        extents = {"sizes": _filled((len(sizes), 3)), "extents": _filled((len(sizes), 5, 2)),
                   "misc": _filled((8,)), "work": _filled((capacity, 3))}
        _run_launch(kernel, gemm, args, extents, _extents_reader)
        ctas = _check_extents(kernel, gemm, data, extents)
        values = _value_buffers(sizes, _filled((8,)))
        _run_launch(kernel, gemm, args, values, _values_reader)
        _check_values(reference, data, values)
        return ctas

    ctas = _intercept_launch(kernel, data, on_launch)
    shapes = ", ".join(f"{m}x{n}x{k}" for m, n, k, _l in sizes)
    return (f"custom_kernel's launch replayed on the CPU for groups {shapes}: sizes, pointers and spans in "
            f"bounds, {ctas} CTAs cover C exactly once, every A/B FP4 code (nibble order as CuTe unpacks it), "
            f"SFA/SFB byte and C element the kernel's views address equals the reference's")


CHECKS = [
    check_scale_factor_layout,
    check_tensor_memory_columns,
    check_launch_plan_coverage,
    check_launch_arguments,
]
