// Causal self-attention backward on tensor cores (attention_backward.wgsl has the
// formulas): with p_ij = exp(s_ij - lse_i), dp_ij = m_ij dout_i · v_j (m the dropout
// factor) and D_i = dout_i · out_i (attention_dsum.wgsl, once a row):
// ds_ij = p_ij (dp_ij - D_i); dq_i = scale sum_j ds_ij k_j, dk_j = scale sum_i ds_ij
// q_i, dv_j = sum_i p_ij m_ij dout_i. q, k, v, dout, p m and ds are rounded to f16,
// every product summed in f32 by 16x16x16 cooperative matrices. dout is multiplied
// by G (a power of two, prepended by attention_coop.rs) before rounding and the
// gradients by 1 / G after: dout's elements (about 1e-6 and below) would otherwise
// fall to f16's subnormals, and ds with them. attention_coop.rs prepends the
// `enable` lines and G, and writes each line holding #J out once a vec4 of a lane's
// weights (0, 1).
//
// One dispatch, no atomics: the first ceil(t / 64) workgroups of each (batch, head)
// are dq blocks (64 queries, streaming keys 16 at a time up to the diagonal), the
// rest dk/dv blocks (64 keys, streaming queries 16 at a time from their first key).
// Both have one shape: 64 resident rows of two tensors (`ra`, `rb`: q scaled and
// dout G, or k and v), 16 streamed rows of two (`sa`, `sb`: k and v, or q scaled
// and dout G). Subgroup s of 4 owns resident rows s * 16 .. + 16 and each step works
// out X = ra sa^T (scores) and Y = rb sb^T (dout · v) for them, 16 x 16, through
// its strips of `xs` and `ys`; lane l takes resident row l / 2, streamed rows
// (l % 2) * 8 .. + 8, and writes ds (and, for dk/dv, p m) in f16 to its `w1` / `w2`
// strips; then dq += ds sa (k), or dv += p m sb (dout) and dk += ds sa (q scaled),
// in 4 (or 8) accumulators that stay in registers over the whole stream.
//
// The dropout decisions are the forward's, stored after the rows' logsumexps in
// `stats` (attention_coop.wgsl has the layout): a dq lane's 8 keys are 8 bits of one
// word of its query's row, a dk/dv lane's 8 queries one bit of a word of each
// query's row (the 16 lanes of a subgroup's half read the same 8 words).
//
// Two barriers a step, and what waits on memory is started a phase early. The streamed tiles are double-buffered: a step's loads are
// issued a step ahead into registers (`Ahead`) and stored into the other buffer
// between the step's two barriers, once every subgroup has passed the first (and so
// has finished the products of the step before, the last to read that buffer). The
// strips need no barrier of their own: each subgroup writes and reads only its own,
// and the barrier between a step's weights and its products orders each strip's
// reads before the next step's writes.
//
// Every cooperative operation is in the section at the end, which
// tests/attention_coop.rs swaps for plain WGSL to run this on devices without them.
struct Params { t: u32, c: u32, nh: u32, hs: u32, scale: f32, seed: u32, threshold: u32, keep_scale: f32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dout: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> stats: array<u32>;
@group(0) @binding(4) var<storage, read> dsum: array<f32>;
@group(0) @binding(5) var<storage, read_write> dqkv: array<vec4<f32>>;

const BR: u32 = 64u;
const BS: u32 = 16u;
const HS: u32 = 64u;
// Row strides in halves (the f16 tiles) or floats (the f32 strips), each a
// subgroup's share: fragment loads and stores of 8 rows fall in distinct banks.
const LDH: u32 = 72u;
const LDW: u32 = 24u;
const LDX: u32 = 20u;
const WSUB: u32 = 384u; // 16 x LDW
const XSUB: u32 = 320u; // 16 x LDX
// One streamed tile, BS x LDH halves; `sa` and `sb` hold two (the step's, the next).
const STILE: u32 = 1152u;

var<workgroup> ra: array<f16, 4608>; // BR x LDH
var<workgroup> rb: array<f16, 4608>;
var<workgroup> sa: array<f16, 2304>; // 2 x STILE
var<workgroup> sb: array<f16, 2304>;
var<workgroup> w1: array<f16, 1536>; // 4 x WSUB, [resident][streamed]
var<workgroup> w2: array<f16, 1536>;
var<workgroup> xs: array<f32, 1280>; // 4 x XSUB
var<workgroup> ys: array<f32, 1280>;
// dk/dv blocks: lse and D of the streamed queries, 2 x BS (the step's, the next).
var<workgroup> lse_s: array<f32, 32>;
var<workgroup> dsum_s: array<f32, 32>;

// Channels 4 d4 .. + 4 of tensor `which` (0 q, 1 k, 2 v of qkv; 3 dout) at (batch
// bi, position ti, head h), zero past hs and past t.
fn load4(bi: u32, ti: u32, which: u32, h: u32, d4: u32) -> vec4<f32> {
    if (ti >= p.t || 4u * d4 >= p.hs) {
        return vec4<f32>(0.0);
    }
    if (which == 3u) {
        return dout[((bi * p.t + ti) * p.c + h * p.hs) / 4u + d4];
    }
    return qkv[((bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs) / 4u + d4];
}

// What a tensor is multiplied by before rounding: q by the scores' scale, dout by G.
fn prescale(which: u32) -> f32 {
    if (which == 0u) {
        return p.scale;
    }
    return select(1.0, G, which == 3u);
}

fn put4(tile: u32, at: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    switch tile {
        case 0u: { ra[at] = h.x; ra[at + 1u] = h.y; ra[at + 2u] = h.z; ra[at + 3u] = h.w; }
        case 1u: { rb[at] = h.x; rb[at + 1u] = h.y; rb[at + 2u] = h.z; rb[at + 3u] = h.w; }
        case 2u: { sa[at] = h.x; sa[at + 1u] = h.y; sa[at + 2u] = h.z; sa[at + 3u] = h.w; }
        default: { sb[at] = h.x; sb[at + 1u] = h.y; sb[at + 2u] = h.z; sb[at + 3u] = h.w; }
    }
}

// Rows r0 .. r0 + rows of tensor `which` into resident tile `tile` (0 ra, 1 rb),
// 16 threads a row. Bounded by the tile: rows * 16 / 128 loads.
fn stage(tile: u32, bi: u32, h: u32, r0: u32, rows: u32, which: u32, t: u32) {
    let scale = prescale(which);
    for (var e = t; e < rows * 16u; e += 128u) {
        let r = e / 16u;
        let d4 = e % 16u;
        put4(tile, r * LDH + d4 * 4u, load4(bi, r0 + r, which, h, d4) * scale);
    }
}

// A thread's share of one streamed step, loaded a step before its tiles are staged:
// vec4 t % 16 of rows t / 16 and t / 16 + 8 of both streamed tensors and, for dk/dv
// blocks (threads t < BS), query t's lse and D (G-scaled).
struct Ahead { a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>, lse: f32, dsum: f32 }

// The step of streamed rows s0 .. + BS: tensors wa (into `sa`) and wb (`sb`).
fn fetch(bi: u32, h: u32, bh: u32, s0: u32, wa: u32, wb: u32, dq: bool, t: u32) -> Ahead {
    let r = s0 + t / 16u;
    let d4 = t % 16u;
    var n = Ahead(load4(bi, r, wa, h, d4), load4(bi, r + 8u, wa, h, d4),
        load4(bi, r, wb, h, d4), load4(bi, r + 8u, wb, h, d4), 0.0, 0.0);
    if (!dq && t < BS) {
        let qi = min(s0 + t, p.t - 1u);
        n.lse = bitcast<f32>(stats[bh * p.t + qi]);
        n.dsum = dsum[bh * p.t + qi] * G;
    }
    return n;
}

// A fetched step into buffer `buf` of the streamed tiles (and of lse_s, dsum_s).
fn put_ahead(n: Ahead, buf: u32, wa: u32, wb: u32, dq: bool, t: u32) {
    let at = buf * STILE + (t / 16u) * LDH + (t % 16u) * 4u;
    put4(2u, at, n.a0 * prescale(wa));
    put4(2u, at + 8u * LDH, n.a1 * prescale(wa));
    put4(3u, at, n.b0 * prescale(wb));
    put4(3u, at + 8u * LDH, n.b1 * prescale(wb));
    if (!dq && t < BS) {
        lse_s[buf * BS + t] = n.lse;
        dsum_s[buf * BS + t] = n.dsum;
    }
}

fn strip4(x: bool, at: u32) -> vec4<f32> {
    if (x) {
        return vec4<f32>(xs[at], xs[at + 1u], xs[at + 2u], xs[at + 3u]);
    }
    return vec4<f32>(ys[at], ys[at + 1u], ys[at + 2u], ys[at + 3u]);
}

fn put_w(w: u32, at: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    if (w == 1u) {
        w1[at] = h.x; w1[at + 1u] = h.y; w1[at + 2u] = h.z; w1[at + 3u] = h.w;
    } else {
        w2[at] = h.x; w2[at + 1u] = h.y; w2[at + 2u] = h.z; w2[at + 3u] = h.w;
    }
}

// 4 channels of a gradient to dqkv part `which` at (bi, ti, h), channel vec4 d4.
fn store4(bi: u32, ti: u32, which: u32, h: u32, d4: u32, v: vec4<f32>) {
    if (ti < p.t && 4u * d4 < p.hs) {
        dqkv[((bi * p.t + ti) * 3u * p.c + which * p.c + h * p.hs) / 4u + d4] = v;
    }
}

// An accumulator (16 resident rows x 16 channels c0 ..) through the subgroup's `xs`
// strip to part `which` of dqkv, times `factor`: lane l writes row l / 2, channels
// c0 + (l % 2) * 8 .. + 8.
fn flush(acc: coop_mat16x16<f32, C>, s: u32, lane: u32, bi: u32, h: u32, row0: u32,
    which: u32, c0: u32, factor: f32) {
    store_x(acc, s * XSUB);
    workgroupBarrier();
    let at = s * XSUB + (lane / 2u) * LDX + (lane % 2u) * 8u;
    let ti = row0 + s * 16u + lane / 2u;
    let d4 = (c0 + (lane % 2u) * 8u) / 4u;
    store4(bi, ti, which, h, d4, strip4(true, at) * factor);
    store4(bi, ti, which, h, d4 + 1u, strip4(true, at + 4u) * factor);
    workgroupBarrier();
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) s: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let bh = wg.y;
    let bi = bh / p.nh;
    let h = bh % p.nh;
    let blocks = (p.t + BR - 1u) / BR;
    // Workgroup-uniform: dq blocks from the last (the most keys), dk/dv blocks from
    // the first (the most queries).
    let dq = wg.x < blocks;
    let row0 = select((wg.x - blocks) * BR, (blocks - 1u - wg.x) * BR, dq);
    let r = lane / 2u;
    let half = lane % 2u;
    // This lane's resident row and its 8 streamed rows' offset in a step.
    let ri = row0 + s * 16u + r;
    let xat = s * XSUB + r * LDX + half * 8u;
    let wat = s * WSUB + r * LDW + half * 8u;

    stage(0u, bi, h, row0, BR, select(1u, 0u, dq), t);
    stage(1u, bi, h, row0, BR, select(2u, 3u, dq), t);
    // dq blocks: this lane's query's lse and D (G-scaled), once.
    let ri_c = min(ri, p.t - 1u);
    let lse_r = bitcast<f32>(stats[bh * p.t + ri_c]);
    // The forward's mask: words a row, and where (bh, 0)'s row starts.
    let mask_words = (p.t + 15u) / 16u;
    let mask_bh = nwg.y * p.t + bh * p.t * mask_words;
    let dsum_r = dsum[bh * p.t + ri_c] * G;

    var a0 = zero_acc(); var a1 = zero_acc(); var a2 = zero_acc(); var a3 = zero_acc();
    var b0 = zero_acc(); var b1 = zero_acc(); var b2 = zero_acc(); var b3 = zero_acc();
    // dq: keys 0 .. the block's last query; dk/dv: queries from the block's first
    // key to t.
    let s_begin = select(row0, 0u, dq);
    let s_end = select(p.t, min(row0 + BR, p.t), dq);
    // The streamed tensors: dq blocks k and v; dk/dv blocks q and dout.
    let wa = select(0u, 1u, dq);
    let wb = select(3u, 2u, dq);
    var ahead = fetch(bi, h, bh, s_begin, wa, wb, dq, t);
    put_ahead(ahead, 0u, wa, wb, dq, t);
    if (s_begin + BS < s_end) {
        ahead = fetch(bi, h, bh, s_begin + BS, wa, wb, dq, t);
    }
    workgroupBarrier();
    var buf = 0u;
    for (var s0 = s_begin; s0 < s_end; s0 += BS) {
        let st = buf * STILE;
        // Streamed rows s0 + half * 8 + 4j .. + 4: the pair (query i, key k) of each.
        let sj#J = vec4<u32>(s0 + half * 8u + 4u * #Ju) + vec4<u32>(0u, 1u, 2u, 3u);
        let qi#J = select(sj#J, vec4<u32>(ri), dq);
        let kj#J = select(vec4<u32>(ri), sj#J, dq);
        let ok#J = (kj#J <= qi#J) & (qi#J < vec4<u32>(p.t));
        // Bit 4j + c: whether the weight of pair c of vec4 j survives dropout (all set
        // without), read from the forward's mask here, before the products, whose
        // time the loads' latency hides behind.
        var kbits = 0xffffffffu;
        if (p.threshold != 0u) {
            if (dq) {
                // Keys s0 + half * 8 .. + 8 of query ri: word s0 / 16 (s0 is a
                // multiple of 16), bits half * 8 .. + 8.
                kbits = (stats[mask_bh + ri_c * mask_words + s0 / 16u] >> (half * 8u)) & 0xffu;
            } else {
                // Key ri of queries s0 + half * 8 + n: bit ri % 16 of word ri / 16 of
                // each query's row (queries past t read the last row: `ok` drops them).
                let kw = ri_c / 16u;
                let kb = ri_c % 16u;
                kbits = 0u;
                for (var n = 0u; n < 8u; n++) {
                    let q = min(s0 + half * 8u + n, p.t - 1u);
                    kbits |= ((stats[mask_bh + q * mask_words + kw] >> kb) & 1u) << n;
                }
            }
        }
        var x = zero_acc();
        var y = zero_acc();
        // Bounded by the head: 4 steps of 16 channels.
        for (var d = 0u; d < HS; d += 16u) {
            x = mma(ra_frag(s * 16u * LDH + d), sa_frag_t(st + d), x);
            y = mma(rb_frag(s * 16u * LDH + d), sb_frag_t(st + d), y);
        }
        store_x(x, s * XSUB);
        store_y(y, s * XSUB);
        workgroupBarrier();

        // The next step's tiles into the other buffer, then the loads of the one after.
        // Workgroup-uniform: s0, s_end and BS are the workgroup's.
        if (s0 + BS < s_end) {
            put_ahead(ahead, 1u - buf, wa, wb, dq, t);
            if (s0 + 2u * BS < s_end) {
                ahead = fetch(bi, h, bh, s0 + 2u * BS, wa, wb, dq, t);
            }
        }

        let sl#J = buf * BS + half * 8u + 4u * #Ju;
        let lse#J = select(vec4<f32>(lse_s[sl#J], lse_s[sl#J + 1u], lse_s[sl#J + 2u], lse_s[sl#J + 3u]), vec4<f32>(lse_r), dq);
        let dd#J = select(vec4<f32>(dsum_s[sl#J], dsum_s[sl#J + 1u], dsum_s[sl#J + 2u], dsum_s[sl#J + 3u]), vec4<f32>(dsum_r), dq);
        let pr#J = select(vec4<f32>(0.0), exp(strip4(true, xat + 4u * #Ju) - lse#J), ok#J);
        let mk#J = select(vec4<f32>(0.0), vec4<f32>(p.keep_scale), ((vec4<u32>(kbits >> (4u * #Ju)) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)) != vec4<u32>(0u));
        let ds#J = pr#J * (strip4(false, xat + 4u * #Ju) * mk#J - dd#J);
        put_w(1u, wat + 4u * #Ju, select(pr#J * mk#J, ds#J, dq));
        put_w(2u, wat + 4u * #Ju, ds#J);
        workgroupBarrier();

        // dq: a += ds k. dk/dv: a += p m dout (dv), b += ds q (dk). Both branches
        // run their products on every subgroup (uniform: `dq` is the workgroup's).
        let f1 = w1_frag(s * WSUB);
        let f2 = w2_frag(s * WSUB);
        if (dq) {
            a0 = mma(f1, sa_frag(st), a0);
            a1 = mma(f1, sa_frag(st + 16u), a1);
            a2 = mma(f1, sa_frag(st + 32u), a2);
            a3 = mma(f1, sa_frag(st + 48u), a3);
        } else {
            a0 = mma(f1, sb_frag(st), a0);
            a1 = mma(f1, sb_frag(st + 16u), a1);
            a2 = mma(f1, sb_frag(st + 32u), a2);
            a3 = mma(f1, sb_frag(st + 48u), a3);
            b0 = mma(f2, sa_frag(st), b0);
            b1 = mma(f2, sa_frag(st + 16u), b1);
            b2 = mma(f2, sa_frag(st + 32u), b2);
            b3 = mma(f2, sa_frag(st + 48u), b3);
        }
        buf = 1u - buf;
    }
    // Each subgroup flushes through its own strip of `xs`, which its lanes last read
    // before the last step's second barrier.
    if (dq) {
        let f = p.scale / G;
        flush(a0, s, lane, bi, h, row0, 0u, 0u, f);
        flush(a1, s, lane, bi, h, row0, 0u, 16u, f);
        flush(a2, s, lane, bi, h, row0, 0u, 32u, f);
        flush(a3, s, lane, bi, h, row0, 0u, 48u, f);
    } else {
        // q was staged scaled: b is dk already.
        let f = 1.0 / G;
        flush(a0, s, lane, bi, h, row0, 2u, 0u, f);
        flush(a1, s, lane, bi, h, row0, 2u, 16u, f);
        flush(a2, s, lane, bi, h, row0, 2u, 32u, f);
        flush(a3, s, lane, bi, h, row0, 2u, 48u, f);
        flush(b0, s, lane, bi, h, row0, 1u, 0u, f);
        flush(b1, s, lane, bi, h, row0, 1u, 16u, f);
        flush(b2, s, lane, bi, h, row0, 1u, 32u, f);
        flush(b3, s, lane, bi, h, row0, 1u, 48u, f);
    }
}

// ---- cooperative operations ----
// The accumulators (f32); the f16 fragments of the staged tiles: A, 16 rows x 16
// of ra, rb (channels), w1, w2 (streamed rows), row-major; B, 16 channels x 16
// streamed rows of sa or sb (`_t`: column-major), or 16 streamed rows x 16
// channels (row-major); one multiply-add; the stores to `xs` and `ys`.
fn zero_acc() -> coop_mat16x16<f32, C> {
    return coop_mat16x16<f32, C>();
}

fn ra_frag(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&ra[at], LDH);
}

fn rb_frag(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&rb[at], LDH);
}

fn w1_frag(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&w1[at], LDW);
}

fn w2_frag(at: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&w2[at], LDW);
}

fn sa_frag_t(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoad<coop_mat16x16<f16, B>>(&sa[at], LDH);
}

fn sb_frag_t(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoad<coop_mat16x16<f16, B>>(&sb[at], LDH);
}

fn sa_frag(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&sa[at], LDH);
}

fn sb_frag(at: u32) -> coop_mat16x16<f16, B> {
    return coopLoadT<coop_mat16x16<f16, B>>(&sb[at], LDH);
}

fn mma(a: coop_mat16x16<f16, A>, b: coop_mat16x16<f16, B>, c: coop_mat16x16<f32, C>) -> coop_mat16x16<f32, C> {
    return coopMultiplyAdd(a, b, c);
}

fn store_x(acc: coop_mat16x16<f32, C>, at: u32) {
    coopStoreT(acc, &xs[at], LDX);
}

fn store_y(acc: coop_mat16x16<f32, C>, at: u32) {
    coopStoreT(acc, &ys[at], LDX);
}
