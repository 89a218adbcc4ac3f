"""Switches of the spyre lowering. The defaults are the optimised lowering;
the benchmarks turn them off to measure the naive one against it. Their
values are part of Inductor's cache key (the spyre post-grad pass's uuid), so
a module compiled under other switches is never reused."""

# Fuse pointwise chains and reductions with their epilogues into one program
# (intermediates stay in the scratchpad), and matrix products with their
# bias/activation epilogues; off: one program per node, every intermediate
# through device memory.
fusion = True
# Alternate two scratchpad regions between a core's blocks so DMA of the
# next block overlaps compute of this one; off: one region.
double_buffer = True
# Cores a kernel may spread its blocks over.
max_cores = None
# Lower matrix products (mm, addmm, bmm, baddbmm: what linear and matmul
# decompose to) to device programs built at compile time; off: they stay
# Inductor extern kernels running the eager op library.
matmul_programs = True
# Tile and core-grid choice of matrix products by the builder's cost model;
# off: the builder's documented naive lowering (benchmarks).
matmul_tiling = True
# Lower linear -> activation -> linear to the kernel library's fused MLP (one
# program, the intermediate resident in the scratchpads); off: two matmul
# programs with the intermediate in device memory.
mlp_fusion = True
# Apply the adapters' graph forms (torch_spyre/adapters: exact rewrites of
# stock models' code the lowering cannot take as written, e.g. RoPE's
# rotate_half concatenation); off: the graph as traced (measurements).
adapters = True
# Device layouts of the graph inputs' storages, set per compiled variant by
# backend="spyre" (layouts.input_layout_signature); empty: every input is
# assumed in the default layout of its own shape (a launch converts others).
input_layouts = ()


def patch(**values):
    """Context manager setting switches for the duration of a compile."""
    import contextlib

    @contextlib.contextmanager
    def scope():
        saved = {k: globals()[k] for k in values}
        globals().update(values)
        try:
            yield
        finally:
            globals().update(saved)
    return scope()


def snapshot() -> dict:
    """The current switches (what the cache key includes)."""
    return {k: v for k, v in globals().items()
            if not k.startswith("_") and isinstance(v, (bool, int, float, str, tuple))}
