// The f16 copy of one chunk of the parameters (ParamArena's halves), which the f16
// GEMM cores read as their weight operand: dst[i] = f16(src[i]) over n floats, 4 a
// thread. Rounded as those cores round a weight they load in f32 (vec4<f16>(v)), so
// a core computes the same products from either; the copy reads half the bytes.
// Not joined after prelude.wgsl (that comes first in a module, before `enable f16;`):
// the 1-D launch index is spelled out as its `linear` spells it.
struct Params { n: u32, _pad0: u32, _pad1: u32, _pad2: u32 }

const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<f16>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // grid_1d spreads workgroups past 65535 onto y.
    let i = gid.x + gid.y * nwg.x * WG;
    let j = 4u * i;
    if (j >= p.n) {
        return;
    }
    // The chunk's last floats need not fill a vec4: its tail converts as zeros.
    var v = vec4<f32>(src[j], 0.0, 0.0, 0.0);
    if (j + 1u < p.n) { v.y = src[j + 1u]; }
    if (j + 2u < p.n) { v.z = src[j + 2u]; }
    if (j + 3u < p.n) { v.w = src[j + 3u]; }
    dst[i] = vec4<f16>(v);
}
