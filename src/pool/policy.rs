//! [`SizePolicy`]: how a requested size is rounded up to the size class of its
//! bucket.

/// Every buffer size the pool hands out is a multiple of this (wgpu's copy and
/// binding alignment).
pub const SIZE_ALIGNMENT: usize = 4;

/// `min_size` rounded up to [`SIZE_ALIGNMENT`] (at least one alignment), or itself
/// when that would overflow.
pub(super) fn exact_size(min_size: usize) -> usize {
    min_size
        .max(SIZE_ALIGNMENT)
        .checked_next_multiple_of(SIZE_ALIGNMENT)
        .unwrap_or(min_size)
}

/// How a requested size is rounded up to the size class of its bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SizePolicy {
    /// The next power of two (`BufferPool`'s documented rule): few buckets and the most reuse, at
    /// up to 2x the requested bytes.
    #[default]
    PowerOfTwo,
    /// Each octave split into `subdivisions` equal steps (PyTorch's
    /// `roundup_power2_divisions`): a 1200-byte request with 4 subdivisions gets 1280.
    /// Wastes at most 1/`subdivisions` of an octave.
    Subdivided { subdivisions: u32 },
    /// The size itself, rounded to [`SIZE_ALIGNMENT`]: no waste, but a buffer is only
    /// reused by a request of exactly its size (fine for static-shape training).
    Exact,
    /// A training step's tensors at the ranges of a plan made from one traced step
    /// ([`crate::planner`]); what the plan did not foresee (the traced step itself,
    /// evaluation, sampling) is pooled at [`SizePolicy::Exact`] classes.
    Planned,
}

/// Most subdivisions of an octave [`SizePolicy::parse`] accepts: finer steps than
/// 1/1024 of an octave save nothing measurable and only multiply the buckets, and
/// an unbounded count would overflow the step arithmetic.
pub const MAX_SUBDIVISIONS: u32 = 1024;

impl SizePolicy {
    /// The size class of a request of `min_size` bytes under this policy, in u64
    /// with checked arithmetic: `None` when the class would not fit in a u64 (no
    /// buffer that large exists anywhere).
    pub fn class_bytes(self, min_size: u64) -> Option<u64> {
        let align = SIZE_ALIGNMENT as u64;
        let min_size = min_size.max(align);
        match self {
            SizePolicy::PowerOfTwo => min_size.checked_next_power_of_two(),
            SizePolicy::Subdivided { subdivisions } => {
                let pow2 = min_size.checked_next_power_of_two()?;
                let octave = pow2 / 2;
                let divs = u64::from(subdivisions.clamp(1, MAX_SUBDIVISIONS)).next_power_of_two();
                // Steps below the alignment cannot be honoured; plain pow2 there.
                if octave < align * divs {
                    return Some(pow2);
                }
                let step = octave / divs;
                min_size.div_ceil(step).checked_mul(step)
            }
            SizePolicy::Exact | SizePolicy::Planned => min_size.div_ceil(align).checked_mul(align),
        }
    }

    /// [`SizePolicy::class_bytes`] for a host-sized request. A class that does not
    /// fit in a `usize` (a 3 GiB request rounded to 4 GiB on wasm32) falls back to
    /// the request itself rounded to the alignment, so rounding never wraps.
    pub fn size_class(self, min_size: usize) -> usize {
        self.class_bytes(min_size as u64)
            .and_then(|class| usize::try_from(class).ok())
            .unwrap_or_else(|| exact_size(min_size))
    }

    /// Short label for tables and the page.
    pub fn label(self) -> String {
        match self {
            SizePolicy::PowerOfTwo => "pow2".into(),
            SizePolicy::Subdivided { subdivisions } => format!("pow2/{subdivisions}"),
            SizePolicy::Exact => "exact".into(),
            SizePolicy::Planned => "planned".into(),
        }
    }

    /// Parses the labels [`SizePolicy::label`] writes (`pow2`, `pow2/4`, `exact`,
    /// `planned`).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "pow2" => Ok(SizePolicy::PowerOfTwo),
            "exact" => Ok(SizePolicy::Exact),
            "planned" => Ok(SizePolicy::Planned),
            _ => match text.strip_prefix("pow2/").map(str::parse::<u32>) {
                Some(Ok(n)) if (1..=MAX_SUBDIVISIONS).contains(&n) && n.is_power_of_two() => {
                    Ok(SizePolicy::Subdivided { subdivisions: n })
                }
                _ => Err(format!(
                    "unknown size policy {text:?}: expected pow2, pow2/N (N a power of two \
                     from 1 to {MAX_SUBDIVISIONS}), exact or planned"
                )),
            },
        }
    }
}

// Policies cross to JSON and JS as their labels ("pow2", "pow2/4", "exact").
impl serde::Serialize for SizePolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.label())
    }
}

impl<'de> serde::Deserialize<'de> for SizePolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let label = String::deserialize(d)?;
        SizePolicy::parse(&label).map_err(serde::de::Error::custom)
    }
}
