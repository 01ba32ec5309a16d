//! PyTorch memory snapshots and tidepool's traces through one reader
//! (`tidepool::snapshot`): the figures PyTorch reports, the step found, hostile files
//! refused with kind `trace`, and the time a 100 MB snapshot takes. Natively and in
//! headless Chromium (`wasm-pack test --headless --chrome --release -- --test snapshot`).

mod snapshot_fixture;

use snapshot_fixture as fixture;
use tidepool::snapshot::report::Chosen;
use tidepool::snapshot::{self, Options, Report};
use tidepool::Error;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// `both!(name, body)`: a native `#[test]` and a browser `#[wasm_bindgen_test]`.
macro_rules! both {
    ($(#[$doc:meta])* $name:ident, $body:block) => {
        $(#[$doc])*
        #[cfg_attr(not(target_arch = "wasm32"), test)]
        #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
        fn $name() $body
    };
}

/// Written by tests/fixtures/snapshots/synthetic.py with Python's pickle.
const SYNTHETIC: &[u8] = include_bytes!("fixtures/snapshots/synthetic_gpt.pickle");
const SYNTHETIC_FIGURES: &str = include_str!("fixtures/snapshots/synthetic_gpt.json");
const TWO_DEVICES: &[u8] = include_bytes!("fixtures/snapshots/synthetic_two_devices.pickle");
const TWO_DEVICES_FIGURES: &str = include_str!("fixtures/snapshots/synthetic_two_devices.json");

fn figure(json: &str, name: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(json).expect("figures");
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} in {json}"))
}

fn report(bytes: &[u8]) -> Report {
    snapshot::report(bytes, &Options::default()).expect("reads")
}

/// A trace file of one step, `policy`'s, holding `events`.
fn one_step_trace(
    policy: &str,
    events: Vec<tidepool::trace::TraceEvent>,
    peak_reserved: Option<u64>,
) -> tidepool::trace::Trace {
    let mut trace = tidepool::trace::Trace::new("test", policy, 1 << 30);
    trace.steps.push(tidepool::trace::StepTrace {
        step: 3,
        label: "steady".into(),
        events,
        peak_reserved,
        ..Default::default()
    });
    trace
}

/// Poolable replay tensors of (size, start, end).
fn tensors<const N: usize>(list: [(u64, u32, u32); N]) -> [tidepool::replay::Tensor; N] {
    list.map(|(size, start, end)| tidepool::replay::Tensor {
        size,
        start,
        end,
        poolable: true,
    })
}

fn trace_error(bytes: &[u8]) -> String {
    match snapshot::report(bytes, &Options::default()) {
        Err(e @ Error::Trace(_)) => {
            assert_eq!(e.kind(), "trace");
            e.to_string()
        }
        Err(other) => panic!("an error of kind {}: {other}", other.kind()),
        Ok(_) => panic!("read"),
    }
}

/// A snapshot of `n` allocations of `size` bytes, none freed.
fn never_freed(n: usize, size: i64) -> Vec<u8> {
    fixture::with_traces(|p| {
        p.list(1, |p, _| {
            p.list(n, |p, i| {
                p.dict(4, |p, k| match k {
                    0 => p.entry_str("action", "alloc"),
                    1 => p.entry_int("addr", (i as i64 + 1) << 20),
                    2 => p.entry_int("size", size),
                    _ => p.entry_int("stream", 0),
                });
            });
        });
    })
}

/// Every replay row at or above the lower bound, the recorded allocator's row the
/// step's reserved peak.
fn check_rows(r: &snapshot::StepReport) {
    let rows = &r.replay.rows;
    assert_eq!(rows[0].allocator, "lower bound");
    assert_eq!(rows[0].peak_bytes, r.replay.lower_bound);
    assert!(rows[1].allocator.ends_with("(recorded)"), "{:?}", rows[1]);
    assert_eq!(rows[1].peak_bytes, r.step_peaks.reserved);
    for row in rows {
        assert!(
            row.peak_bytes >= r.replay.lower_bound,
            "{}: {} below {}",
            row.allocator,
            row.peak_bytes,
            r.replay.lower_bound
        );
    }
    for name in ["pow2", "pow2/8 fit2", "exact", "object plan", "offset plan"] {
        assert!(rows.iter().any(|row| row.allocator == name), "{name}");
    }
    assert!(r.peaks.live <= r.peaks.allocated);
    assert!(r.step_peaks.live <= r.peaks.live);
}

both!(python_snapshot_matches_the_allocator_that_wrote_it, {
    let r = report(SYNTHETIC);
    assert_eq!(r.format, "pytorch-snapshot");
    let s = &r.steps[0];
    assert_eq!(s.recording, "device 0");
    assert_eq!(s.events as u64, figure(SYNTHETIC_FIGURES, "events"));
    // The simulated allocator rounds blocks as PyTorch does: exact.
    assert_eq!(
        s.peaks.allocated,
        figure(SYNTHETIC_FIGURES, "max_memory_allocated")
    );
    assert_eq!(
        s.peaks.reserved,
        figure(SYNTHETIC_FIGURES, "max_memory_reserved")
    );
    assert_eq!(s.chosen, Chosen::Found);
    let period = s.period.expect("a period");
    assert_eq!(
        period.symbols as u64,
        figure(SYNTHETIC_FIGURES, "step_symbols")
    );
    assert_eq!(period.repeats, 3);
    check_rows(s);
    // As JSON (the CLI's --json, the page's object): the same figures.
    let json = serde_json::to_value(&r).expect("serialises");
    assert_eq!(json["format"], "pytorch-snapshot");
    assert_eq!(json["steps"][0]["chosen"], "found");
    assert_eq!(json["steps"][0]["peaks"]["reserved"], s.peaks.reserved);
    assert_eq!(
        json["steps"][0]["replay"]["rows"].as_array().map(Vec::len),
        Some(s.replay.rows.len())
    );
    let text = snapshot::report::table(&r);
    assert!(
        text.contains("PyTorch caching allocator (recorded)"),
        "{text}"
    );
    assert!(text.contains("the repeating step"), "{text}");
});

both!(the_busiest_device_unless_asked, {
    let r = report(TWO_DEVICES);
    assert_eq!(r.steps[0].recording, "device 1");
    assert_eq!(
        r.steps[0].peaks.allocated,
        figure(TWO_DEVICES_FIGURES, "max_memory_allocated")
    );
    assert_eq!(
        r.steps[0].peaks.reserved,
        figure(TWO_DEVICES_FIGURES, "max_memory_reserved")
    );
    assert_eq!(r.steps[0].period.expect("a period").repeats, 4);
    let zero = snapshot::report(
        TWO_DEVICES,
        &Options {
            device: Some(0),
            ..Options::default()
        },
    )
    .expect("device 0");
    assert_eq!(zero.steps[0].recording, "device 0");
    assert!(zero.steps[0].events < r.steps[0].events);
    let err = snapshot::report(
        TWO_DEVICES,
        &Options {
            device: Some(5),
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("no device 5"), "{err}");
});

both!(a_chosen_range_is_replayed, {
    let options = Options {
        events: Some((10, 200)),
        ..Options::default()
    };
    let r = snapshot::report(SYNTHETIC, &options).expect("reads");
    let s = &r.steps[0];
    assert_eq!(
        (s.first_event, s.end_event, s.chosen),
        (10, 200, Chosen::Range)
    );
    check_rows(s);
    for bad in [(5, 5), (9, 2), (0, 100_000)] {
        let options = Options {
            events: Some(bad),
            ..Options::default()
        };
        let err = snapshot::report(SYNTHETIC, &options).unwrap_err();
        assert_eq!(err.kind(), "trace");
        assert!(err.to_string().contains("not a range"), "{err}");
    }
});

both!(a_run_written_here_gives_its_own_figures, {
    let run = fixture::run(5, 6);
    let bytes = fixture::pickle(&run);
    let (_, recordings) = snapshot::read(&bytes, Default::default(), None).expect("reads");
    let rec = &recordings[0];
    assert_eq!(rec.events as usize, run.events.len());
    // Every allocation's stack: its own list of shared frames.
    let a = rec.allocations.iter().find(|a| a.start > 0).expect("one");
    let frames: Vec<_> = rec.stacks.get(a.stack).collect();
    assert_eq!(frames.len(), fixture::FRAMES_PER_STACK);
    assert!(frames[0].name.starts_with("function_"));
    assert!(rec.stacks.table.len() <= fixture::DISTINCT_FRAMES);

    let r = report(&bytes);
    let s = &r.steps[0];
    assert_eq!(s.peaks.allocated, run.max_allocated);
    assert_eq!(s.peaks.reserved, run.max_reserved);
    let period = s.period.expect("a period");
    assert_eq!(period.symbols as usize, run.step_symbols);
    assert_eq!(period.repeats, 5);
    assert!(period.matched > 0.99, "{period:?}");
    check_rows(s);
});

both!(
    /// A trace that is tidepool's own reads through the same call, and replays its
    /// tensors (plus the pool's own row).
    tidepool_traces_read_through_the_same_path,
    {
        use std::borrow::Cow;
        use tidepool::trace::{EventKind::*, TraceEvent};
        let mut held = 0;
        let mut in_use = 0;
        let mut event = |seq: u32, kind, buffer: u64, requested: u64| {
            match kind {
                Miss => in_use += requested,
                Release => {
                    in_use -= requested;
                    held += requested
                }
                Hit => {
                    in_use += requested;
                    held -= requested
                }
                _ => {}
            }
            TraceEvent {
                seq,
                kind,
                op: Cow::Borrowed("matmul_forward"),
                layer: Some(1),
                purpose: Cow::Borrowed("storage"),
                requested,
                class: requested,
                buffer,
                offset: None,
                cause: None,
                in_use,
                held,
            }
        };
        let events = vec![
            event(0, Miss, 1, 1024),
            event(1, Miss, 2, 4096),
            event(2, Release, 1, 1024),
            event(3, Hit, 1, 1024),
            event(4, Release, 2, 4096),
            event(5, Release, 1, 1024),
        ];
        let json = one_step_trace("pow2", events, None).to_json();
        let r = report(json.as_bytes());
        assert_eq!(r.format, "tidepool-trace");
        let s = &r.steps[0];
        assert_eq!(s.recording, "step 3 (steady)");
        assert_eq!(s.allocator, "tidepool pow2");
        assert_eq!(s.chosen, Chosen::Whole);
        let mut rows = s.replay.rows.clone();
        let recorded = rows.remove(1);
        assert_eq!(recorded.peak_bytes, 1024 + 4096);
        // Births to deaths of the same buffer, positions from 1 after the first event.
        let tensors = tensors([(1024, 1, 3), (4096, 2, 5), (1024, 4, 6)]);
        assert_eq!(rows, tidepool::replay::rows(&tensors, 1 << 30));
        assert_eq!(s.peaks.live, 5120);
        let frames: Vec<_> = {
            let (_, recs) = snapshot::read(json.as_bytes(), Default::default(), None).unwrap();
            recs[0].stacks.get(recs[0].allocations[0].stack).cloned().collect()
        };
        assert_eq!(frames[0].name, "matmul_forward");
        assert_eq!(frames[0].filename, "layer 1");
    }
);

both!(
    /// A planned run's tensors share their arena's buffer id: each is told apart by
    /// its offset there, however births and deaths interleave. The step's recorded
    /// peak reserved is the "planned (live)" row, after the recorded allocator's;
    /// a pool's trace has no such row.
    planned_ranges_are_tensors_of_their_own,
    {
        use std::borrow::Cow;
        use tidepool::trace::{EventKind::*, TraceEvent};
        let event = |seq: u32, kind, offset: u64, requested: u64| TraceEvent {
            seq,
            kind,
            op: Cow::Borrowed("layernorm_forward"),
            layer: None,
            purpose: Cow::Borrowed("storage"),
            requested,
            class: requested,
            buffer: 7,
            offset: Some(offset),
            cause: None,
            in_use: 0,
            held: 0,
        };
        // A at 0, then B at 1024 while A lives, then C at 0 once A died, B dying after.
        let events = vec![
            event(0, Hit, 0, 1024),
            event(1, Hit, 1024, 2048),
            event(2, Release, 0, 1024),
            event(3, Hit, 0, 512),
            event(4, Release, 1024, 2048),
            event(5, Release, 0, 512),
        ];
        let mut trace = one_step_trace("planned", events, Some(4096));
        let s = &report(trace.to_json().as_bytes()).steps[0];
        let mut rows = s.replay.rows.clone();
        let recorded = rows.remove(1);
        assert_eq!(recorded.allocator, "tidepool planned (recorded)");
        let live = rows.remove(1);
        assert_eq!(live.allocator, "planned (live)");
        assert_eq!((live.peak_bytes, live.buffers_created), (4096, 0));
        assert_eq!(live.ratio, 4096.0 / 3072.0);
        let tensors = tensors([(1024, 1, 3), (2048, 2, 5), (512, 4, 6)]);
        assert_eq!(rows, tidepool::replay::rows(&tensors, 1 << 30));
        assert_eq!(s.peaks.live, 1024 + 2048);

        trace.policy = "pow2".into();
        let pool = report(trace.to_json().as_bytes());
        let names: Vec<&str> = pool.steps[0].replay.rows.iter().map(|r| r.allocator.as_str()).collect();
        assert!(!names.contains(&"planned (live)"), "{names:?}");
    }
);

both!(
    /// What a hostile or broken file gets: an error of kind `trace` that says what
    /// is wrong.
    hostile_files_are_refused_with_their_reason,
    {
        let proto = |body: &[u8]| [&[0x80u8, 4][..], body].concat();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("empty", vec![], "neither"),
            ("text", b"hello".to_vec(), "neither"),
            ("truncated", SYNTHETIC[..SYNTHETIC.len() / 2].to_vec(), "truncated"),
            (
                "GLOBAL",
                proto(b"cos\nsystem\n(S'echo hi'\ntR."),
                "GLOBAL (imports",
            ),
            (
                "STACK_GLOBAL",
                proto(b"\x8c\x02os\x8c\x06system\x93."),
                "STACK_GLOBAL",
            ),
            ("REDUCE", proto(b"NNR."), "REDUCE (calls"),
            ("BUILD", proto(b"}}b."), "BUILD"),
            ("INST", proto(b"(ios\nsystem\n."), "INST"),
            ("OBJ", proto(b"(No."), "OBJ"),
            ("NEWOBJ", proto(b"N)\x81."), "NEWOBJ"),
            ("EXT1", proto(b"\x82\x01."), "EXT"),
            ("PERSID", proto(b"Pa\n."), "PERSID"),
            ("a set", proto(b"\x8f."), "a set"),
            ("protocol 0", b"(dp0\n.".to_vec(), "neither"),
            ("protocol 9", b"\x80\x09}.".to_vec(), "protocol 9"),
            (
                "huge string",
                proto(b"\x8d\xff\xff\xff\xff\xff\xff\xff\x7f."),
                "truncated, or a bad length",
            ),
            (
                "huge bytes",
                proto(b"\x8e\x00\x00\x00\x00\x00\x00\x00\x80."),
                "bad length",
            ),
            (
                "huge integer",
                proto(b"\x8b\xff\xff\xff\x7f."),
                "at most 16",
            ),
            (
                "huge frame",
                proto(b"\x95\x00\x00\x00\x00\x00\x00\x10\x00}."),
                "truncated",
            ),
            ("deep marks", proto(&[b'('; 100_000]), "Limits::max_depth"),
            ("unknown memo", proto(b"h\x05."), "never stored"),
            ("memo out of order", proto(b"Nq\x09."), "out of order"),
            ("no stop", proto(b"}"), "truncated"),
            ("trailing bytes", proto(b"}.}"), "after the pickle's end"),
            ("append to a dict", proto(b"}Na."), "APPEND onto a dict"),
            ("odd setitems", proto(b"}(Nu."), "odd number"),
            ("stack underflow", proto(b"a."), "the stack is empty"),
            ("append to nothing", proto(b"Na."), "nothing to add"),
            ("not UTF-8", proto(b"\x8c\x02\xff\xfe."), "not UTF-8"),
            ("a list", proto(b"]."), "not a dict"),
            ("no traces", proto(b"}."), "no `segments`"),
            ("json garbage", b"{\"format\": 3".to_vec(), "not a tidepool trace"),
        ];
        for (name, bytes, expect) in cases {
            let err = trace_error(&bytes);
            assert!(err.contains(expect), "{name}: {err}");
        }
    }
);

both!(
    /// A snapshot whose fields hold the wrong types, through the fixture's pickler.
    wrong_types_are_named_where_they_are,
    {
        let with_event = |write: &dyn Fn(&mut fixture::Pickler)| {
            fixture::with_traces(|p| {
                p.list(1, |p, _| {
                    p.list(2, |p, e| {
                        p.dict(3, |p, k| match (e, k) {
                            (_, 0) => p.entry_str("action", "alloc"),
                            (_, 1) => p.entry_int("addr", 4096 * (e as i64 + 1)),
                            (0, _) => p.entry_int("size", 512),
                            _ => write(p),
                        });
                    });
                });
            })
        };
        type Write = Box<dyn Fn(&mut fixture::Pickler)>;
        let cases: Vec<(&str, Write, &str)> = vec![
            (
                "a string size",
                Box::new(|p| p.entry_str("size", "abc")),
                "device_traces[0][1].size is a string, not an integer",
            ),
            (
                "a negative size",
                Box::new(|p| p.entry_int("size", -5)),
                "device_traces[0][1].size is -5",
            ),
            (
                "a float size",
                Box::new(|p| {
                    p.str("size");
                    p.float(1.5)
                }),
                "size is a float",
            ),
            (
                "a size past 2^62",
                Box::new(|p| p.entry_int("size", i64::MAX)),
                "outside",
            ),
            (
                "frames not a list",
                Box::new(|p| {
                    p.entry_int("size", 8);
                    p.entry_int("frames", 3)
                }),
                "frames is an integer, not a list",
            ),
            (
                "no size",
                Box::new(|p| p.entry_int("stream", 0)),
                "no `addr` or no `size`",
            ),
        ];
        for (name, write, expect) in cases {
            let bytes = with_event(&*write);
            let err = trace_error(&bytes);
            assert!(err.contains(expect), "{name}: {err}");
        }
        // And the well-formed one reads.
        let ok = with_event(&|p| p.entry_int("size", 1000));
        assert_eq!(report(&ok).steps[0].allocations, 2);
    }
);

both!(every_truncation_is_refused, {
    let bytes = fixture::pickle(&fixture::run(2, 2));
    for n in 0..bytes.len() {
        trace_error(&bytes[..n]);
    }
});

both!(
    /// Structures that would cost a recursive reader its stack or a copying reader its
    /// memory: a million nested lists, and references to references 64 deep (2^64
    /// items unrolled). Both are read in linear time and refused for their shape.
    nesting_and_shared_references_cost_nothing,
    {
        let mut nested = vec![0x80, 4];
        nested.extend(std::iter::repeat_n(b']', 1_000_000));
        nested.extend(std::iter::repeat_n(b'a', 999_999));
        nested.push(b'.');
        assert!(trace_error(&nested).contains("a list, not a dict"));

        let shared = fixture::with_traces(|p| {
            // Each list written, then popped: only the last is the value.
            let mut inner = p.list(0, |_, _| {});
            for _ in 0..64 {
                p.out.push(b'0');
                inner = p.list(2, |p, _| p.get(inner));
            }
        });
        let err = trace_error(&shared);
        assert!(err.contains("is a list, not a dict"), "{err}");
    }
);

/// Mutations of a real snapshot and random bytes: an error of kind `trace` or a
/// report, never a panic. Natively by proptest; in the browser by a seeded loop.
#[cfg(not(target_arch = "wasm32"))]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn mutate(base: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
        let mut out = base.to_vec();
        for &(at, kind, byte) in edits {
            let at = at % (out.len() + 1);
            match kind % 4 {
                0 if at < out.len() => out[at] = byte,
                1 => out.insert(at, byte),
                2 if at < out.len() => {
                    out.remove(at);
                }
                _ => out.truncate(at),
            }
        }
        out
    }

    fn never_panics(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Err(e) = snapshot::report(bytes, &Options::default()) {
            prop_assert_eq!(e.kind(), "trace", "{}", e);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn mutated_snapshots(edits in prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6)) {
            never_panics(&mutate(SYNTHETIC, &edits))?;
        }

        #[test]
        fn random_bytes(mut bytes in prop::collection::vec(any::<u8>(), 0..2000), pickle in any::<bool>()) {
            if pickle {
                bytes.splice(0..0, [0x80, 4]);
            }
            never_panics(&bytes)?;
        }
    }
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
fn fuzz_in_the_browser() {
    let mut rng = tidepool::rng::Rng::new(tidepool::rng::random_seed());
    let seed = rng.state();
    for case in 0..300 {
        let mut bytes = SYNTHETIC.to_vec();
        if case % 3 == 2 {
            bytes = (0..rng.below(2000)).map(|_| rng.next_u64() as u8).collect();
            bytes.splice(0..0, [0x80, 4]);
        }
        for _ in 0..1 + rng.below(5) {
            let at = rng.below(bytes.len() + 1);
            match rng.below(4) {
                0 if at < bytes.len() => bytes[at] = rng.next_u64() as u8,
                1 => bytes.insert(at, rng.next_u64() as u8),
                2 if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => bytes.truncate(at),
            }
        }
        if let Err(e) = snapshot::report(&bytes, &Options::default()) {
            assert_eq!(e.kind(), "trace", "seed {seed} case {case}: {e}");
        }
    }
}

fn now_ms() -> f64 {
    tidepool::train::now_ms()
}

both!(
    /// A 100 MB snapshot: read, the step found and replayed, within the page's 5 s
    /// (natively with room for a loaded machine). Prints the time of each part.
    a_100_mb_snapshot_opens_in_seconds,
    {
        let (run, bytes) = fixture::of_size(100 << 20);
        let (max_allocated, step_symbols) = (run.max_allocated, run.step_symbols);
        drop(run);
        let (t, c) = (now_ms(), fixture::cpu_ms());
        let parsed = snapshot::pickle::Pickle::parse(&bytes, Default::default()).map(|_| ());
        let (parse, parse_cpu) = (now_ms() - t, fixture::cpu_ms() - c);
        parsed.expect("parses");
        let t = now_ms();
        let (_, recordings) = snapshot::read(&bytes, Default::default(), None).expect("reads");
        let read = now_ms() - t;
        let t = now_ms();
        let found = snapshot::step::find(&recordings[0]);
        let find = now_ms() - t;
        let allocations = recordings[0].allocations.len();
        drop(recordings);
        let (t, c) = (now_ms(), fixture::cpu_ms());
        let r = snapshot::report(&bytes, &Options::default()).expect("reports");
        let (total, total_cpu) = (now_ms() - t, fixture::cpu_ms() - c);
        let s = &r.steps[0];
        let line = format!(
            "{} MB, {} events, {} allocations: pickle {parse:.0} ms, read (pickle included) \
             {read:.0} ms, step found in {find:.0} ms; report (all of it) {total:.0} ms, \
             a step of {} tensors{}",
            bytes.len() >> 20,
            s.events,
            allocations,
            s.replay.tensors,
            match cfg!(target_arch = "wasm32") {
                true => String::new(),
                false => format!(" (CPU time: pickle {parse_cpu:.0} ms, report {total_cpu:.0} ms)"),
            }
        );
        println!("{line}");
        #[cfg(target_arch = "wasm32")]
        web_sys::console::log_1(&line.into());
        assert_eq!(found.1, s.period);
        assert_eq!(s.peaks.allocated, max_allocated);
        assert_eq!(s.period.expect("a period").symbols as usize, step_symbols);
        assert!(total < 5000.0, "{total:.0} ms");
    }
);

/// The segments held at each position add up to the reserved bytes there.
fn check_segments(name: &str, bytes: &[u8]) {
    let (_, recordings) = snapshot::read(bytes, Default::default(), None).expect("reads");
    let rec = &recordings[0];
    let n = rec.events as usize;
    let mut delta = vec![0i128; n + 2];
    for seg in &rec.segments {
        delta[seg.start as usize] += i128::from(seg.size);
        delta[seg.end as usize] -= i128::from(seg.size);
    }
    let mut changes = rec.reserved.changes.iter().peekable();
    let (mut held, mut reserved) = (0i128, rec.reserved.at_start);
    for (p, d) in delta.iter().enumerate().take(n + 1) {
        held += d;
        while let Some(&&(at, bytes)) = changes.peek() {
            if at as usize > p {
                break;
            }
            reserved = bytes;
            changes.next();
        }
        assert_eq!(held, i128::from(reserved), "{name}: position {p}");
    }
}

/// Every snapshot committed: those scripts/torch_snapshot.py recorded on the H200
/// (PyTorch 2.11) and the synthetic ones.
const FIXTURES: [(&str, &[u8], &str); 6] = [
    (
        "gpt_eager",
        include_bytes!("fixtures/snapshots/gpt_eager.pickle"),
        include_str!("fixtures/snapshots/gpt_eager.json"),
    ),
    (
        "gpt_sdpa",
        include_bytes!("fixtures/snapshots/gpt_sdpa.pickle"),
        include_str!("fixtures/snapshots/gpt_sdpa.json"),
    ),
    (
        "resnet18",
        include_bytes!("fixtures/snapshots/resnet18.pickle"),
        include_str!("fixtures/snapshots/resnet18.json"),
    ),
    (
        "gpt2",
        include_bytes!("fixtures/snapshots/gpt2.pickle"),
        include_str!("fixtures/snapshots/gpt2.json"),
    ),
    ("synthetic_gpt", SYNTHETIC, SYNTHETIC_FIGURES),
    ("synthetic_two_devices", TWO_DEVICES, TWO_DEVICES_FIGURES),
];

both!(
    /// The replay's live bytes against PyTorch's own `max_memory_allocated` for the
    /// same steps, its reserved bytes against `max_memory_reserved`: within 1%. (The
    /// live bytes count each block as PyTorch rounds it, to 512 bytes; a large block
    /// PyTorch found free and did not split counts whole in its figure, which the
    /// trace cannot show: ResNet-18 is 0.4% under.)
    snapshots_match_what_pytorch_reported,
    {
        for (name, bytes, json) in FIXTURES {
            let r = report(bytes);
            let s = &r.steps[0];
            for (ours, theirs) in [
                (s.peaks.allocated, "max_memory_allocated"),
                (s.peaks.reserved, "max_memory_reserved"),
            ] {
                let theirs_v = figure(json, theirs);
                let off = (ours as f64 - theirs_v as f64).abs() / theirs_v as f64;
                println!("{name}: {theirs} {theirs_v}, replayed {ours} ({:.3}% off)", off * 100.0);
                assert!(off <= 0.01, "{name}: {ours} against PyTorch's {theirs} {theirs_v}");
            }
            check_segments(name, bytes);
            let period = s.period.unwrap_or_else(|| panic!("{name}: a repeating step"));
            assert!(period.repeats >= 2 && period.matched > 0.99, "{name}: {period:?}");
            check_rows(s);
            print!("{name}: {}", snapshot::report::table(&r));
        }
    }
);

both!(
    /// The timeline's arrays: every allocation once, in birth order, the live bytes
    /// after each event what the allocations say, the reserved bytes the recording's,
    /// and both peaks the report's.
    the_timeline_holds_every_allocation_and_byte,
    {
        use tidepool::snapshot::timeline::Timeline;
        let run = fixture::run(4, 5);
        let bytes = fixture::pickle(&run);
        let (_, recordings) = snapshot::read(&bytes, Default::default(), None).expect("reads");
        let rec = &recordings[0];
        let t = Timeline::of(rec);
        let n = rec.allocations.len();
        for len in [t.start.len(), t.end.len(), t.size.len(), t.stream.len()] {
            assert_eq!(len, n);
        }
        assert_eq!(t.stack.len(), n);
        assert_eq!(t.events, rec.events);
        assert!(t.start.windows(2).all(|w| w[0] <= w[1]), "birth order");
        let mut by_end = t.by_end.clone();
        assert!(by_end.windows(2).all(|w| t.end[w[0] as usize] <= t.end[w[1] as usize]));
        by_end.sort_unstable();
        assert_eq!(by_end, (0..n as u32).collect::<Vec<_>>(), "each allocation once");
        // The same allocations: (start, end, size) as multisets.
        let mut ours: Vec<(u32, u32, u64)> = (0..n)
            .map(|k| (t.start[k], t.end[k], t.size[k] as u64))
            .collect();
        let mut theirs: Vec<(u32, u32, u64)> =
            rec.allocations.iter().map(|a| (a.start, a.end, a.size)).collect();
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(ours, theirs);
        assert_eq!(t.live.len(), rec.events as usize + 1);
        assert_eq!(t.reserved.len(), rec.events as usize + 1);
        for p in 0..=rec.events {
            let live: u64 = rec
                .allocations
                .iter()
                .filter(|a| a.start <= p && p < a.end)
                .map(|a| a.size)
                .sum();
            assert_eq!(t.live[p as usize] as u64, live, "position {p}");
            assert_eq!(
                t.reserved[p as usize] as u64,
                rec.reserved.peak(p, p),
                "position {p}"
            );
        }
        let s = &report(&bytes).steps[0];
        let (peak, at) = t.peak();
        assert_eq!(peak as u64, s.peaks.live);
        assert_eq!(t.live[at as usize], peak);
        let reserved = t.reserved.iter().fold(0.0f64, |m, &b| m.max(b));
        assert_eq!(reserved as u64, s.peaks.reserved);
        assert_eq!(t.streams, ["0"]);
        // Stacks as the recording's, each named by one of its frames.
        assert_eq!(t.stack_offsets, rec.stacks.offsets);
        assert_eq!(t.stack_label.len(), rec.stacks.len());
        // Each frame once, each stack's frames the recording's.
        let frame = |f: u32| {
            let f = f as usize;
            (t.frame_names[f].clone(), t.frame_files[f].clone(), t.frame_lines[f])
        };
        let mut table: Vec<_> = (0..t.frame_names.len() as u32).map(frame).collect();
        table.sort_unstable();
        table.dedup();
        assert_eq!(table.len(), t.frame_names.len(), "no frame twice");
        for s in 0..rec.stacks.len() {
            let (a, b) = (t.stack_offsets[s] as usize, t.stack_offsets[s + 1] as usize);
            let ours: Vec<_> = t.stack_frames[a..b].iter().map(|&f| frame(f)).collect();
            let theirs: Vec<_> = rec
                .stacks
                .get(s as u32)
                .map(|f| (f.name.clone(), f.filename.clone(), f.line))
                .collect();
            assert_eq!(ours, theirs, "stack {s}");
        }
        let k = (0..n).find(|&k| t.start[k] > 0).expect("an allocation in the trace");
        let label = t.stack_label[t.stack[k] as usize];
        assert_eq!(
            t.frame_names[label as usize],
            rec.stacks.get(t.stack[k]).next().unwrap().name,
            "no frame in a package: the innermost"
        );
    }
);

both!(
    /// A stack is named by the innermost frame of the program's own code: PyTorch's
    /// modules and other installed packages are passed over (the committed GPT
    /// snapshot's `nn.Linear` allocations are named by the model's line that called
    /// it).
    stacks_are_named_by_the_programs_own_frame,
    {
        use tidepool::snapshot::timeline::{label_frame, Timeline, NO_FRAME};
        use tidepool::snapshot::Frame;
        let frame = |file: &str, name: &str| Frame {
            filename: file.into(),
            line: 1,
            name: name.into(),
        };
        let table = [
            frame("/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "forward"),
            frame("??", "c10::alloc"),
            frame("/work/train.py", "forward"),
            frame("/usr/lib/python3/dist-packages/numpy/core.py", "asarray"),
        ];
        assert_eq!(label_frame(&[1, 0, 2, 3], &table), 2);
        assert_eq!(label_frame(&[0, 3], &table), 0, "all in packages: the innermost");
        assert_eq!(label_frame(&[], &table), NO_FRAME);

        let bytes = include_bytes!("fixtures/snapshots/gpt_eager.pickle");
        let (_, recordings) = snapshot::read(bytes, Default::default(), None).expect("reads");
        let t = Timeline::of(&recordings[0]);
        let mut linear = 0;
        for (s, &label) in t.stack_label.iter().enumerate() {
            let (a, b) = (t.stack_offsets[s] as usize, t.stack_offsets[s + 1] as usize);
            let files: Vec<&str> = t.stack_frames[a..b]
                .iter()
                .map(|&f| t.frame_files[f as usize].as_str())
                .collect();
            if files.first().is_some_and(|f| f.ends_with("torch/nn/modules/linear.py")) {
                linear += 1;
                assert!(t.frame_files[label as usize].ends_with("torch_snapshot.py"));
            }
        }
        assert!(linear > 0, "nn.Linear allocates in the GPT snapshot");
        // PyTorch writes a line of code as a frame of its own in each stack it is in:
        // the timeline keeps it once (one colour, one legend entry a line).
        let mut lines: Vec<_> = (0..t.frame_names.len())
            .map(|f| (&t.frame_names[f], &t.frame_files[f], t.frame_lines[f]))
            .collect();
        lines.sort_unstable();
        lines.dedup();
        assert_eq!(lines.len(), t.frame_names.len());
        assert!(t.frame_names.len() < recordings[0].stacks.table.len());
    }
);

both!(
    /// A file read once reports as `report` does, and any range of one recording
    /// replays through `step_report`.
    recordings_read_once_report_again,
    {
        let (format, recordings) = snapshot::read(SYNTHETIC, Default::default(), None).expect("reads");
        let once = snapshot::report::of_recordings(format, &recordings, None).expect("reports");
        assert_eq!(once, report(SYNTHETIC));
        let step = snapshot::report::step_report(&recordings[0], Some((10, 200)), 0).expect("a range");
        let options = Options {
            events: Some((10, 200)),
            ..Options::default()
        };
        assert_eq!(step, snapshot::report(SYNTHETIC, &options).unwrap().steps[0]);
        let err = snapshot::report::step_report(&recordings[0], Some((0, u32::MAX)), 0).unwrap_err();
        assert_eq!(err.kind(), "trace");
    }
);

both!(
    /// Sizes that would carry a replay's sums past 64 bits are refused, not wrapped.
    allocations_past_what_a_replay_adds_up_are_refused,
    {
        let bytes = never_freed(64, 1 << 58);
        let err = trace_error(&bytes);
        assert!(err.contains("2^59"), "{err}");
        // Caps scaled for a larger file keep the defaults' proportions.
        let limits = snapshot::pickle::Limits::for_bytes(snapshot::pickle::MAX_BYTES * 2);
        assert_eq!(limits.max_values, snapshot::pickle::MAX_VALUES * 2);
        assert_eq!(
            snapshot::pickle::Limits::for_bytes(snapshot::pickle::MAX_BYTES),
            snapshot::pickle::Limits::default()
        );
    }
);

/// Not a test: writes a synthetic snapshot of about `TIDEPOOL_SNAPSHOT_MB` MB
/// (default 100) to `TIDEPOOL_SNAPSHOT_OUT`, and beside it (`.json`) what the run it
/// records would have reported, for the page's test (tests/e2e/snapshot.test.mjs):
/// `cargo test --release --test snapshot -- --ignored --exact write_a_snapshot_file`.
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore = "writes a file for tests/e2e/snapshot.test.mjs"]
fn write_a_snapshot_file() {
    let out =
        std::env::var("TIDEPOOL_SNAPSHOT_OUT").expect("TIDEPOOL_SNAPSHOT_OUT: where to write");
    let mb: usize =
        std::env::var("TIDEPOOL_SNAPSHOT_MB").map_or(100, |v| v.parse().expect("a number of MB"));
    let (run, bytes) = fixture::of_size(mb << 20);
    std::fs::write(&out, &bytes).expect("writes the snapshot");
    let figures = serde_json::json!({
        "bytes": bytes.len(),
        "events": run.events.len(),
        "max_memory_allocated": run.max_allocated,
        "max_memory_reserved": run.max_reserved,
        "step_symbols": run.step_symbols,
    });
    std::fs::write(format!("{out}.json"), figures.to_string()).expect("writes its figures");
}

/// The page's entry point, the wasm's `Snapshot`: bytes from JS read once, reported
/// as the library reports them, drawn as typed arrays; what it cannot read or show
/// is an error of kind `trace` (bad arguments: `config`), never a trap.
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
fn the_page_reads_files_through_the_wasm_snapshot() {
    use tidepool::web::Snapshot;
    use wasm_bindgen::JsValue;
    let get = |v: &JsValue, key: &str| js_sys::Reflect::get(v, &key.into()).expect(key);
    let kind = |e: JsValue| get(&e, "kind").as_string().expect("a kind");
    let s = Snapshot::read(js_sys::Uint8Array::from(SYNTHETIC).into(), None).expect("reads");
    assert_eq!(
        (s.format().as_str(), s.recordings()),
        ("pytorch-snapshot", 1)
    );
    let ours = report(SYNTHETIC);
    let js = s.report().expect("reports");
    let step = get(&js_sys::Array::from(&get(&js, "steps")).get(0), "replay");
    let lower = get(&step, "lower_bound").as_f64().unwrap();
    assert_eq!(lower as u64, ours.steps[0].replay.lower_bound);
    let t = s.timeline(0.0).expect("a timeline");
    let live = js_sys::Float64Array::from(get(&t, "live"));
    assert_eq!(live.length(), ours.steps[0].events + 1);
    let size = js_sys::Float64Array::from(get(&t, "size"));
    assert_eq!(size.length() as usize, ours.steps[0].allocations);
    assert_eq!(
        get(&t, "peak").as_f64().unwrap() as u64,
        ours.steps[0].peaks.live
    );
    let range = s.replay(0.0, 10.0, 200.0).expect("a range");
    assert_eq!(get(&range, "chosen").as_string().as_deref(), Some("range"));

    assert_eq!(kind(s.replay(0.0, 10.0, 5.0).unwrap_err()), "trace");
    assert_eq!(kind(s.timeline(1.0).unwrap_err()), "config");
    assert_eq!(kind(s.timeline(-1.0).unwrap_err()), "config");
    let refused = Snapshot::check_size(3e8).unwrap_err();
    let message = get(&refused, "message").as_string().unwrap();
    assert!(message.contains("at most 268435456 bytes"), "{message}");
    assert_eq!(kind(refused), "trace");
    assert!(Snapshot::check_size(1e6).is_ok());
    assert_eq!(kind(Snapshot::check_size(f64::NAN).unwrap_err()), "config");
    let text = Snapshot::read(js_sys::Uint8Array::from(&b"hello"[..]).into(), None);
    assert_eq!(kind(text.err().expect("refused")), "trace");

    // Figures a JS number cannot hold exactly: refused, not rounded.
    let bytes = never_freed(16, 1 << 52);
    let huge = Snapshot::read(js_sys::Uint8Array::from(&bytes[..]).into(), None).expect("reads");
    let err = huge.report().unwrap_err();
    assert!(get(&err, "message").as_string().unwrap().contains("2^53"));
    assert_eq!(kind(err), "trace");
}
