// What a GEMM fuses into its loads and stores (joined after gelu.wgsl and in front
// of each matmul prelude and of matmul_reduce.wgsl): bits of the uniform `flags`,
// the same in matmul.rs (`fuse`). Each prelude reads the bits its layout supports.
const FUSE_BIAS: u32 = 1u;       // forward: + bias[j]
const FUSE_GELU_INP: u32 = 2u;   // forward, dweight: the activation operand through GELU as it is loaded
const FUSE_GELU_GRAD: u32 = 16u; // dinp: times gelu'(aux), the gradient through that GELU

fn fused(flags: u32, bit: u32) -> bool {
    return (flags & bit) != 0u;
}
