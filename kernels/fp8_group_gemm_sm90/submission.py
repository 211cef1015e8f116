"""FP8 (e4m3) grouped GEMM with per-row scales for Hopper (sm_90a), in CuTe DSL.

C_g = diag(sa_g) (A_g @ B_g^T) diag(sb_g) for every group g, in one persistent launch: TMA loads of A
and B into a shared-memory ring, wgmma with fp32 accumulators, the row scales applied in the epilogue,
bf16 out. A, sa and C hold all groups' rows one after another; `offs` holds each group's end row.
"""

import math

import cuda.bindings.driver as cuda
import torch

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32
from cutlass.cute.runtime import make_ptr
from cutlass.tensor_utils import LayoutEnum

# Tuning knobs: a proposal changes these, one line each.
TILE_M = 128  # rows of C per CTA tile: 64 (one MMA warpgroup) or 128 (two)
TILE_N = 128  # columns of C per CTA tile: 64, 128 or 256
TILE_K = 128  # K per pipeline stage: a multiple of 32 (the fp8 wgmma K)
NUM_STAGES = 4  # depth of the TMA -> wgmma shared-memory ring
CLUSTER_SHAPE_MN = (1, 1)  # CTAs per cluster along (M, N); only (1, 1) is implemented
EPILOGUE_STORE = "direct"  # "direct": predicated stores from registers

NUM_SMS_H100 = 132  # used when compiling without a GPU


class GroupedFp8GemmSm90:
    """Persistent warp-specialized kernel: warpgroup 0 loads with TMA, the others run wgmma and the epilogue."""

    def __init__(self, tile_mnk, num_stages, cluster_shape_mn, epilogue_store):
        self.tile_m, self.tile_n, self.tile_k = tile_mnk
        if self.tile_m not in (64, 128):
            raise ValueError(f"TILE_M must be 64 or 128, not {self.tile_m}")
        if self.tile_n not in (64, 128, 256):
            raise ValueError(f"TILE_N must be 64, 128 or 256, not {self.tile_n}")
        if self.tile_k % 32:
            raise ValueError(f"TILE_K must be a multiple of 32, not {self.tile_k}")
        if tuple(cluster_shape_mn) != (1, 1):
            raise ValueError(f"CLUSTER_SHAPE_MN {cluster_shape_mn} is not implemented; use (1, 1)")
        if epilogue_store not in ("direct",):
            raise ValueError(f"EPILOGUE_STORE {epilogue_store!r} is not implemented")
        self.num_stages = num_stages
        self.cluster_shape_mn = tuple(cluster_shape_mn)
        self.epilogue_store = epilogue_store
        # One MMA warpgroup per 64 rows of the tile keeps each thread's accumulators at TILE_N/2 registers.
        self.num_mma_wg = self.tile_m // 64
        self.threads_per_wg = 128
        self.num_threads = (1 + self.num_mma_wg) * self.threads_per_wg
        self.load_regs = 40
        self.mma_regs = 232 if self.num_mma_wg == 2 else 240
        self.a_dtype = cutlass.Float8E4M3FN
        self.b_dtype = cutlass.Float8E4M3FN
        self.c_dtype = cutlass.BFloat16
        self.acc_dtype = Float32

    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        b_ptr: cute.Pointer,
        sa_ptr: cute.Pointer,
        sb_ptr: cute.Pointer,
        offs_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        m_total: Int32,
        n: Int32,
        k: Int32,
        num_groups: Int32,
        num_ctas: Int32,
        stream: cuda.CUstream,
    ):
        # TMA needs 16-byte aligned row strides; the host checks K % 16 == 0 and N % 8 == 0.
        k = cute.assume(k, divby=16)
        n = cute.assume(n, divby=8)
        mA = cute.make_tensor(a_ptr, cute.make_layout((m_total, k), stride=(k, 1)))
        mB = cute.make_tensor(b_ptr, cute.make_layout((n, k, num_groups), stride=(k, 1, n * k)))
        mC = cute.make_tensor(c_ptr, cute.make_layout((m_total, n), stride=(n, 1)))
        mSA = cute.make_tensor(sa_ptr, cute.make_layout(m_total))
        mSB = cute.make_tensor(sb_ptr, cute.make_layout((n, num_groups), stride=(1, n)))
        mOffs = cute.make_tensor(offs_ptr, cute.make_layout(num_groups))

        k_major = cute.nvgpu.OperandMajorMode.K
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype,
            self.b_dtype,
            k_major,
            k_major,
            self.acc_dtype,
            (self.num_mma_wg, 1, 1),
            tiler_mn=(64, self.tile_n),
        )
        tile_mnk = (self.tile_m, self.tile_n, self.tile_k)
        a_smem_staged = sm90_utils.make_smem_layout_a(
            LayoutEnum.ROW_MAJOR, tile_mnk, self.a_dtype, self.num_stages
        )
        b_smem_staged = sm90_utils.make_smem_layout_b(
            LayoutEnum.ROW_MAJOR, tile_mnk, self.b_dtype, self.num_stages
        )
        a_smem = cute.slice_(a_smem_staged, (None, None, 0))
        b_smem = cute.slice_(b_smem_staged, (None, None, 0))
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_atom_a, tma_a = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, mA, a_smem, (self.tile_m, self.tile_k)
        )
        tma_atom_b, tma_b = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, mB, b_smem, (self.tile_n, self.tile_k)
        )
        self.tma_bytes = cute.size_in_bytes(self.a_dtype, a_smem) + cute.size_in_bytes(
            self.b_dtype, b_smem
        )

        @cute.struct
        class SharedStorage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            sA: cute.struct.Align[
                cute.struct.MemRange[self.a_dtype, cute.cosize(a_smem_staged)], 1024
            ]
            sB: cute.struct.Align[
                cute.struct.MemRange[self.b_dtype, cute.cosize(b_smem_staged)], 1024
            ]

        self.shared_storage = SharedStorage

        self.kernel(
            tma_atom_a,
            tma_a,
            tma_atom_b,
            tma_b,
            mC,
            mSA,
            mSB,
            mOffs,
            num_groups,
            tiled_mma,
            a_smem_staged,
            b_smem_staged,
        ).launch(
            grid=[num_ctas, 1, 1],
            block=[self.num_threads, 1, 1],
            cluster=[*self.cluster_shape_mn, 1],
            min_blocks_per_mp=1,
            stream=stream,
        )

    @cute.jit
    def count_tiles(self, mOffs: cute.Tensor, num_groups: Int32, n_tiles: Int32):
        """Total work tiles over all groups: ceil(M_g / TILE_M) * n_tiles each."""
        total = Int32(0)
        start = Int32(0)
        for g in cutlass.range(num_groups, unroll=1):
            end = mOffs[g]
            total += (end - start + self.tile_m - 1) // self.tile_m * n_tiles
            start = end
        return total

    @cute.jit
    def locate(self, mOffs: cute.Tensor, num_groups: Int32, n_tiles: Int32, tile_idx: Int32):
        """Map a linear tile index to (group, first row, valid rows, n-tile).

        Within a group the m-tiles of one n-tile are adjacent, so CTAs that share a B tile run together
        and the second read of it hits L2.
        """
        rem = tile_idx
        group = Int32(0)
        row0 = Int32(0)
        rows = Int32(0)
        n_tile = Int32(0)
        start = Int32(0)
        found = Int32(0)
        for g in cutlass.range(num_groups, unroll=1):
            end = mOffs[g]
            m_tiles = (end - start + self.tile_m - 1) // self.tile_m
            count = m_tiles * n_tiles
            if found == 0:
                if rem < count:
                    m_tile = rem % m_tiles
                    n_tile = rem // m_tiles
                    group = g
                    row0 = start + m_tile * self.tile_m
                    rows = cutlass.min(end - row0, self.tile_m)
                    found = Int32(1)
                else:
                    rem -= count
            start = end
        return group, row0, rows, n_tile

    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB: cute.Tensor,
        mC: cute.Tensor,
        mSA: cute.Tensor,
        mSB: cute.Tensor,
        mOffs: cute.Tensor,
        num_groups: Int32,
        tiled_mma: cute.TiledMma,
        a_smem_staged: cute.ComposedLayout,
        b_smem_staged: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        grid_x, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)

        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.num_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_wg * 4),
            tx_count=self.tma_bytes,
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
        )
        sA = storage.sA.get_tensor(a_smem_staged.outer, swizzle=a_smem_staged.inner)
        sB = storage.sB.get_tensor(b_smem_staged.outer, swizzle=b_smem_staged.inner)

        n_dim = mC.shape[1]
        k_dim = mA.shape[1]
        n_tiles = (n_dim + self.tile_n - 1) // self.tile_n
        k_tiles = (k_dim + self.tile_k - 1) // self.tile_k
        total_tiles = self.count_tiles(mOffs, num_groups, n_tiles)

        if wg_idx == 0:
            # Producer warpgroup: one warp streams A and B tiles into the ring.
            cute.arch.setmaxregister_decrease(self.load_regs)
            if warp_idx == 0:
                state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.num_stages
                )
                tile_idx = bidx
                while tile_idx < total_tiles:
                    group, row0, rows, n_tile = self.locate(mOffs, num_groups, n_tiles, tile_idx)
                    # A's tile starts at any row (groups are packed), so shift the coordinates to it.
                    gA = cute.local_tile(
                        cute.domain_offset((row0, 0), mA), (self.tile_m, self.tile_k), (0, None)
                    )
                    gB = cute.local_tile(
                        mB[(None, None, group)], (self.tile_n, self.tile_k), (n_tile, None)
                    )
                    tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                        tma_atom_a,
                        0,
                        cute.make_layout(1),
                        cute.group_modes(sA, 0, 2),
                        cute.group_modes(gA, 0, 2),
                    )
                    tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                        tma_atom_b,
                        0,
                        cute.make_layout(1),
                        cute.group_modes(sB, 0, 2),
                        cute.group_modes(gB, 0, 2),
                    )
                    for kt in cutlass.range(k_tiles, unroll=1):
                        ring.producer_acquire(state)
                        bar = ring.producer_get_barrier(state)
                        cute.copy(tma_atom_a, tAgA[(None, kt)], tAsA[(None, state.index)], tma_bar_ptr=bar)
                        cute.copy(tma_atom_b, tBgB[(None, kt)], tBsB[(None, state.index)], tma_bar_ptr=bar)
                        ring.producer_commit(state)
                        state.advance()
                    tile_idx += grid_x
                ring.producer_tail(state)
        else:
            # MMA warpgroups: wgmma over the ring, then scale, convert and store.
            cute.arch.setmaxregister_increase(self.mma_regs)
            mma_tidx = tidx - self.threads_per_wg
            thr_mma = tiled_mma.get_slice(mma_tidx)
            tCsA = thr_mma.partition_A(sA)
            tCsB = thr_mma.partition_B(sB)
            tCrA = tiled_mma.make_fragment_A(tCsA)
            tCrB = tiled_mma.make_fragment_B(tCsB)
            cC = cute.make_identity_tensor((self.tile_m, self.tile_n))
            tCcC = thr_mma.partition_C(cC)
            acc = cute.make_rmem_tensor(tCcC.shape, self.acc_dtype)
            acc_mma = cute.make_rmem_tensor(tCcC.shape, self.acc_dtype)
            out = cute.make_rmem_tensor(tCcC.shape, self.c_dtype)
            num_k_blocks = cute.size(tCrA, mode=[2])

            read_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.num_stages
            )
            tile_idx = bidx
            while tile_idx < total_tiles:
                group, row0, rows, n_tile = self.locate(mOffs, num_groups, n_tiles, tile_idx)

                # Main loop. The tensor cores add fp8 products at reduced precision, so each k-tile
                # accumulates into acc_mma from zero and is then added into acc in full fp32.
                acc.fill(0.0)
                for kt in cutlass.range(k_tiles, unroll=1):
                    ring.consumer_wait(read_state)
                    cute.nvgpu.warpgroup.fence()
                    tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
                    for kb in cutlass.range_constexpr(num_k_blocks):
                        coord = (None, None, kb, read_state.index)
                        cute.gemm(tiled_mma, acc_mma, tCrA[coord], tCrB[coord], acc_mma)
                        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                    cute.nvgpu.warpgroup.commit_group()
                    cute.nvgpu.warpgroup.wait_group(0)
                    ring.consumer_release(read_state)
                    read_state.advance()
                    for i in cutlass.range_constexpr(cute.size(acc)):
                        acc[i] += acc_mma[i]

                # Epilogue: C = sa[row] * acc * sb[col], rows past the group's end are not written.
                col0 = n_tile * self.tile_n
                last_row = row0 + rows - 1
                for i in cutlass.range_constexpr(cute.size(acc)):
                    r, c = tCcC[i]
                    sa = mSA[cutlass.min(row0 + r, last_row)]
                    sb = mSB[(cutlass.min(col0 + c, n_dim - 1), group)]
                    out[i] = (acc[i] * sa * sb).to(self.c_dtype)
                gC = cute.local_tile(
                    cute.domain_offset((row0, 0), mC), (self.tile_m, self.tile_n), (0, n_tile)
                )
                tCgC = thr_mma.partition_C(gC)
                for i in cutlass.range_constexpr(cute.size(acc)):
                    r, c = tCcC[i]
                    if r < rows and col0 + c < n_dim:
                        tCgC[i] = out[i]
                tile_idx += grid_x


_compiled = {}


def _config():
    return (TILE_M, TILE_N, TILE_K, NUM_STAGES, tuple(CLUSTER_SHAPE_MN), EPILOGUE_STORE)


def _compile(options: str = ""):
    gemm = GroupedFp8GemmSm90(
        (TILE_M, TILE_N, TILE_K), NUM_STAGES, CLUSTER_SHAPE_MN, EPILOGUE_STORE
    )
    ptrs = [
        make_ptr(cutlass.Float8E4M3FN, 0, assumed_align=16),
        make_ptr(cutlass.Float8E4M3FN, 0, assumed_align=16),
        make_ptr(Float32, 0, assumed_align=16),
        make_ptr(Float32, 0, assumed_align=16),
        make_ptr(Int32, 0, assumed_align=16),
        make_ptr(cutlass.BFloat16, 0, assumed_align=16),
    ]
    sizes = [Int32(1), Int32(16), Int32(16), Int32(1), Int32(1)]
    stream = cute.runtime.make_fake_stream()
    if options:
        return cute.compile(gemm, *ptrs, *sizes, stream, options=options)
    return cute.compile(gemm, *ptrs, *sizes, stream)


def compile_signature(spec: dict) -> dict:
    """Sizes, group count and offsets are run-time arguments: one binary serves every spec."""
    return {
        "tile_mnk": [TILE_M, TILE_N, TILE_K],
        "stages": NUM_STAGES,
        "cluster_mn": list(CLUSTER_SHAPE_MN),
        "epilogue": EPILOGUE_STORE,
    }


def compile_kernel(spec: dict, options: str = ""):
    """Compile, without running, the kernel for `spec` (every spec shares one binary)."""
    return _compile(options)


def _get_compiled():
    key = _config()
    if key not in _compiled:
        _compiled[key] = _compile()
    return _compiled[key]


_num_sms = {}


def custom_kernel(data):
    """Run the grouped GEMM on `data` = (a, b, sa, sb, offs, c) on the current stream; returns c."""
    a, b, sa, sb, offs, c = data
    m_total, k = a.shape
    num_groups, n, _ = b.shape
    if k % 16 or n % 8:
        raise ValueError(f"K ({k}) must be a multiple of 16 and N ({n}) of 8")
    if m_total == 0:
        return c
    dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if dev not in _num_sms:
        _num_sms[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    # No group has more tiles than ceil(M_g / TILE_M), so this bounds the tile count.
    max_tiles = (m_total // TILE_M + num_groups) * ((n + TILE_N - 1) // TILE_N)
    num_ctas = max(1, min(_num_sms[dev], max_tiles))
    compiled = _get_compiled()
    compiled(
        make_ptr(cutlass.Float8E4M3FN, a.data_ptr(), assumed_align=16),
        make_ptr(cutlass.Float8E4M3FN, b.data_ptr(), assumed_align=16),
        make_ptr(Float32, sa.data_ptr(), assumed_align=16),
        make_ptr(Float32, sb.data_ptr(), assumed_align=16),
        make_ptr(Int32, offs.data_ptr(), assumed_align=16),
        make_ptr(cutlass.BFloat16, c.data_ptr(), assumed_align=16),
        Int32(m_total),
        Int32(n),
        Int32(k),
        Int32(num_groups),
        Int32(num_ctas),
        cuda.CUstream(torch.cuda.current_stream().cuda_stream),
    )
    return c
