// What a GEMM fuses into its loads and stores (joined after hash.wgsl and gelu.wgsl,
// in front of each matmul prelude and of matmul_reduce.wgsl): bits of the uniform
// `flags`, the same in source.rs (`fuse`). Each prelude reads the bits its layout
// supports. The forward's epilogue, in order: + bias, dropout, + resid (a residual
// branch's end: out = resid + dropout(product + bias)).
const FUSE_BIAS: u32 = 1u;       // forward: + bias[j]
const FUSE_GELU_INP: u32 = 2u;   // forward, dweight: the activation operand through GELU as it is loaded
const FUSE_RESIDUAL: u32 = 4u;   // forward: resid[r, j] + the rest
const FUSE_DROPOUT: u32 = 8u;    // forward: dropout mask (seed, threshold, scale) at element r * n + j
const FUSE_GELU_GRAD: u32 = 16u; // dinp: times gelu'(aux), the gradient through that GELU
// Not a fusion but a fact the launch fixes in the source the same way: the tiled
// cores' every tile lies inside m and n and every step inside k, and the operands'
// vec4 views are bound (not stand-ins), so every load is one unguarded vec4.
const WHOLE_TILES: u32 = 32u;
// Also a fact of the launch: the output's width is a multiple of 4 and every buffer
// is bound whole, so the preludes' OUT4 twins read and write 4 columns as one vec4.
const OUT_VEC4: u32 = 64u;

fn fused(flags: u32, bit: u32) -> bool {
    return (flags & bit) != 0u;
}

// Inverted dropout of v, element i of the mask seeded `seed` (hash.wgsl's `kept`).
fn dropout_at(v: f32, i: u32, seed: u32, threshold: u32, scale: f32) -> f32 {
    return select(0.0, v * scale, kept(seed, i, threshold));
}

// dropout_at of 4 consecutive elements, i .. i + 3.
fn dropout4_at(v: vec4<f32>, i: u32, seed: u32, threshold: u32, scale: f32) -> vec4<f32> {
    return vec4<f32>(
        dropout_at(v.x, i, seed, threshold, scale),
        dropout_at(v.y, i + 1u, seed, threshold, scale),
        dropout_at(v.z, i + 2u, seed, threshold, scale),
        dropout_at(v.w, i + 3u, seed, threshold, scale),
    );
}
