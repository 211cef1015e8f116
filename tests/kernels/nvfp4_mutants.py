"""Small broken variants of kernels/nvfp4_group_gemm/submission.py that its layout checks must catch on a CPU.

Each entry is (name, old_text, new_text): old_text occurs exactly once in the base submission.py, and
`base.replace(old_text, new_text)` is the mutant. tests/kernels/test_layout_checks.py asserts which check
catches each one and its exact message; the same list serves an end-to-end test of judge's stage.
"""

SCALES_CALL = (
    "        return cute.make_tensor(ptr, blockscaled_utils.tile_atom_to_shape_SF((rows, k, 1), SF_VEC_SIZE))\n")


def _scales_from_atom(quadrant_strides: str, order: str) -> str:
    """`_scales` rewritten from the 128 x 4 scale atom by hand: rows (32, 4 quadrants), K (16, 4 columns)."""
    return (
        "        atom = cute.make_layout(((32, (2, 2)), (SF_VEC_SIZE, 4)),\n"
        f"                                stride=((16, {quadrant_strides}), (0, 1)))\n"
        f"        return cute.make_tensor(ptr, cute.tile_to_shape(atom, (rows, k, 1), {order}))\n"
    )


MUTANTS = [
    # tmem_columns gives SFA 8 columns instead of 16, so the kernel places SFB at column 136, not 144.
    (
        "scale-factor column offset shifted",
        "    sfa = tile_m // TMEM_SF_ATOM_ROWS * k_blocks\n",
        "    sfa = tile_m // TMEM_SF_ATOM_ROWS * k_blocks // 2\n",
    ),
    # Quadrants 1 and 2 of the 128-row scale atom exchanged: rows 32-63 read the bytes of rows 64-95.
    ("scale quadrants swapped", SCALES_CALL, _scales_from_atom("(8, 4)", "(2, 1, 3)")),
    # Scale atoms laid out down the rows first instead of along K first.
    ("scale atoms ordered rows first", SCALES_CALL, _scales_from_atom("(4, 8)", "(1, 2, 3)")),
    # Off by one in the M tile count: a 1-row group gets no tile, a 129-row group loses its last row.
    (
        "a tile missed by the launch plan",
        "        m_tiles = ceil_div(ceil_div(m, tile_m), cluster_m) * cluster_m\n",
        "        m_tiles = ceil_div(ceil_div(m - 1, tile_m), cluster_m) * cluster_m\n",
    ),
    # A host-side repack of A that swaps the two FP4 nibbles of every byte (even K belongs in the low nibble).
    (
        "nibbles swapped",
        "    abc_tensors, _, sf_reordered, problem_sizes = data\n",
        "    abc_tensors, _, sf_reordered, problem_sizes = data\n"
        "    raw = [a.view(torch.uint8) for a, _b, _c in abc_tensors]\n"
        "    abc_tensors = [(((r << 4) | (r >> 4)).view(a.dtype), b, c) for r, (a, b, c) in zip(raw, abc_tensors)]\n",
    ),
    # The plain (M, K/16) scales handed to the kernel instead of the blocked ones.
    (
        "unswizzled scales passed",
        "    abc_tensors, _, sf_reordered, problem_sizes = data\n",
        "    abc_tensors, sf_reordered, _, problem_sizes = data\n",
    ),
    # FP4 row strides passed in bytes where the kernel expects elements (two per byte).
    (
        "FP4 row stride in bytes",
        "    strides = [(2 * a.stride(0), 2 * b.stride(0), c.stride(0)) for a, b, c in abc_tensors]\n",
        "    strides = [(a.stride(0), b.stride(0), c.stride(0)) for a, b, c in abc_tensors]\n",
    ),
]

# Rewrites that change the text but not the behaviour: the checks must pass them.
EQUIVALENT = [
    ("scales from the atom by hand", SCALES_CALL, _scales_from_atom("(4, 8)", "(2, 1, 3)")),
]
