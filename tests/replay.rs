//! The replay's speed and arithmetic: the same results as a straightforward
//! quadratic reference (below), 100,000 events in about a second, plans cut short
//! still valid, and sizes near 2^64 refused or saturated, never wrapped.
#![cfg(not(target_arch = "wasm32"))]

mod snapshot_fixture;

use std::collections::BTreeMap;

use proptest::prelude::*;
use tidepool::pool::SizePolicy;
use tidepool::replay::{self, Tensor};

/// The replay the plain way: every placed tensor scanned for each new one, each
/// pool's free sizes scanned for a non-empty one.
mod straightforward {
    use super::*;

    fn overlaps(a: &Tensor, b: &Tensor) -> bool {
        a.start < b.end && b.start < a.end
    }

    pub fn lower_bound(tensors: &[Tensor]) -> u64 {
        let mut edges: Vec<(u32, i64)> = Vec::new();
        for t in tensors {
            edges.push((t.start, t.size as i64));
            edges.push((t.end, -(t.size as i64)));
        }
        edges.sort_by_key(|&(at, delta)| (at, delta));
        let (mut live, mut peak) = (0i64, 0i64);
        for (_, delta) in edges {
            live += delta;
            peak = peak.max(live);
        }
        peak as u64
    }

    /// (peak, created, hits)
    pub fn pool(
        tensors: &[Tensor],
        policy: SizePolicy,
        fit_ratio: u32,
        max: u64,
    ) -> (u64, u64, u64) {
        let mut events: Vec<(u32, bool, usize)> = Vec::new();
        for (i, t) in tensors.iter().enumerate() {
            events.push((t.start, true, i));
            events.push((t.end, false, i));
        }
        events.sort();
        let class_of = |t: &Tensor| -> (u64, bool) {
            let class = policy.size_class(t.size as usize) as u64;
            if t.poolable && class <= max {
                (class, true)
            } else {
                (t.size.div_ceil(4) * 4, false)
            }
        };
        let fit = u64::from(fit_ratio.max(1));
        let mut free: BTreeMap<u64, u64> = BTreeMap::new();
        let (mut in_use, mut held, mut peak, mut created, mut hits) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut given = vec![0u64; tensors.len()];
        for pass in 0..replay::MAX_PASSES {
            let before = created;
            for &(_, birth, i) in &events {
                let (class, pooled) = class_of(&tensors[i]);
                if birth {
                    let fit = if class < tidepool::pool::FIT_MIN_BYTES as u64 {
                        1
                    } else {
                        fit
                    };
                    let limit = class.saturating_mul(fit).min(max);
                    let slot = if pooled {
                        free.range_mut(class..=limit).find(|(_, n)| **n > 0)
                    } else {
                        None
                    };
                    let size = match slot {
                        Some((&size, n)) => {
                            *n -= 1;
                            held -= size;
                            hits += u64::from(pass == 0);
                            size
                        }
                        None => {
                            created += 1;
                            class
                        }
                    };
                    given[i] = size;
                    in_use += size;
                    peak = peak.max(in_use + held);
                } else {
                    in_use -= given[i];
                    if pooled {
                        *free.entry(given[i]).or_default() += 1;
                        held += given[i];
                    }
                }
            }
            if pass > 0 && created == before {
                break;
            }
        }
        (peak, created, hits)
    }

    pub fn object_plan(tensors: &[Tensor]) -> (Vec<usize>, Vec<u64>) {
        let aligned = |t: &Tensor| t.size.max(1).div_ceil(4) * 4;
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(aligned(&tensors[i])), tensors[i].start, i));
        let mut object = vec![0usize; tensors.len()];
        let mut sizes: Vec<u64> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for i in order {
            let t = &tensors[i];
            let fits = |o: usize| {
                members[o]
                    .iter()
                    .all(|&j| tensors[j].poolable && !overlaps(&tensors[j], t))
            };
            let best = t
                .poolable
                .then(|| {
                    (0..sizes.len())
                        .filter(|&o| fits(o))
                        .min_by_key(|&o| (sizes[o], o))
                })
                .flatten();
            let o = best.unwrap_or_else(|| {
                sizes.push(aligned(t));
                members.push(Vec::new());
                sizes.len() - 1
            });
            members[o].push(i);
            object[i] = o;
        }
        (object, sizes)
    }

    pub fn offset_plan(tensors: &[Tensor]) -> Vec<u64> {
        let a = replay::OFFSET_ALIGNMENT;
        let aligned = |t: &Tensor| t.size.max(1).div_ceil(a) * a;
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(aligned(&tensors[i])), tensors[i].start, i));
        let mut offsets = vec![0u64; tensors.len()];
        let mut placed: Vec<usize> = Vec::new();
        for i in order {
            let size = aligned(&tensors[i]);
            let mut neighbours: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&j| overlaps(&tensors[j], &tensors[i]))
                .map(|&j| (offsets[j], offsets[j] + aligned(&tensors[j])))
                .collect();
            neighbours.sort_unstable();
            let (mut top, mut best): (u64, Option<(u64, u64)>) = (0, None);
            for (start, end) in neighbours {
                if start >= top {
                    let gap = start - top;
                    if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                        best = Some((gap, top));
                    }
                }
                top = top.max(end);
            }
            offsets[i] = best.map_or(top, |(_, at)| at);
            placed.push(i);
        }
        offsets
    }
}

/// Random tensors, some sharing sizes (equal sizes tie in the plans' orders and
/// buffers); lifetimes from `min_len` events.
fn tensors_from(min_len: u32) -> impl Strategy<Value = Vec<Tensor>> {
    let size = prop_oneof![1u64..300_000, Just(4096u64), Just(65_536u64), 0u64..3];
    prop::collection::vec((size, 0u32..80, min_len..40, any::<bool>()), 0..90).prop_map(|v| {
        v.into_iter()
            .map(|(size, start, len, poolable)| Tensor {
                size,
                start,
                end: start + len,
                poolable,
            })
            .collect()
    })
}

/// Tensors as traces make them: each dies after it is born. (The straightforward
/// replay let a tensor born and dead at one position underflow its pool.)
fn tensors() -> impl Strategy<Value = Vec<Tensor>> {
    tensors_from(1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_same_results_as_the_straightforward_replay(t in tensors()) {
        prop_assert_eq!(replay::lower_bound(&t), straightforward::lower_bound(&t));
        let max = 1 << 20;
        for policy in replay::policies() {
            for fit in [1, 2, 4, 8] {
                let row = replay::replay_pool(&t, policy, fit, max);
                prop_assert_eq!(
                    (row.peak_bytes, row.buffers_created, row.hits),
                    straightforward::pool(&t, policy, fit, max),
                    "{} fit {}", policy.label(), fit
                );
            }
        }
        prop_assert_eq!(replay::object_plan(&t), straightforward::object_plan(&t));
        prop_assert_eq!(replay::offset_plan(&t), straightforward::offset_plan(&t));
    }

    /// Cut short after a few pairs, the plans stay valid: no two tensors live
    /// together share a buffer or overlap in the arena.
    #[test]
    fn plans_cut_short_stay_valid(t in tensors_from(0), work in 0u64..40) {
        let live_together = |a: &Tensor, b: &Tensor| a.start < b.end && b.start < a.end;
        let objects = replay::object_plan_within(&t, work);
        let offsets = replay::offset_plan_within(&t, work);
        let (object, sizes) = &objects.plan;
        let span = |i: usize| {
            let a = replay::OFFSET_ALIGNMENT;
            (offsets.plan[i], offsets.plan[i] + t[i].size.max(1).div_ceil(a) * a)
        };
        for i in 0..t.len() {
            prop_assert!(sizes[object[i]] >= t[i].size);
            for j in 0..i {
                if live_together(&t[i], &t[j]) {
                    prop_assert!(object[i] != object[j]);
                    let (a, b) = (span(i), span(j));
                    prop_assert!(a.1 <= b.0 || b.1 <= a.0);
                }
            }
        }
        let full = replay::object_plan_within(&t, u64::MAX);
        prop_assert!(full.complete);
        prop_assert_eq!(&full.plan, &replay::object_plan(&t));
    }
}

/// 100,000 events of a training-like step (activations born forward, dying
/// backward, temporaries in between, a few tensors live throughout) and of random
/// lifetimes: every row of the replay in about a second of CPU each (the bound
/// allows three).
#[test]
fn a_hundred_thousand_events_replay_in_about_a_second() {
    let mut rng = tidepool::rng::Rng::new(7);
    let mut training = Vec::new();
    let mut at = 0u32;
    let mut stack = Vec::new();
    while (at as usize) < 100_000 {
        for layer in 0..48u64 {
            at += 1;
            stack.push(Tensor {
                size: 4096 * (layer % 7 + 1) * 64,
                start: at,
                end: 0,
                poolable: true,
            });
            for _ in 0..3 {
                let size = 1 + rng.below(1 << 22) as u64;
                training.push(Tensor {
                    size,
                    start: at + 1,
                    end: at + 3,
                    poolable: true,
                });
                at += 2;
            }
        }
        while let Some(mut t) = stack.pop() {
            at += 1;
            t.end = at;
            training.push(t);
        }
    }
    for i in 0..20u32 {
        training.push(Tensor {
            size: 1 << 20,
            start: 0,
            end: at + i + 1,
            poolable: i % 2 == 0,
        });
    }
    let random: Vec<Tensor> = (0..50_000)
        .map(|_| {
            let start = rng.below(100_000) as u32;
            let len = match rng.below(10) {
                0 => rng.below(100_000),
                _ => rng.below(200),
            } as u32;
            Tensor {
                size: 1 + rng.below(1 << 24) as u64,
                start,
                end: start + len + 1,
                poolable: rng.below(8) != 0,
            }
        })
        .collect();
    for (name, t) in [("training", &training), ("random", &random)] {
        // CPU time: what the replay costs, whatever else the machine runs.
        let time = |what: &str, f: &dyn Fn() -> String| {
            let (started, cpu) = (std::time::Instant::now(), snapshot_fixture::cpu_ms());
            let out = f();
            let seconds = (snapshot_fixture::cpu_ms() - cpu) / 1e3;
            let wall = started.elapsed().as_secs_f64();
            println!("  {what:<14} {seconds:>6.2} s CPU ({wall:.2} s wall)  {out}");
            seconds
        };
        println!("{name}: {} tensors", t.len());
        let mut total = time("lower bound", &|| replay::lower_bound(t).to_string());
        for policy in replay::policies() {
            total += time(&policy.label(), &|| {
                replay::replay_policy(t, policy, 1 << 30)
                    .peak_bytes
                    .to_string()
            });
        }
        for (policy, fit) in replay::fitting_pools() {
            total += time(&replay::pool_label(policy, fit), &|| {
                replay::replay_pool(t, policy, fit, 1 << 30)
                    .peak_bytes
                    .to_string()
            });
        }
        total += time("object plan", &|| {
            let p = replay::object_plan_within(t, replay::PLAN_WORK);
            format!("{} buffers, complete {}", p.plan.1.len(), p.complete)
        });
        total += time("offset plan", &|| {
            let p = replay::offset_plan_within(t, replay::PLAN_WORK);
            format!("{}, complete {}", replay::plan_peak(t, &p.plan), p.complete)
        });
        println!("  all rows {total:.2} s CPU");
        assert!(total < 3.0, "{name}: {total:.2} s");
    }
}

/// Sizes near 2^64: refused up front, and the replays themselves saturate.
#[test]
fn sizes_near_two_to_the_64_never_wrap() {
    let huge = [
        Tensor {
            size: u64::MAX - 3,
            start: 0,
            end: 2,
            poolable: true,
        },
        Tensor {
            size: u64::MAX / 2,
            start: 1,
            end: 3,
            poolable: false,
        },
    ];
    let err = replay::check_sizes(&huge).unwrap_err();
    assert!(err.contains("2^59"), "{err}");
    assert_eq!(replay::lower_bound(&huge), u64::MAX);
    for row in replay::rows(&huge, 1 << 30) {
        assert!(row.peak_bytes >= u64::MAX / 2, "{row:?}");
    }
    let fine = [Tensor {
        size: replay::MAX_TOTAL_BYTES,
        start: 0,
        end: 1,
        poolable: true,
    }];
    assert!(replay::check_sizes(&fine).is_ok());
}
