//! What the GEMM cores' inner loops give on this adapter, one cost at a time: the
//! ceilings the GEMM cores work under. Each probe is a core's inner loop with parts
//! taken away.
//!
//! The tensor-core family (`coop2`'s loop, matmul_coop.wgsl):
//! - `mma`: 8 accumulators a subgroup (2 A x 4 B fragments, as `coop2`), the
//!   fragments loaded once, then only multiply-adds;
//! - `mma+frag`: the 6 fragments loaded from workgroup memory before each 8
//!   multiply-adds, as `coop2` does;
//! - `mma+frag+stash`: and every 32-deep step each thread stores 32 halves into the
//!   other buffer and the workgroup meets at a barrier, as `coop2` does;
//! - `+loads`: and the next step's 8 x 4 floats of A and B loaded from a 16384 x 384
//!   operand before the step's products, as four loads of a float each (`floats`) or
//!   one vec4 (`vec4s`), or the same 32 halves stored as f16 in two loads of 16 bytes
//!   (`f16 operands`: what storing the operands in f16 would give);
//! - `vec4<f16> tiles`: the stash and its `+loads (vec4s)` with the tiles declared as
//!   vec4<f16>, each thread's 4 halves one store (the fragments loaded from the
//!   vectors), against 4 stores of a half;
//! - each at 256 threads a workgroup (`coop2`'s) and at 128 (more workgroups an SM
//!   where registers are what limits them).
//!
//! The f32 family (`tiled`'s loop, matmul_tiled.wgsl: 8 x 8 outputs a thread, steps
//! of 8): `fma` (the operands in registers), `fma+lds` (4 vec4s from workgroup memory
//! each k, as `tiled`), `fma+lds+stash` (each step's transposed stores of 4 + 4 floats
//! and a barrier) and `+loads` (the next step's 2 vec4s, guarded floats as the
//! preludes' `load_a`, or vec4s); then `stash as vec4s` and its `+loads`: the same
//! with the untransposed stores of k-major tiles, what each costs apart.
//!
//! The GEMMs themselves are `matmul_bench`'s (gemm-sweep runs both in one call).
//! `cargo bench --bench gemm_ceiling [-- --json | --validate]` (`--validate`: only check the
//! probes' WGSL, as make test does); the tensor-core family needs
//! shader-f16, 16x16x16 f16 -> f32 cooperative matrices and subgroups of 32, and
//! neither family runs on a CPU adapter (there their WGSL is only validated).

// Native only (pollster); wasm32 builds an empty main.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    pollster::block_on(probe::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod probe {
    use std::time::Instant;

    /// 32-deep steps a subgroup runs (each 16 products of 16x16x16).
    const STEPS: u32 = 256;

    /// The probe kernel: `{WG}` threads a workgroup (subgroups of 32), `{PARTS}`
    /// switched on by the lines' tags (F: fragment loads each round; S: the stash and
    /// barrier every second round).
    const TEMPLATE: &str = r#"
enable f16;
enable wgpu_cooperative_matrix;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
// The same operands twice: as floats (read 4 at a time, as the GEMM preludes do) and
// as vec4s.
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> src4: array<vec4<f32>>;
// And as f16 operands would be stored: 8 halves a vec4<u32>.
@group(0) @binding(3) var<storage, read> src8: array<vec4<u32>>;

const LD: u32 = 40u;
const BUF: u32 = 5120u;
const K: u32 = 384u;
// The tiles as halves, or (P) as vec4<f16>, `coop2`'s, stored 4 halves at once; tile()
// and LDT give offsets and strides in the tiles' own elements.
#Q var<workgroup> As: array<f16, 10240>;
#Q var<workgroup> Bs: array<f16, 10240>;
#Q fn tile(h: u32) -> u32 { return h; }
#Q const LDT: u32 = LD;
#P var<workgroup> As: array<vec4<f16>, 2560>;
#P var<workgroup> Bs: array<vec4<f16>, 2560>;
#P fn tile(h: u32) -> u32 { return h / 4u; }
#P const LDT: u32 = LD / 4u;

// 4 floats of row `row`, k offsets k .. + 4 of a 16384 x K operand.
fn fetch4(row: u32, k: u32) -> vec4<f32> {
    let q = row * K + k;
#G    return vec4<f32>(src[q], src[q + 1u], src[q + 2u], src[q + 3u]);
#V    return src4[q / 4u];
#N    return vec4<f32>(f32(q));
}

// 4 halves packed in two u32s, as floats (the stash rounds them back exactly).
fn halves(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_id) s: u32,
) {
    // Something real in workgroup memory.
    for (var i = t; i < 10240u; i += WG) {
#Q        As[i] = f16(src[i % 4096u]);
#Q        Bs[i] = f16(src4[i % 1024u].y) + f16(f32(src8[i % 512u].x & 1u));
#P        As[i / 4u][i % 4u] = f16(src[i % 4096u]);
#P        Bs[i / 4u][i % 4u] = f16(src4[i % 1024u].y) + f16(f32(src8[i % 512u].x & 1u));
    }
    workgroupBarrier();
    let sm = (s % 4u) * 32u;
    let sn = (s / 4u) * 64u;
    // This workgroup's rows of A and of B (both read along k, as the forward's).
    let ra = (wg.x % 128u) * 128u + t / 2u;
    let rb = ((wg.x / 128u) % 128u) * 128u + t / 2u;
    let kt = (t % 2u) * 4u;
    var c00 = coop_mat16x16<f32, C>(); var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>(); var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>(); var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>(); var c13 = coop_mat16x16<f32, C>();
    var a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[tile(sm * LD)], LDT);
    var a1 = coopLoadT<coop_mat16x16<f16, A>>(&As[tile((sm + 16u) * LD)], LDT);
    var b0 = coopLoad<coop_mat16x16<f16, B>>(&Bs[tile(sn * LD)], LDT);
    var b1 = coopLoad<coop_mat16x16<f16, B>>(&Bs[tile((sn + 16u) * LD)], LDT);
    var b2 = coopLoad<coop_mat16x16<f16, B>>(&Bs[tile((sn + 32u) * LD)], LDT);
    var b3 = coopLoad<coop_mat16x16<f16, B>>(&Bs[tile((sn + 48u) * LD)], LDT);
    var x0 = vec4<f32>(0.0); var x1 = vec4<f32>(0.0); var x2 = vec4<f32>(0.0); var x3 = vec4<f32>(0.0);
    var y0 = vec4<f32>(0.0); var y1 = vec4<f32>(0.0); var y2 = vec4<f32>(0.0); var y3 = vec4<f32>(0.0);
    for (var st = 0u; st < STEPS; st++) {
        let cur = st % 2u;
        // The next step's 8 vec4s, issued before this step's products.
        let k0 = ((st + 1u) * 32u) % K + kt;
#L        x0 = fetch4(ra, k0); x1 = fetch4(ra, k0 + 8u); x2 = fetch4(ra, k0 + 16u); x3 = fetch4(ra, k0 + 24u);
#L        y0 = fetch4(rb, k0); y1 = fetch4(rb, k0 + 8u); y2 = fetch4(rb, k0 + 16u); y3 = fetch4(rb, k0 + 24u);
#H        // f16 operands: the same 32 halves of A and of B in 2 + 2 loads of 16 bytes.
#H        let kh = ((st + 1u) * 32u) % K + (t % 2u) * 16u;
#H        let ha0 = src8[(ra * K + kh) / 8u]; let ha1 = src8[(ra * K + kh + 8u) / 8u];
#H        let hb0 = src8[(rb * K + kh) / 8u]; let hb1 = src8[(rb * K + kh + 8u) / 8u];
#H        x0 = halves(ha0.x, ha0.y); x1 = halves(ha0.z, ha0.w); x2 = halves(ha1.x, ha1.y); x3 = halves(ha1.z, ha1.w);
#H        y0 = halves(hb0.x, hb0.y); y1 = halves(hb0.z, hb0.w); y2 = halves(hb1.x, hb1.y); y3 = halves(hb1.z, hb1.w);
        for (var h = 0u; h < 2u; h++) {
            let kk = h * 16u;
#F            a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[tile(cur * BUF + sm * LD + kk)], LDT);
#F            a1 = coopLoadT<coop_mat16x16<f16, A>>(&As[tile(cur * BUF + (sm + 16u) * LD + kk)], LDT);
#F            b0 = coopLoad<coop_mat16x16<f16, B>>(&Bs[tile(cur * BUF + sn * LD + kk)], LDT);
#F            b1 = coopLoad<coop_mat16x16<f16, B>>(&Bs[tile(cur * BUF + (sn + 16u) * LD + kk)], LDT);
#F            b2 = coopLoad<coop_mat16x16<f16, B>>(&Bs[tile(cur * BUF + (sn + 32u) * LD + kk)], LDT);
#F            b3 = coopLoad<coop_mat16x16<f16, B>>(&Bs[tile(cur * BUF + (sn + 48u) * LD + kk)], LDT);
            c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
        }
#S        // What coop2's stash writes: 8 x 4 halves a thread into the other buffers.
#S        let other = (1u - cur) * BUF + (t / 2u) * LD + kt;
#S        let e = f16(f32(st));
#S        let xs = array(vec4<f16>(x0) + e, vec4<f16>(x1), vec4<f16>(x2), vec4<f16>(x3));
#S        let ys = array(vec4<f16>(y0), vec4<f16>(y1), vec4<f16>(y2), vec4<f16>(y3));
#S        for (var q = 0u; q < 4u; q++) {
#S            let at = other + q * 8u;
#U            As[at] = xs[q].x; As[at + 1u] = xs[q].y; As[at + 2u] = xs[q].z; As[at + 3u] = xs[q].w;
#U            Bs[at] = ys[q].x; Bs[at + 1u] = ys[q].y; Bs[at + 2u] = ys[q].z; Bs[at + 3u] = ys[q].w;
#P            As[at / 4u] = xs[q];
#P            Bs[at / 4u] = ys[q];
#S        }
#S        workgroupBarrier();
    }
    let at = (wg.x * (WG / 32u) + s) * 2048u;
    coopStore(c00, &out[at], 16u); coopStore(c01, &out[at + 256u], 16u);
    coopStore(c02, &out[at + 512u], 16u); coopStore(c03, &out[at + 768u], 16u);
    coopStore(c10, &out[at + 1024u], 16u); coopStore(c11, &out[at + 1280u], 16u);
    coopStore(c12, &out[at + 1536u], 16u); coopStore(c13, &out[at + 1792u], 16u);
}
"#;

    /// The f32 probe kernel (256 threads, 8 x 8 outputs a thread as `tiled`): tags
    /// D (workgroup reads each k), S (the barrier a step) with R (the transposed
    /// stores of tiles read along k) or C (one vec4 store each, as k-major tiles), L
    /// (global loads), G (guarded floats) or V (vec4s).
    const TEMPLATE_F32: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> src4: array<vec4<f32>>;

const K: u32 = 384u;
const ROWS: u32 = 16384u;
var<workgroup> As: array<vec4<f32>, 512>;
var<workgroup> Bs: array<vec4<f32>, 512>;

// 4 floats of row `row`, k offsets k .. + 4 of a ROWS x K operand, zero outside.
fn fetch4(row: u32, k: u32, k_end: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
#G    if (row < ROWS) {
#G        let q = row * K + k;
#G        if (k < k_end) { v.x = src[q]; }
#G        if (k + 1u < k_end) { v.y = src[q + 1u]; }
#G        if (k + 2u < k_end) { v.z = src[q + 2u]; }
#G        if (k + 3u < k_end) { v.w = src[q + 3u]; }
#G    }
#V    v = src4[(row * K + k) / 4u];
#N    v = vec4<f32>(f32(row + k));
    return v;
}

// tiled's transposed store of a row-along-k tile: row t / 2, k offsets (t % 2) * 4.
fn put_rows(buf: u32, t: u32, v: vec4<f32>, b: bool) {
    let r = t / 2u;
    let base = (buf * 8u + (t % 2u) * 4u) * 32u + r / 4u;
    if (b) {
        Bs[base][r % 4u] = v.x; Bs[base + 32u][r % 4u] = v.y;
        Bs[base + 64u][r % 4u] = v.z; Bs[base + 96u][r % 4u] = v.w;
    } else {
        As[base][r % 4u] = v.x; As[base + 32u][r % 4u] = v.y;
        As[base + 64u][r % 4u] = v.z; As[base + 96u][r % 4u] = v.w;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    As[t] = vec4<f32>(src[t]); As[t + 256u] = src4[t];
    Bs[t] = vec4<f32>(src[t + 7u]); Bs[t + 256u] = src4[t + 3u];
    workgroupBarrier();
    let tx = t % 16u;
    let ty = t / 16u;
    let ra = (wg.x % 128u) * 128u + t / 2u;
    let rb = ((wg.x / 128u) % 128u) * 128u + t / 2u;
    let kt = (t % 2u) * 4u;
    var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0);
    var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0);
    var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
    var c40 = vec4<f32>(0.0); var c41 = vec4<f32>(0.0);
    var c50 = vec4<f32>(0.0); var c51 = vec4<f32>(0.0);
    var c60 = vec4<f32>(0.0); var c61 = vec4<f32>(0.0);
    var c70 = vec4<f32>(0.0); var c71 = vec4<f32>(0.0);
    var a0 = As[ty]; var a1 = As[ty + 16u]; var b0 = Bs[tx]; var b1 = Bs[tx + 16u];
    var x = vec4<f32>(0.0);
    var y = vec4<f32>(0.0);
    for (var st = 0u; st < STEPS; st++) {
        let cur = st % 2u;
        let k0 = ((st + 1u) * 8u) % K + kt;
#L        x = fetch4(ra, k0, K);
#L        y = fetch4(rb, k0, K);
        for (var kk = 0u; kk < 8u; kk++) {
            let base = (cur * 8u + kk) * 32u;
#D            a0 = As[base + ty]; a1 = As[base + ty + 16u];
#D            b0 = Bs[base + tx]; b1 = Bs[base + tx + 16u];
            c00 += a0.x * b0; c01 += a0.x * b1;
            c10 += a0.y * b0; c11 += a0.y * b1;
            c20 += a0.z * b0; c21 += a0.z * b1;
            c30 += a0.w * b0; c31 += a0.w * b1;
            c40 += a1.x * b0; c41 += a1.x * b1;
            c50 += a1.y * b0; c51 += a1.y * b1;
            c60 += a1.z * b0; c61 += a1.z * b1;
            c70 += a1.w * b0; c71 += a1.w * b1;
        }
#R        put_rows(1u - cur, t, x + f32(st), false);
#R        put_rows(1u - cur, t, y, true);
#C        // as k-major tiles are stored: one vec4 each, no transposing
#C        As[((1u - cur) * 8u + t / 32u) * 32u + t % 32u] = x + f32(st);
#C        Bs[((1u - cur) * 8u + t / 32u) * 32u + t % 32u] = y;
#S        workgroupBarrier();
    }
    let s = c00 + c01 + c10 + c11 + c20 + c21 + c30 + c31
        + c40 + c41 + c50 + c51 + c60 + c61 + c70 + c71;
    let at = (wg.x * 256u + t) * 4u;
    out[at] = s.x; out[at + 1u] = s.y; out[at + 2u] = s.z; out[at + 3u] = s.w;
}
"#;

    /// The two families.
    #[derive(Clone, Copy, PartialEq)]
    enum Family {
        /// Tensor cores (`coop2`'s loop).
        Coop,
        /// f32 FMAs (`tiled`'s loop).
        F32,
    }

    /// A probe: its family, name, the tags of the parts it keeps (F fragment loads,
    /// D workgroup reads, S stash and barrier (f32: with R or C, its stores), L
    /// global loads, G as floats or V as vec4s; H loads of operands stored as f16, 16
    /// bytes each; P the tiles as vec4<f16>, each stash store 4 halves, where Q lines
    /// (the tiles as halves) and U lines (their stash stores) go) and threads a
    /// workgroup.
    const PROBES: [(Family, &str, &str, u32); 20] = [
        (Family::Coop, "mma", "", 256),
        (Family::Coop, "mma+frag", "F", 256),
        (Family::Coop, "mma+frag+stash", "FS", 256),
        (Family::Coop, "+loads (floats)", "FSLG", 256),
        (Family::Coop, "+loads (vec4s)", "FSLV", 256),
        (Family::Coop, "+loads (f16 operands)", "FSH", 256),
        (Family::Coop, "stash, vec4<f16> tiles", "FSP", 256),
        (Family::Coop, "+loads, vec4<f16> tiles", "FSLVP", 256),
        (Family::Coop, "mma", "", 128),
        (Family::Coop, "mma+frag", "F", 128),
        (Family::Coop, "mma+frag+stash", "FS", 128),
        (Family::Coop, "+loads (floats)", "FSLG", 128),
        (Family::Coop, "+loads (vec4s)", "FSLV", 128),
        (Family::F32, "fma", "", 256),
        (Family::F32, "fma+lds", "D", 256),
        (Family::F32, "fma+lds+stash", "DSR", 256),
        (Family::F32, "+loads (floats)", "DSRLG", 256),
        (Family::F32, "+loads (vec4s)", "DSRLV", 256),
        (Family::F32, "stash as vec4s", "DSC", 256),
        (Family::F32, "+loads (vec4s), vec4 stash", "DSCLV", 256),
    ];

    /// Floating-point operations of one workgroup of a probe.
    fn flops_a_workgroup(family: Family, threads: u32) -> f64 {
        match family {
            // each subgroup: 16 products of 16x16x16 a step
            Family::Coop => (threads / 32) as f64 * STEPS as f64 * 16.0 * 2.0 * 4096.0,
            // each thread: 8 k a step, 64 FMAs each
            Family::F32 => threads as f64 * STEPS as f64 * 8.0 * 64.0 * 2.0,
        }
    }

    /// The probe's source: lines tagged with a part kept (untagged) or dropped.
    fn source(family: Family, threads: u32, parts: &str) -> String {
        let mut s = String::new();
        let loads = parts.contains('G') || parts.contains('V');
        let template = match family {
            Family::Coop => TEMPLATE,
            Family::F32 => TEMPLATE_F32,
        };
        for line in template.lines() {
            let kept = match line.strip_prefix('#').and_then(|l| l.chars().next()) {
                Some('N') => !loads,
                Some('Q') => !parts.contains('P'),
                Some('U') => parts.contains('S') && !parts.contains('P'),
                Some(tag) => parts.contains(tag),
                None => true,
            };
            if kept {
                s.push_str(
                    line.get(2..)
                        .filter(|_| line.starts_with('#'))
                        .unwrap_or(line),
                );
                s.push('\n');
            }
        }
        s.replace("WG)", &format!("{threads}u)"))
            .replace("WG;", &format!("{threads}u;"))
            .replace("WG /", &format!("{threads}u /"))
            .replace("STEPS", &format!("{STEPS}u"))
    }

    /// Where the probes cannot run: that their sources at least parse and validate.
    fn validate_sources() {
        use naga::valid::{Capabilities, ShaderStages, SubgroupOperationSet};
        for &(family, name, parts, threads) in &PROBES {
            {
                let source = source(family, threads, parts);
                let module = naga::front::wgsl::parse_str(&source)
                    .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&source)));
                naga::valid::Validator::new(Default::default(), Capabilities::all())
                    .subgroup_stages(ShaderStages::COMPUTE)
                    .subgroup_operations(SubgroupOperationSet::all())
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&source)));
            }
        }
        println!("the probes' sources are valid WGSL");
    }

    pub async fn run() {
        let json = std::env::args().any(|a| a == "--json");
        // --validate: only parse and validate the probes (make test runs this, with no
        // adapter needed).
        if std::env::args().any(|a| a == "--validate") {
            validate_sources();
            return;
        }
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .expect("an adapter");
        let info = adapter.get_info();
        println!("adapter: {} ({:?})", info.name, info.backend);
        if info.device_type == wgpu::DeviceType::Cpu {
            println!("no probes on a CPU adapter (they would take minutes)");
            validate_sources();
            return;
        }
        let needs = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        let has_16x16 = adapter.cooperative_matrix_properties().iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                && p.ab_type == wgpu::CooperativeScalarType::F16
                && p.cr_type == wgpu::CooperativeScalarType::F32
        });
        let coop = adapter.features().contains(needs) && has_16x16 && info.subgroup_min_size == 32;
        if !coop {
            println!("no tensor-core probes: the adapter lacks shader-f16, subgroups of 32 or 16x16x16 f16 -> f32 cooperative matrices");
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("gemm_ceiling"),
                required_features: if coop { needs } else { wgpu::Features::empty() },
                required_limits: adapter.limits(),
                // SAFETY: wgpu's token for its experimental features; the probes are
                // the shaders above, which index only inside their arrays.
                experimental_features: if coop {
                    unsafe { wgpu::ExperimentalFeatures::enabled() }
                } else {
                    wgpu::ExperimentalFeatures::disabled()
                },
                ..Default::default()
            })
            .await
            .expect("a device");

        let workgroups = 132 * 16;
        let out = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("out"),
            size: workgroups as u64 * 8 * 2048 * 4,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        let src = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("src"),
            // a 16384 x 384 operand (the forward's A)
            size: 16384 * 384 * 4,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        println!(
            "{:<6} {:<26} {:>7} {:>10} {:>10}",
            "family", "probe", "threads", "ms", "TFLOP/s"
        );
        for &(family, name, parts, threads) in &PROBES {
            if family == Family::Coop && !coop {
                continue;
            }
            {
                let module = unsafe {
                    // SAFETY: every index in the probes is inside its array.
                    device.create_shader_module_trusted(
                        wgpu::ShaderModuleDescriptor {
                            label: Some(name),
                            source: wgpu::ShaderSource::Wgsl(source(family, threads, parts).into()),
                        },
                        wgpu::ShaderRuntimeChecks::unchecked(),
                    )
                };
                let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(name),
                    layout: None,
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                });
                // The tensor-core probes also read the operand as f16 pairs (binding 3).
                let bindings = if family == Family::Coop { 4 } else { 3 };
                let entries: Vec<_> = (0..bindings)
                    .map(|binding| wgpu::BindGroupEntry {
                        binding,
                        resource: if binding == 0 { &out } else { &src }.as_entire_binding(),
                    })
                    .collect();
                let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &entries,
                });
                // The same work whatever the threads: 256-thread workgroups hold 8
                // subgroups, 128-thread ones 4, so twice as many of those.
                let groups = workgroups * 256 / threads;
                let batch = |reps: u32| {
                    let start = Instant::now();
                    let mut enc = device.create_command_encoder(&Default::default());
                    {
                        let mut pass = enc.begin_compute_pass(&Default::default());
                        pass.set_pipeline(&pipeline);
                        pass.set_bind_group(0, &bind, &[]);
                        for _ in 0..reps {
                            pass.dispatch_workgroups(groups, 1, 1);
                        }
                    }
                    let index = queue.submit([enc.finish()]);
                    device
                        .poll(wgpu::PollType::Wait {
                            submission_index: Some(index),
                            timeout: None,
                        })
                        .expect("the GPU finishes");
                    start.elapsed().as_secs_f64() / reps as f64
                };
                batch(2);
                let secs = batch(20).min(batch(20));
                let flops = groups as f64 * flops_a_workgroup(family, threads);
                let tflops = flops / secs / 1e12;
                let family = match family {
                    Family::Coop => "coop",
                    Family::F32 => "f32",
                };
                println!(
                    "{family:<6} {name:<26} {threads:>7} {:>10.3} {tflops:>10.1}",
                    secs * 1e3
                );
                if json {
                    let line = serde_json::json!({
                        "family": family, "probe": name, "threads": threads, "ms": secs * 1e3,
                        "tflops": tflops, "adapter": info.name,
                    });
                    println!("{line}");
                }
            }
        }
    }
}
