// The tensor-core cores' output path (joined after matmul_coop.wgsl's and
// matmul_coop3.wgsl's cores, which declare `Cs`: 256 floats a subgroup): one
// accumulator through the subgroup's 16x16 block of workgroup memory to the
// prelude's write4 (bias, epilogues, split slices), unscaled by 1 / A_SCALE. Every
// subgroup calls it together: cooperative stores need uniform control flow, and the
// barriers keep a block from being overwritten before all of it is read.

// Through this subgroup's 16x16 staging block to write4: lane l writes rows
// (l + i * width) / 4, columns ((l + i * width) % 4) * 4 .. + 4.
fn flush(z: u32, s: u32, lane: u32, width: u32, r0: u32, c0: u32, acc: coop_mat16x16<f32, C>) {
    coopStoreT(acc, &Cs[s * 256u], 16u);
    workgroupBarrier();
    for (var i = lane; i < 64u; i += width) {
        let at = s * 256u + (i / 4u) * 16u + (i % 4u) * 4u;
        let v = vec4<f32>(Cs[at], Cs[at + 1u], Cs[at + 2u], Cs[at + 3u]) * (1.0 / A_SCALE);
        write4(z, r0 + i / 4u, c0 + (i % 4u) * 4u, v);
    }
    workgroupBarrier();
}
