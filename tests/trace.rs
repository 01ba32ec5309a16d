//! The allocation trace on a real device (native and browser), and the replay of
//! traces without one.

mod common;

use std::borrow::Cow;

use tidepool::pool::SizePolicy;
use tidepool::replay;
use tidepool::snapshot;
use tidepool::trace::{EventKind, StepTrace, Trace, TraceEvent};
use tidepool::train::{TrainConfig, Trainer};

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

fn small_config() -> TrainConfig {
    TrainConfig {
        layers: 2,
        width: 32,
        heads: 2,
        context: 16,
        batch: 2,
        ..TrainConfig::preset("tiny").unwrap()
    }
}

/// Every byte of a traced step is accounted for: the running `in_use` follows the
/// births and deaths, the last event agrees with the context's counters, every
/// event has an op, and creations match the step's counters.
fn check_step(step: &StepTrace, created: u64, in_use_now: u64, held_now: u64) {
    let mut in_use = step.in_use_at_start;
    let mut creates = 0;
    for (i, e) in step.events.iter().enumerate() {
        assert_eq!(e.seq as usize, i, "sequence numbers run from 0");
        assert!(!e.op.is_empty(), "event {i} ({:?}) has no op", e.kind);
        assert!(e.class >= e.requested, "event {i}: class below the request");
        if e.kind.is_birth() {
            in_use += e.class;
        } else if e.kind.is_death() {
            in_use -= e.class;
        } else if e.kind == EventKind::Create {
            creates += 1;
        }
        assert_eq!(e.in_use, in_use, "event {i} ({:?}): in_use", e.kind);
        assert!(e.buffer > 0, "event {i}: a buffer id");
        assert_eq!(e.cause.is_some(), e.kind == EventKind::Reject);
    }
    assert_eq!(creates, created, "create events against the step's counter");
    let last = step.events.last().expect("events");
    assert_eq!(last.in_use, in_use_now);
    assert_eq!(last.held, held_now);
}

gpu_test!(a_traced_step_accounts_for_every_byte, traced_step_body());
async fn traced_step_body() {
    let mut trainer = Trainer::new(small_config(), common::corpus())
        .await
        .expect("trainer");
    assert!(!trainer.context().tracing(), "off by default");
    let (first, step1) = trainer.step_traced("first").await.expect("step");
    assert!(!trainer.context().tracing());
    let counters = trainer.context().counters();
    let held = trainer.context().pool_stats().bytes_held;
    check_step(
        &step1,
        first.buffers_created_step,
        counters.bytes_in_use,
        held,
    );
    assert!(step1.events.iter().any(|e| e.kind == EventKind::Miss));
    assert!(
        step1.events.iter().any(|e| e.layer == Some(1)),
        "the model names its blocks"
    );
    assert!(step1.events.iter().any(|e| e.op.starts_with("matmul")));

    // Untraced steps record nothing.
    trainer.step().await.expect("step");
    trainer.step().await.expect("step");
    let (steady, step4) = trainer.step_traced("steady").await.expect("step");
    let counters = trainer.context().counters();
    let held = trainer.context().pool_stats().bytes_held;
    check_step(
        &step4,
        steady.buffers_created_step,
        counters.bytes_in_use,
        held,
    );
    assert!(
        step4
            .events
            .iter()
            .all(|e| matches!(e.kind, EventKind::Hit | EventKind::Release)),
        "a steady step only hits and releases"
    );

    // The step's own peak of reserved bytes: at least what it ends with.
    let peak = step4.peak_reserved.expect("recorded");
    assert!(peak >= counters.bytes_in_use + held, "{peak}");

    // The file round-trips, and its replay respects the lower bound.
    let mut trace = trainer.context().new_trace();
    trace.steps = vec![step1, step4];
    let back = Trace::from_json(&trace.to_json()).expect("parses");
    assert_eq!(back, trace);
    let report = snapshot::report(trace.to_json().as_bytes(), &Default::default()).expect("reads");
    assert_eq!(report.steps.len(), 2);
    for s in &report.steps {
        let r = &s.replay;
        assert!(r.lower_bound > 0);
        for row in &r.rows {
            assert!(row.peak_bytes >= r.lower_bound, "{}: {row:?}", r.label);
        }
    }
}

gpu_test!(
    a_planned_step_is_traced_at_its_planned_ranges,
    planned_step_body()
);
/// Under the planned policy a steady step's births at arena ranges come in the
/// plan's order: each at the range `WgpuContext::memory_plan` gives, in the arena
/// it names, and dies at the same offset. The step's peak reserved is the run's.
async fn planned_step_body() {
    let cfg = TrainConfig {
        policy: SizePolicy::Planned,
        ..small_config()
    };
    let mut trainer = Trainer::new(cfg, common::corpus()).await.expect("trainer");
    assert_eq!(
        trainer.context().memory_plan(),
        None,
        "no plan before a step"
    );
    trainer.step().await.expect("step");
    let (_, step) = trainer.step_traced("steady").await.expect("step");
    let plan = trainer
        .context()
        .memory_plan()
        .expect("a plan after a step");
    assert!(!plan.arenas.is_empty() && plan.arenas.iter().all(|a| a.buffer > 0));
    assert_eq!(
        plan.reserved,
        plan.arenas.iter().map(|a| a.bytes).sum::<u64>()
    );
    let counters = trainer.context().counters();
    assert_eq!(plan.reserved, counters.arena_bytes);
    let arena_of = |buffer: u64| plan.arenas.iter().position(|a| a.buffer == buffer);
    let births: Vec<_> = step
        .events
        .iter()
        .filter(|e| e.kind.is_birth() && e.offset.is_some())
        .collect();
    assert_eq!(
        births.len(),
        plan.ranges.len(),
        "every planned tensor, once"
    );
    for (e, r) in births.iter().zip(&plan.ranges) {
        assert_eq!(arena_of(e.buffer), Some(r.arena as usize), "{e:?}");
        assert_eq!((e.offset, e.class), (Some(r.offset), r.size), "{e:?}");
        assert!(r.offset + r.size <= plan.arenas[r.arena as usize].bytes);
    }
    let deaths = step
        .events
        .iter()
        .filter(|e| e.kind.is_death() && e.offset.is_some());
    let mut born: Vec<_> = births.iter().map(|e| (e.buffer, e.offset)).collect();
    let mut died: Vec<_> = deaths.map(|e| (e.buffer, e.offset)).collect();
    born.sort_unstable();
    died.sort_unstable();
    assert_eq!(born, died, "each range dies where it was born");
    assert_eq!(step.peak_reserved, Some(counters.peak_bytes_reserved));
}

/// A step's tensors, as every replay reads them (`tidepool::snapshot::own`).
fn tensors(step: &StepTrace) -> Vec<replay::Tensor> {
    let trace = Trace::new("test", "pow2", 1 << 30);
    snapshot::own::recording(step, &trace)
        .expect("reads")
        .tensors()
}

fn event(seq: u32, kind: EventKind, buffer: u64, requested: u64) -> TraceEvent {
    TraceEvent {
        seq,
        kind,
        op: Cow::Borrowed("test"),
        layer: None,
        purpose: Cow::Borrowed("storage"),
        requested,
        class: requested,
        buffer,
        offset: None,
        cause: None,
        in_use: 0,
        held: 0,
    }
}

/// A: 1000 bytes over positions 1..3, B: 3000 over 2..5, C: 900 over 4..6 (C takes
/// A's buffer). Peaks worked out by hand in the comments.
#[test]
fn replay_of_a_hand_built_step() {
    use EventKind::*;
    let step = StepTrace {
        events: vec![
            event(0, Miss, 1, 1000),
            event(1, Miss, 2, 3000),
            event(2, Release, 1, 1000),
            event(3, Hit, 1, 900),
            event(4, Release, 2, 3000),
            event(5, Release, 1, 900),
        ],
        ..Default::default()
    };
    let tensors = tensors(&step);
    assert_eq!(tensors.len(), 3);
    // Most live at once: A + B = 4000 (B + C is 3900).
    assert_eq!(replay::lower_bound(&tensors), 4000);
    let max = 1 << 30;
    // pow2: A, C in 1024, B in 4096; C reuses A's buffer: 1024 + 4096.
    let pow2 = replay::replay_policy(&tensors, SizePolicy::PowerOfTwo, max);
    assert_eq!(
        (pow2.peak_bytes, pow2.buffers_created, pow2.hits),
        (5120, 2, 1)
    );
    // pow2/4: steps of 128 below 1024 and 512 below 4096: 1024 and 3072.
    let quarter = SizePolicy::Subdivided { subdivisions: 4 };
    let q = replay::replay_policy(&tensors, quarter, max);
    assert_eq!((q.peak_bytes, q.buffers_created, q.hits), (4096, 2, 1));
    // exact: C (900) cannot take A's 1000; at C's birth 3000 + 900 in use + 1000 held.
    let exact = replay::replay_policy(&tensors, SizePolicy::Exact, max);
    assert_eq!(
        (exact.peak_bytes, exact.buffers_created, exact.hits),
        (4900, 3, 0)
    );
    // Plan (sizes rounded to 256): B (3072) at 0; A overlaps B: at 3072; C overlaps
    // B but not A: at 3072 too. Arena 4096.
    let offsets = replay::offset_plan(&tensors);
    assert_eq!(offsets, vec![3072, 0, 3072]);
    assert_eq!(replay::plan_peak(&tensors, &offsets), 4096);
    // exact with fit 4: C's class (900) is empty and A's free 1000 is within 4x,
    // but classes below FIT_MIN_BYTES only take their own: plain exact.
    const { assert!(1000 < tidepool::pool::FIT_MIN_BYTES) };
    let fit = replay::replay_pool(&tensors, SizePolicy::Exact, 4, max);
    assert_eq!(
        (fit.peak_bytes, fit.buffers_created, fit.hits),
        (4900, 3, 0)
    );
    assert_eq!(fit.allocator, "exact fit4");
    let fit1 = replay::replay_pool(&tensors, SizePolicy::Exact, 1, max);
    assert_eq!((fit1.peak_bytes, fit1.allocator.as_str()), (4900, "exact"));
    // Object plan: B alone (3000); A and C share one buffer of A's size (1000).
    let (object, sizes) = replay::object_plan(&tensors);
    assert_eq!(sizes, vec![3000, 1000]);
    assert_eq!(object, vec![1, 0, 1]);
}

/// A fitting pool on a step where a request's own class is empty while a larger
/// free buffer is within the ratio.
#[test]
fn a_fitting_pool_serves_from_a_larger_free_buffer() {
    use EventKind::*;
    // A (100 kB) and B (400 kB) live together and die; then C (120 kB) and D
    // (100 kB) live together.
    let k = 1000;
    let step = StepTrace {
        events: vec![
            event(0, Miss, 1, 100 * k),
            event(1, Miss, 2, 400 * k),
            event(2, Release, 1, 100 * k),
            event(3, Release, 2, 400 * k),
            event(4, Hit, 2, 120 * k),
            event(5, Hit, 1, 100 * k),
            event(6, Release, 2, 120 * k),
            event(7, Release, 1, 100 * k),
        ],
        ..Default::default()
    };
    let t = tensors(&step);
    assert_eq!(replay::lower_bound(&t), 500 * k);
    // Exact: 100, 400, then 120 (none free: a new one), 100 reused: 620 kB.
    let exact = replay::replay_pool(&t, SizePolicy::Exact, 1, 1 << 30);
    assert_eq!((exact.peak_bytes, exact.buffers_created), (620 * k, 3));
    // Fit 4: the 120 takes the free 400 (the smallest within 480), the 100 its own:
    // 500 kB, and a second pass on the warm pool creates nothing more.
    let fit = replay::replay_pool(&t, SizePolicy::Exact, 4, 1 << 30);
    assert_eq!(
        (fit.peak_bytes, fit.buffers_created, fit.hits),
        (500 * k, 2, 2)
    );
}

#[test]
fn tensors_live_at_the_start_or_the_end_of_a_step() {
    use EventKind::*;
    let step = StepTrace {
        events: vec![event(0, Release, 7, 500), event(1, Miss, 8, 600)],
        ..Default::default()
    };
    let t = tensors(&step);
    assert_eq!((t[0].start, t[0].end), (0, 1), "carried in");
    assert_eq!((t[1].start, t[1].end), (2, 3), "carried out");
    assert_eq!(replay::lower_bound(&t), 600, "never live together");
}

#[test]
fn a_trace_file_of_another_format_is_refused() {
    let err = Trace::from_json(
        r#"{"format":"x","version":1,"adapter":"","policy":"pow2","max_buffer_size":4,"steps":[]}"#,
    )
    .unwrap_err();
    assert!(err.contains("tidepool-trace"), "{err}");
    assert!(Trace::from_json("[1,2").is_err());
}

#[cfg(not(target_arch = "wasm32"))]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use tidepool::replay::Tensor;

    fn tensors() -> impl Strategy<Value = Vec<Tensor>> {
        prop::collection::vec((1u64..200_000, 0u32..60, 1u32..30, any::<bool>()), 1..60).prop_map(
            |v| {
                v.into_iter()
                    .map(|(size, start, len, poolable)| Tensor {
                        size,
                        start,
                        end: start + len,
                        poolable,
                    })
                    .collect()
            },
        )
    }

    struct Fake;
    impl tidepool::pool::Poolable for Fake {
        fn destroy(&self) {}
    }

    /// `t` run through a real `BufferPool` (no caps, `take` with `fit`) pass after
    /// pass until one creates nothing, as the replay does: (peak bytes reserved,
    /// buffers created).
    fn through_the_pool(t: &[Tensor], policy: SizePolicy, fit: u32) -> (u64, u64) {
        use tidepool::pool::{BufferPool, BufferPoolConfig};
        let pool = BufferPool::<Fake>::with_config(BufferPoolConfig {
            max_buffers_per_bucket: usize::MAX,
            max_total_buffers: usize::MAX,
            max_bytes: u64::MAX,
            policy,
            fit_ratio: fit,
            ..Default::default()
        });
        let mut events: Vec<(u32, bool, usize)> = Vec::new();
        for (i, x) in t.iter().enumerate() {
            events.push((x.start, true, i));
            events.push((x.end, false, i));
        }
        events.sort();
        let (mut in_use, mut peak, mut created) = (0u64, 0u64, 0u64);
        let mut given = vec![None; t.len()];
        for pass in 0..replay::MAX_PASSES {
            let before = created;
            for &(_, birth, i) in &events {
                let n = t[i].size as usize;
                if birth {
                    let size = match t[i].poolable.then(|| pool.take(n)) {
                        Some(Ok((Fake, size))) => size,
                        Some(Err(size)) => {
                            created += 1;
                            size
                        }
                        None => {
                            created += 1;
                            n.div_ceil(4) * 4
                        }
                    };
                    given[i] = Some(size);
                    in_use += size as u64;
                    peak = peak.max(in_use + pool.bytes_held());
                } else {
                    let size = given[i].take().expect("born before it dies");
                    in_use -= size as u64;
                    if t[i].poolable {
                        assert!(pool.release(Fake, size));
                    }
                }
            }
            if pass > 0 && created == before {
                break;
            }
        }
        (peak, created)
    }

    proptest! {
        #[test]
        fn the_offset_plan_never_overlaps_two_live_tensors(t in tensors()) {
            let offsets = replay::offset_plan(&t);
            let span = |i: usize| {
                let size = t[i].size.div_ceil(replay::OFFSET_ALIGNMENT) * replay::OFFSET_ALIGNMENT;
                (offsets[i], offsets[i] + size)
            };
            for i in 0..t.len() {
                prop_assert_eq!(offsets[i] % replay::OFFSET_ALIGNMENT, 0);
                for j in 0..i {
                    let live_together = t[i].start < t[j].end && t[j].start < t[i].end;
                    let (a, b) = (span(i), span(j));
                    let disjoint = a.1 <= b.0 || b.1 <= a.0;
                    prop_assert!(!live_together || disjoint, "{:?} {:?} at {:?} {:?}", t[i], t[j], a, b);
                }
            }
        }

        #[test]
        fn the_object_plan_never_shares_a_buffer_between_live_tensors(t in tensors()) {
            let (object, sizes) = replay::object_plan(&t);
            for i in 0..t.len() {
                prop_assert!(sizes[object[i]] >= t[i].size, "{:?} in {}", t[i], sizes[object[i]]);
                for j in 0..i {
                    let live_together = t[i].start < t[j].end && t[j].start < t[i].end;
                    let shared = object[i] == object[j];
                    prop_assert!(!(live_together && shared), "{:?} {:?} share {}", t[i], t[j], object[i]);
                    prop_assert!(!shared || (t[i].poolable && t[j].poolable), "unpoolable tensors own their buffer");
                }
            }
        }

        /// The replay of a fitting pool is what `BufferPool::take` does with the
        /// same requests.
        #[test]
        fn a_fitting_replay_is_what_the_pool_does(
            t in tensors(),
            fit in 1u32..9,
            policy in prop_oneof![
                Just(SizePolicy::PowerOfTwo),
                Just(SizePolicy::Subdivided { subdivisions: 8 }),
                Just(SizePolicy::Exact),
            ],
        ) {
            let row = replay::replay_pool(&t, policy, fit, 1 << 30);
            let (peak, created) = through_the_pool(&t, policy, fit);
            prop_assert_eq!((row.peak_bytes, row.buffers_created), (peak, created));
        }

        #[test]
        fn the_lower_bound_is_below_every_allocator(t in tensors()) {
            let lower = replay::lower_bound(&t);
            let offsets = replay::offset_plan(&t);
            prop_assert!(replay::plan_peak(&t, &offsets) >= lower);
            for policy in replay::policies() {
                let row = replay::replay_policy(&t, policy, 1 << 30);
                prop_assert!(row.peak_bytes >= lower, "{}: {} < {}", row.allocator, row.peak_bytes, lower);
            }
            for (policy, fit) in replay::fitting_pools() {
                let row = replay::replay_pool(&t, policy, fit, 1 << 30);
                prop_assert!(row.peak_bytes >= lower, "{}: {} < {}", row.allocator, row.peak_bytes, lower);
            }
            let (_, sizes) = replay::object_plan(&t);
            prop_assert!(sizes.iter().sum::<u64>() >= lower);
            // And it is reached: some position has exactly `lower` bytes live.
            let live_at = |p: u32| t.iter().filter(|x| x.start <= p && p < x.end).map(|x| x.size).sum::<u64>();
            prop_assert!(t.iter().any(|x| live_at(x.start) == lower));
        }
    }
}

/// The page's entry points: `Trainer.trace()`'s JSON replays through `replayTrace`,
/// and a text that is not a trace is a clear error, not a trap.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
async fn replay_trace_from_js() {
    use wasm_bindgen::JsValue;
    let mut trainer = Trainer::new(small_config(), common::corpus())
        .await
        .expect("trainer");
    let (_, step) = trainer.step_traced("first").await.expect("step");
    let mut trace = trainer.context().new_trace();
    trace.steps.push(step);
    let report = tidepool::web::replay_trace(js_sys::JsString::from(trace.to_json()).into())
        .expect("replays");
    let steps = js_sys::Array::from(&js_sys::Reflect::get(&report, &"steps".into()).unwrap());
    assert_eq!(steps.length(), 1, "one step");
    let replayed = js_sys::Reflect::get(&steps.get(0), &"replay".into()).unwrap();
    let lower = js_sys::Reflect::get(&replayed, &JsValue::from_str("lower_bound"))
        .unwrap()
        .as_f64()
        .unwrap();
    let expected = snapshot::report(trace.to_json().as_bytes(), &Default::default()).unwrap();
    assert_eq!(lower as u64, expected.steps[0].replay.lower_bound);
    let err =
        tidepool::web::replay_trace(js_sys::JsString::from("{\"format\": 3}").into()).unwrap_err();
    let message = js_sys::Reflect::get(&err, &JsValue::from_str("message")).unwrap();
    assert!(message
        .as_string()
        .unwrap()
        .contains("not a tidepool trace"));
    let kind = js_sys::Reflect::get(&err, &JsValue::from_str("kind")).unwrap();
    assert_eq!(kind.as_string().as_deref(), Some("trace"));
}
