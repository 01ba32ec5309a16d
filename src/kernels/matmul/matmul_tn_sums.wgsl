// Joined after matmul_tn.wgsl for the tiled core's dweight with the bias: the core
// also sums the A it loads (dout) over its split's rows, in the workgroups of the
// first column of tiles, and hands the sums of 4 columns j..j+3 here: dbias's
// partial of split z ([splits, m]), with no pass of its own. A binding of its own
// kernel: WebGPU refuses one buffer bound writable twice in a dispatch.
@group(0) @binding(4) var<storage, read_write> part_b: array<f32>;

const A_SUMS: bool = true;

fn write_a_sums(z: u32, j: u32, v: vec4<f32>) {
    for (var c = 0u; c < 4u; c++) {
        if (j + c < p.m) { part_b[z * p.m + j + c] = v[c]; }
    }
}
