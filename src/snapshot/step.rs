//! The training step in a recording of several: the period of its allocations and
//! frees, and which events to replay.
//!
//! Each allocation and each free is a symbol, its kind and size. A training step
//! repeats them in the same order, so the step's length is the shift `p` at which
//! the sequence best matches itself (`s[i] == s[i + p]` for the most `i`); layers
//! repeat too, at shorter shifts, but match less (the head, the loss and the
//! optimizer differ), and multiples of the step match as well as the step, so the
//! shortest of the best is taken. Shifts worth trying: the distances from each
//! symbol to its next occurrence (a symbol once a step recurs one step later) and
//! between the occurrences of the rarest symbols; each is scored on a sample, the
//! best few on every position.
//!
//! A step with a few extra allocations (an evaluation, a log) would shift every
//! later comparison off by as many, so the full score follows such shifts: at a
//! mismatch it looks up to [`DRIFT`] symbols either way for the next [`RESYNC`]
//! symbols to match again, and the period is the shift most matches were made at.
//!
//! The step replayed is the last whole period, starting where the fewest bytes are
//! live (between steps: after the optimizer, before the forward pass).

use rustc_hash::FxHashMap;

use super::Recording;

/// The self-match a period needs to count as the step.
pub const MIN_MATCH: f64 = 0.9;

/// Positions scored for each candidate shift before the best are scored in full.
const SAMPLES: usize = 4096;
/// Candidate shifts: the most frequent next-occurrence distances, and those of the
/// rarest symbols.
const TOP_DISTANCES: usize = 32;
const RARE_SYMBOLS: usize = 4;
const RARE_OCCURRENCES: usize = 64;
/// Candidates scored on every position.
const FULL_SCORES: usize = 8;
/// Shifts matching within this of the best are as good: the shortest wins.
const TIE: f64 = 0.005;
/// How far the full score follows a shift off the period, and how many symbols
/// must match for it to follow.
pub const DRIFT: usize = 16;
pub const RESYNC: usize = 4;

/// The repetition found.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Period {
    /// The step's length in allocations and frees.
    pub symbols: u32,
    /// Whole steps in the recording.
    pub repeats: u32,
    /// The fraction of allocations and frees that the same one a step later matches.
    pub matched: f64,
}

/// Events `first..=last` (positions, see [`Recording`]) of a recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub first: u32,
    pub last: u32,
}

impl Window {
    /// The whole recording.
    pub fn all(recording: &Recording) -> Window {
        Window {
            first: 1,
            last: recording.events,
        }
    }

    pub fn len(&self) -> u32 {
        (self.last + 1).saturating_sub(self.first)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The allocations and frees in order: (position, symbol).
pub fn symbols(recording: &Recording) -> (Vec<u32>, Vec<u64>) {
    let n = recording.events as usize;
    let mut at = vec![0u64; n + 2];
    for a in &recording.allocations {
        if (1..=n).contains(&(a.start as usize)) {
            at[a.start as usize] = mix(a.size.wrapping_mul(2)) | 1;
        }
        if (1..=n).contains(&(a.end as usize)) {
            at[a.end as usize] = mix(a.size.wrapping_mul(2) + 1) | 1;
        }
    }
    let mut positions = Vec::new();
    let mut syms = Vec::new();
    for (p, &s) in at.iter().enumerate() {
        if s != 0 {
            positions.push(p as u32);
            syms.push(s);
        }
    }
    (positions, syms)
}

/// Matches of `s[i] == s[i + p]` over `i` in steps of `stride`, and the positions
/// compared.
fn matches(s: &[u64], p: usize, stride: usize) -> (usize, usize) {
    let (mut hit, mut seen) = (0, 0);
    let mut i = 0;
    while i + p < s.len() {
        hit += usize::from(s[i] == s[i + p]);
        seen += 1;
        i += stride;
    }
    (hit, seen)
}

fn score(s: &[u64], p: usize, stride: usize) -> f64 {
    let (hit, seen) = matches(s, p, stride);
    hit as f64 / seen.max(1) as f64
}

/// The fraction of `s[i]` that match `s[i + o]`, `o` starting at `p` and following
/// shifts of up to [`DRIFT`] (see the module docs), and the shift most matches into
/// the last `p` symbols were made at (the steady end, not a first step's extras).
fn aligned(s: &[u64], p: usize) -> (f64, usize) {
    let n = s.len();
    let (lo, hi) = (p.saturating_sub(DRIFT).max(1), p + DRIFT);
    let mut at = vec![0u32; hi - lo + 1];
    let (mut o, mut i, mut hits) = (p, 0, 0usize);
    let mut tried: Option<usize> = None;
    while i + o < n {
        if s[i] == s[i + o] {
            hits += 1;
            if i + o + p >= n {
                at[o - lo] += 1;
            }
            i += 1;
            continue;
        }
        if tried.is_none_or(|t| i >= t + RESYNC) {
            tried = Some(i);
            let ahead =
                |o: usize| i + o + RESYNC <= n && s[i..i + RESYNC] == s[i + o..i + o + RESYNC];
            let found = (1..=DRIFT)
                .flat_map(|d| [o.wrapping_sub(d), o + d])
                .find(|&o2| (lo..=hi).contains(&o2) && ahead(o2));
            if let Some(o2) = found {
                o = o2;
                continue;
            }
        }
        i += 1;
    }
    let best = (0..at.len()).max_by_key(|&k| (at[k], std::cmp::Reverse(k)));
    let shift = best.map_or(p, |k| k + lo);
    (hits as f64 / (n - p.min(n)).max(1) as f64, shift)
}

/// The period of `s`, if it repeats at least twice with [`MIN_MATCH`].
pub fn period(s: &[u64]) -> Option<Period> {
    let n = s.len();
    if n < 4 {
        return None;
    }
    let max_shift = n / 2;
    let mut candidates: Vec<usize> = Vec::new();
    // Distances to the next occurrence, by how often they occur.
    let mut last: FxHashMap<u64, usize> = FxHashMap::default();
    let mut count: FxHashMap<u64, u32> = FxHashMap::default();
    let mut distances: FxHashMap<usize, u32> = FxHashMap::default();
    for (i, &x) in s.iter().enumerate() {
        *count.entry(x).or_default() += 1;
        if let Some(j) = last.insert(x, i) {
            if i - j <= max_shift {
                *distances.entry(i - j).or_default() += 1;
            }
        }
    }
    let mut by_count: Vec<(u32, usize)> = distances.into_iter().map(|(d, c)| (c, d)).collect();
    by_count.sort_unstable_by_key(|&(c, d)| (std::cmp::Reverse(c), d));
    candidates.extend(by_count.iter().take(TOP_DISTANCES).map(|&(_, d)| d));
    // The rarest symbols that repeat: the distances between their occurrences.
    let mut rare: Vec<(u32, u64)> = count
        .iter()
        .filter(|&(_, &c)| c >= 2)
        .map(|(&x, &c)| (c, x))
        .collect();
    rare.sort_unstable();
    for &(_, x) in rare.iter().take(RARE_SYMBOLS) {
        let at: Vec<usize> = s
            .iter()
            .enumerate()
            .filter(|&(_, &y)| y == x)
            .map(|(i, _)| i)
            .take(RARE_OCCURRENCES)
            .collect();
        candidates.extend(at[1..].iter().map(|&i| i - at[0]));
    }
    candidates.retain(|&p| (1..=max_shift).contains(&p));
    candidates.sort_unstable();
    candidates.dedup();

    let mut sampled: Vec<(f64, usize)> = candidates
        .iter()
        .map(|&p| (score(s, p, ((n - p) / SAMPLES).max(1)), p))
        .collect();
    sampled.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let full: Vec<(f64, usize)> = sampled
        .iter()
        .take(FULL_SCORES)
        .map(|&(_, p)| aligned(s, p))
        .collect();
    let best = full.iter().map(|&(m, _)| m).fold(0.0, f64::max);
    let (matched, p) = full
        .into_iter()
        .filter(|&(m, p)| m >= best - TIE && p <= max_shift)
        .min_by_key(|&(_, p)| p)?;
    (matched >= MIN_MATCH).then_some(Period {
        symbols: p as u32,
        repeats: (n / p) as u32,
        matched,
    })
}

/// The step to replay and the period it came from (`None`: no repetition, the
/// whole recording).
pub fn find(recording: &Recording) -> (Window, Option<Period>) {
    let (positions, syms) = symbols(recording);
    let Some(period) = period(&syms) else {
        return (Window::all(recording), None);
    };
    // Bytes live just after each position.
    let n = recording.events as usize;
    let (mut born, mut died) = (vec![0u64; n + 2], vec![0u64; n + 2]);
    for a in &recording.allocations {
        let (start, end) = (a.start as usize, (a.end as usize).min(n + 1));
        born[start] = born[start].saturating_add(a.size);
        died[end] = died[end].saturating_add(a.size);
    }
    let mut live = vec![0u64; n + 1];
    let mut now = 0u64;
    for p in 0..=n {
        now = now.saturating_add(born[p]).saturating_sub(died[p]);
        live[p] = now;
    }
    // The last whole period, starting where the fewest bytes are live.
    let p = period.symbols as usize;
    let count = syms.len();
    let starts = count.saturating_sub(2 * p)..=count - p;
    let a = starts
        .min_by_key(|&a| (live[positions[a] as usize - 1], a))
        .unwrap_or(0);
    let first = positions[a];
    let last = match positions.get(a + p) {
        Some(&next) => next - 1,
        None => recording.events,
    };
    (Window { first, last }, Some(period))
}
