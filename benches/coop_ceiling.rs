//! What the tensor cores give through wgpu's cooperative matrices on this adapter,
//! one cost at a time: the ceiling the tensor-core GEMM cores (matmul_coop.wgsl)
//! work under. Each probe is the `coop2` core's inner loop with parts taken away:
//!
//! - `mma`: 8 accumulators a subgroup (2 A x 4 B fragments, as `coop2`), the
//!   fragments loaded once, then only multiply-adds;
//! - `mma+frag`: the 6 fragments loaded from workgroup memory before each 8
//!   multiply-adds, as `coop2` does;
//! - `mma+frag+stash`: and every 32-deep step each thread stores 32 halves into the
//!   other buffer and the workgroup meets at a barrier, as `coop2` does after its
//!   global loads (which this leaves out);
//! - each at 256 threads a workgroup (`coop2`'s) and at 128 (fewer registers a
//!   workgroup: more workgroups an SM where registers are what limits them).
//!
//! The GEMM itself is `matmul_bench`'s (gemm-sweep runs both in one call).
//! `cargo bench --bench coop_ceiling [-- --json]`; needs an adapter with shader-f16
//! and 16x16x16 f16 -> f32 cooperative matrices, and subgroups of 32.

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

const LD: u32 = 40u;
const BUF: u32 = 5120u;
const K: u32 = 384u;
var<workgroup> As: array<f16, 10240>;
var<workgroup> Bs: array<f16, 10240>;

// 4 floats of row `row`, k offsets k .. + 4 of a 16384 x K operand.
fn fetch4(row: u32, k: u32) -> vec4<f32> {
    let q = row * K + k;
#G    return vec4<f32>(src[q], src[q + 1u], src[q + 2u], src[q + 3u]);
#V    return src4[q / 4u];
#N    return vec4<f32>(f32(q));
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_id) s: u32,
) {
    // Something real in workgroup memory.
    for (var i = t; i < 10240u; i += WG) {
        As[i] = f16(src[i % 4096u]);
        Bs[i] = f16(src4[i % 1024u].y);
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
    var a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[sm * LD], LD);
    var a1 = coopLoadT<coop_mat16x16<f16, A>>(&As[(sm + 16u) * LD], LD);
    var b0 = coopLoad<coop_mat16x16<f16, B>>(&Bs[sn * LD], LD);
    var b1 = coopLoad<coop_mat16x16<f16, B>>(&Bs[(sn + 16u) * LD], LD);
    var b2 = coopLoad<coop_mat16x16<f16, B>>(&Bs[(sn + 32u) * LD], LD);
    var b3 = coopLoad<coop_mat16x16<f16, B>>(&Bs[(sn + 48u) * LD], LD);
    var x0 = vec4<f32>(0.0); var x1 = vec4<f32>(0.0); var x2 = vec4<f32>(0.0); var x3 = vec4<f32>(0.0);
    var y0 = vec4<f32>(0.0); var y1 = vec4<f32>(0.0); var y2 = vec4<f32>(0.0); var y3 = vec4<f32>(0.0);
    for (var st = 0u; st < STEPS; st++) {
        let cur = st % 2u;
        // The next step's 8 vec4s, issued before this step's products.
        let k0 = ((st + 1u) * 32u) % K + kt;
#L        x0 = fetch4(ra, k0); x1 = fetch4(ra, k0 + 8u); x2 = fetch4(ra, k0 + 16u); x3 = fetch4(ra, k0 + 24u);
#L        y0 = fetch4(rb, k0); y1 = fetch4(rb, k0 + 8u); y2 = fetch4(rb, k0 + 16u); y3 = fetch4(rb, k0 + 24u);
        for (var h = 0u; h < 2u; h++) {
            let kk = h * 16u;
#F            a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[cur * BUF + sm * LD + kk], LD);
#F            a1 = coopLoadT<coop_mat16x16<f16, A>>(&As[cur * BUF + (sm + 16u) * LD + kk], LD);
#F            b0 = coopLoad<coop_mat16x16<f16, B>>(&Bs[cur * BUF + sn * LD + kk], LD);
#F            b1 = coopLoad<coop_mat16x16<f16, B>>(&Bs[cur * BUF + (sn + 16u) * LD + kk], LD);
#F            b2 = coopLoad<coop_mat16x16<f16, B>>(&Bs[cur * BUF + (sn + 32u) * LD + kk], LD);
#F            b3 = coopLoad<coop_mat16x16<f16, B>>(&Bs[cur * BUF + (sn + 48u) * LD + kk], LD);
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
#S            As[at] = xs[q].x; As[at + 1u] = xs[q].y; As[at + 2u] = xs[q].z; As[at + 3u] = xs[q].w;
#S            Bs[at] = ys[q].x; Bs[at + 1u] = ys[q].y; Bs[at + 2u] = ys[q].z; Bs[at + 3u] = ys[q].w;
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

    /// A probe: its name and the tags of the parts it keeps (F fragment loads, S
    /// stash and barrier, L global loads, G as floats or V as vec4s).
    const PROBES: [(&str, &str); 5] = [
        ("mma", ""),
        ("mma+frag", "F"),
        ("mma+frag+stash", "FS"),
        ("+loads (floats)", "FSLG"),
        ("+loads (vec4s)", "FSLV"),
    ];

    /// The probe's source: lines tagged with a part kept (untagged) or dropped.
    fn source(threads: u32, parts: &str) -> String {
        let mut s = String::new();
        let loads = parts.contains('G') || parts.contains('V');
        for line in TEMPLATE.lines() {
            let kept = match line.strip_prefix('#').and_then(|l| l.chars().next()) {
                Some('N') => !loads,
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
        for threads in [256u32, 128] {
            for &(name, parts) in &PROBES {
                let source = source(threads, parts);
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
        let needs = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        let has_16x16 = adapter.cooperative_matrix_properties().iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                && p.ab_type == wgpu::CooperativeScalarType::F16
                && p.cr_type == wgpu::CooperativeScalarType::F32
        });
        if !adapter.features().contains(needs) || !has_16x16 || info.subgroup_min_size != 32 {
            println!("no probe: the adapter lacks shader-f16, subgroups of 32 or 16x16x16 f16 -> f32 cooperative matrices");
            validate_sources();
            return;
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("coop_ceiling"),
                required_features: needs,
                required_limits: adapter.limits(),
                // SAFETY: wgpu's token for its experimental features; the probes are
                // the shaders above, which index only inside their arrays.
                experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
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
            "{:<18} {:>7} {:>10} {:>10}",
            "probe", "threads", "ms", "TFLOP/s"
        );
        for threads in [256u32, 128] {
            for &(name, parts) in &PROBES {
                let module = unsafe {
                    // SAFETY: every index in the probes is inside its array.
                    device.create_shader_module_trusted(
                        wgpu::ShaderModuleDescriptor {
                            label: Some(name),
                            source: wgpu::ShaderSource::Wgsl(source(threads, parts).into()),
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
                let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 0,
                            resource: out.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: src.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: src.as_entire_binding(),
                        },
                    ],
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
                let subgroups = groups as f64 * (threads / 32) as f64;
                let flops = subgroups * STEPS as f64 * 16.0 * 2.0 * 4096.0;
                let tflops = flops / secs / 1e12;
                println!(
                    "{name:<18} {threads:>7} {:>10.3} {tflops:>10.1}",
                    secs * 1e3
                );
                if json {
                    let line = serde_json::json!({
                        "probe": name, "threads": threads, "ms": secs * 1e3,
                        "tflops": tflops, "adapter": info.name,
                    });
                    println!("{line}");
                }
            }
        }
    }
}
