// The integer hash behind every dropout mask (joined in front of the kernels that
// apply one: embedding, matmul epilogues, layernorm backward, attention): murmur3's
// 32-bit finaliser, every input bit affects every output bit. reference::dropout computes the same in Rust.
fn mix(v: u32) -> u32 {
    var h = v;
    h ^= h >> 16u;
    h *= 0x85ebca6bu;
    h ^= h >> 13u;
    h *= 0xc2b2ae35u;
    h ^= h >> 16u;
    return h;
}


// Whether element i of the dropout mask seeded `seed` is kept: 24 bits of its hash
// against the drop probability scaled to 2^24 (reference::kept).
fn kept(seed: u32, i: u32, threshold: u32) -> bool {
    return (mix(seed ^ mix(i)) >> 8u) >= threshold;
}
