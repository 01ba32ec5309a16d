//! `tidepool train` as a user runs it: several steps a call, each call ending where
//! an evaluation, a save or a traced step is due, so that each follows its own step.
//! Native only (it runs the binary); seconds on lavapipe.
#![cfg(all(feature = "cli", not(target_arch = "wasm32")))]

use std::process::Command;

#[test]
fn train_calls_end_at_evaluations_saves_and_traced_steps() {
    let dir = std::env::temp_dir().join(format!("tidepool-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (trace, ckpt) = (dir.join("trace.json"), dir.join("run.safetensors"));
    let flags = [
        "--eval-every",
        "6",
        "--eval-batches",
        "2",
        "--trace-steady",
        "4",
    ];
    let (t, c) = (trace.to_str().unwrap(), ckpt.to_str().unwrap());
    let more = ["--save-every", "10", "--trace", t, "--save", c];
    let steps = train_lines("23", &[&flags[..], &more[..]].concat());
    let numbers: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(
        numbers,
        (1..=23).collect::<Vec<_>>(),
        "each step once, in order"
    );

    // A call's steps share its time (the call's over its steps). Traced steps 1 and
    // 4 go alone; calls end at the evaluations (6, 12, 18), the saves (10, 20) and
    // the last step.
    let calls = [
        (1, 1),
        (2, 3),
        (4, 4),
        (5, 6),
        (7, 10),
        (11, 12),
        (13, 18),
        (19, 20),
        (21, 23),
    ];
    let ms = |step: u64| steps[step as usize - 1]["ms"].as_f64().unwrap();
    for (first, last) in calls {
        for step in first..=last {
            assert_eq!(ms(step), ms(first), "steps {first}-{last} were one call");
        }
        // Timed in ns, two calls never share a value.
        if first > 1 {
            assert_ne!(
                ms(first),
                ms(first - 1),
                "a call ended after step {}",
                first - 1
            );
        }
    }
    // Each call after the first step's takes several steps where it may.
    assert!(calls.iter().any(|&(a, b)| b - a >= 5));

    // The held-out loss is new at each multiple of 6, and only there.
    let val = |step: u64| steps[step as usize - 1]["val_loss"].as_f64();
    assert_eq!(val(5), None, "no evaluation before step 6");
    for step in 6..=23u64 {
        let changed = val(step) != val(step - 1);
        assert_eq!(changed, step % 6 == 0, "step {step}: {:?}", val(step));
    }

    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).expect("trace written")).unwrap();
    let traced: Vec<u64> = trace["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_u64().unwrap())
        .collect();
    assert_eq!(traced, vec![1, 4]);
    assert!(ckpt.exists(), "checkpoint written");
    // Resuming the finished run without a longer --steps has nothing to train.
    let (ok, stderr, _) = run(&["train", "--resume", ckpt.to_str().unwrap()]);
    assert!(
        !ok && stderr.contains("nothing is left to train; give --steps above 23"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `tidepool ARGS` for at most 30 s (then kills it); whether it succeeded, its
/// stderr and how long it ran.
/// Runs `tidepool train` on a tiny model with `extra` flags; its step lines.
fn train_lines(steps: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let tiny = [
        "train",
        "--preset",
        "tiny",
        "--batch",
        "2",
        "--context",
        "8",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args(tiny)
        .args(["--steps", steps, "--json"])
        .args(extra)
        .output()
        .expect("runs tidepool");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tidepool train failed: {stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("one JSON object a line"))
        .filter(|l| l["final"].is_null())
        .collect()
}

#[test]
fn train_with_calls_in_flight_trains_as_calls_one_at_a_time() {
    // 40 steps: calls of 16, each after the first started while the one before is in
    // flight. With step 40 traced, steps 2-39 go one call at a time instead (a traced
    // step goes alone, and calls before it wait for each other). Same losses, norms
    // and learning rates to the bit.
    let dir = std::env::temp_dir().join(format!("tidepool-cli-flight-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    let trace = trace.to_str().unwrap();
    let bits = |lines: &[serde_json::Value]| -> Vec<(u64, String, String, String)> {
        lines
            .iter()
            .map(|l| {
                let f = |k: &str| l[k].to_string();
                (
                    l["step"].as_u64().unwrap(),
                    f("loss"),
                    f("grad_norm"),
                    f("lr"),
                )
            })
            .collect()
    };
    let in_flight = train_lines("40", &[]);
    let one_at_a_time = train_lines("40", &["--trace", trace, "--trace-steady", "40"]);
    assert_eq!(in_flight.len(), 40);
    assert_eq!(bits(&in_flight), bits(&one_at_a_time));
    // The calls in flight: 1-16, then 17-32 and 33-40, each timed from the end of
    // the one before (one value a call).
    let ms = |step: usize| in_flight[step - 1]["ms"].as_f64().unwrap();
    for (first, last) in [(1, 16), (17, 32), (33, 40)] {
        assert!((first..=last).all(|s| ms(s) == ms(first) && ms(s) > 0.0));
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn run(args: &[&str]) -> (bool, String, std::time::Duration) {
    use std::io::Read;
    let start = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs tidepool");
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits for tidepool") {
            break Some(status);
        }
        if start.elapsed().as_secs() >= 30 {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .ok();
    let ok = status.is_some_and(|s| s.success());
    (ok, stderr, start.elapsed())
}

/// Odd flags and hostile files are refused at once, with an error that names the
/// flag or limit, and never a panic. Each case fails before any GPU work (or, for
/// an endless file, at its cap), so a case that trains or hangs fails the test.
#[test]
fn odd_arguments_and_endless_files_are_refused_before_any_work() {
    let dir = std::env::temp_dir().join(format!("tidepool-cli-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-folder").join("out.json");
    let missing = missing.to_str().unwrap();
    let folder = dir.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["bench", "pool", "--batches", "0"],
            "--batches must be at least 1",
        ),
        (
            &["bench", "step", "--steps", "0"],
            "--steps must be at least 1",
        ),
        (
            &["bench", "kernels", "--steps", "0"],
            "--steps must be at least 1",
        ),
        (
            &["bench", "step", "--at-once", "0"],
            "--at-once values must be 1 to 1024, got 0",
        ),
        (&["bench", "step", "--at-once", "8,5000"], "got 5000"),
        (
            &["bench", "step", "--at-once", "16", "--in-flight", "1,3"],
            "--in-flight values must be 1 to 2, got 3",
        ),
        (
            &["bench", "step", "--in-flight", "2"],
            "--in-flight needs --at-once",
        ),
        (
            &["bench", "step", "--presets", "tiny,,small"],
            "--presets has an empty name",
        ),
        (
            &["bench", "soak", "--every", "0"],
            "--every must be at least 1",
        ),
        (&["bench", "nope"], "unknown benchmark \"nope\""),
        (
            &["trace", "bench", "--steps", "0"],
            "--steps must be at least 1",
        ),
        (
            &["train", "--steps", "1", "--sample", "99999"],
            "--sample must be at most 10000",
        ),
        (
            &["train", "--steps", "1", "--trace", missing],
            "cannot write trace",
        ),
        (
            &[
                "train",
                "--steps",
                "1",
                "--trace",
                missing,
                "--trace-steady",
                "1",
            ],
            "--trace-steady must be 2 or later",
        ),
        (
            &["train", "--steps", "1", "--save", missing],
            "cannot write checkpoint",
        ),
        (
            &["train", "--steps", "1", "--save", folder],
            "it is a folder",
        ),
        // The checkpoint does not exist: the settings are refused before it is read.
        (
            &["sample", "--checkpoint", missing, "--temperature", "-1"],
            "--temperature must be 0 (greedy) or positive, got -1",
        ),
        (
            &["sample", "--checkpoint", missing, "--tokens", "20000"],
            "--tokens must be at most 10000 characters",
        ),
        // A negative number is a bad value, not an unknown flag.
        (
            &["bench", "step", "--steps", "-1"],
            "invalid value '-1' for '--steps <STEPS>'",
        ),
        // /dev/zero says it holds 0 bytes and never ends.
        (
            &["train", "--corpus", "/dev/zero"],
            "the largest corpus accepted is 67108864 bytes",
        ),
    ];
    for (args, expected) in cases {
        let (ok, stderr, took) = run(args);
        assert!(!ok, "tidepool {args:?} succeeded");
        assert!(stderr.contains(expected), "tidepool {args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked"),
            "tidepool {args:?} panicked: {stderr}"
        );
        // Seconds at most: none of these may train (tiny's first step on lavapipe
        // compiles for longer) or read an endless file past its cap.
        assert!(took.as_secs() < 20, "tidepool {args:?} took {took:?}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing left behind"
    );
    std::fs::remove_dir_all(&dir).ok();
}
