//! `tidepool` as a user runs it: the built binary, its output to a file or pipe and
//! to a terminal, its refusals and their exit codes (2: the command line, 1: the
//! work), and its help. Native only (it runs the binary); seconds each on lavapipe.
#![cfg(all(feature = "cli", not(target_arch = "wasm32")))]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one run of `tidepool` left behind.
struct Run {
    /// The exit code (`None`: killed by a signal).
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `program ARGS` to its end, killing it past `limit` (a failure).
fn run_program(program: &str, args: &[&str], limit: Duration) -> Run {
    let start = Instant::now();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = match rx.recv_timeout(limit) {
        Ok(out) => out.expect("waits"),
        Err(_) => {
            Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .ok();
            panic!("{program} {args:?} ran past {limit:?}");
        }
    };
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: start.elapsed(),
    }
}

/// Runs `tidepool ARGS` (for at most 10 minutes).
fn tidepool(args: &[&str]) -> Run {
    let bin = env!("CARGO_BIN_EXE_tidepool");
    run_program(bin, args, Duration::from_secs(600))
}

/// `train` on a tiny model (seconds on lavapipe), then `extra`.
fn train_args<'a>(steps: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let tiny = [
        "train",
        "--preset",
        "tiny",
        "--batch",
        "2",
        "--context",
        "8",
    ];
    [&tiny[..], &["--steps", steps], extra].concat()
}

/// Runs `tidepool train` on a tiny model with `extra` flags and `--json`; its step
/// lines, and its stderr.
fn train_json(steps: &str, extra: &[&str]) -> (Vec<serde_json::Value>, String) {
    let out = tidepool(&train_args(steps, &[extra, &["--json"]].concat()));
    assert_eq!(out.code, Some(0), "tidepool train failed: {}", out.stderr);
    let lines = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("one JSON object a line"))
        .filter(|l| l["final"].is_null())
        .collect();
    (lines, out.stderr)
}

/// Runs `tidepool train` on a tiny model with `extra` flags, its output to a pipe;
/// its stdout lines.
fn train_plain(steps: &str, extra: &[&str]) -> Vec<String> {
    let out = tidepool(&train_args(steps, extra));
    assert_eq!(out.code, Some(0), "tidepool train failed: {}", out.stderr);
    out.stdout.lines().map(str::to_string).collect()
}

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
    let (steps, stderr) = train_json("23", &[&flags[..], &more[..]].concat());
    let numbers: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(
        numbers,
        (1..=23).collect::<Vec<_>>(),
        "each step once, in order"
    );
    assert!(
        stderr.contains(&format!("trace of steps 1 and 4 written to {t}")),
        "{stderr}"
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
    let out = tidepool(&["train", "--resume", ckpt.to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("nothing is left to train; give --steps above 23"),
        "{}",
        out.stderr
    );
    std::fs::remove_dir_all(&dir).ok();
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
    let (in_flight, _) = train_json("40", &[]);
    let (one_at_a_time, _) = train_json("40", &["--trace", trace, "--trace-steady", "40"]);
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

/// The mean training loss of steps `first..=last` as the report prints it, from
/// the same run's JSON lines (each loss an f32, summed in f64 in step order).
fn mean_loss(steps: &[serde_json::Value], first: usize, last: usize) -> String {
    let losses = steps[first - 1..last]
        .iter()
        .map(|s| f64::from(s["loss"].as_f64().unwrap() as f32));
    format!("{:.4}", losses.sum::<f64>() / (last + 1 - first) as f64)
}

/// The held-out loss after `step` in a run's JSON lines, as the report prints it.
fn val_loss(steps: &[serde_json::Value], step: usize) -> String {
    format!(
        "{:.4}",
        steps[step - 1]["val_loss"].as_f64().unwrap() as f32
    )
}

/// The steps of the plain progress lines (`step N/TOTAL: ...`) among `lines`.
fn progress_steps(lines: &[String], total: u32) -> Vec<u32> {
    let suffix = format!("/{total}:");
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("step ")?.split_once(' '))
        .filter_map(|(n, _)| n.strip_suffix(&suffix)?.parse().ok())
        .collect()
}

/// Redirected to a file or a pipe, `train` prints what a terminal shows: a header,
/// a plain line every few steps (about 20 a run, each with the mean loss since the
/// line before), nanoGPT's evaluation lines, a line before the final evaluation
/// and the summary. The figures are those of the same run's JSON lines.
#[test]
fn a_redirected_run_prints_progress_evaluation_and_final_lines() {
    let flags = ["--eval-every", "16", "--eval-batches", "2"];
    let (steps, _) = train_json("40", &flags);
    let lines = train_plain("40", &flags);
    let text = lines.join("\n");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r'),
        "no bar: {text}"
    );
    assert!(
        lines[0].starts_with("tiny on ") && lines[0].contains("2 layers"),
        "{text}"
    );

    // 40 steps: a line every 2 steps, each with the mean of its two losses.
    let every: Vec<u32> = (1..=20).map(|i| 2 * i).collect();
    assert_eq!(progress_steps(&lines, 40), every, "{text}");
    for step in every {
        let want = format!(
            "step {step}/40: loss {}, ",
            mean_loss(&steps, step as usize - 1, step as usize)
        );
        assert!(lines.iter().any(|l| l.starts_with(&want)), "{want}\n{text}");
    }

    // nanoGPT's evaluation lines, after their step's progress line.
    let evaluations: Vec<&String> = lines.iter().filter(|l| l.contains("val loss")).collect();
    assert_eq!(
        evaluations.len(),
        3,
        "two evaluations and the summary: {text}"
    );
    for (step, first) in [(16, 1), (32, 17)] {
        let want = format!(
            "step {step}: train loss {}, val loss {}, ",
            mean_loss(&steps, first, step),
            val_loss(&steps, step)
        );
        let at = lines.iter().position(|l| l.starts_with(&want));
        let at = at.unwrap_or_else(|| panic!("no line {want:?} in\n{text}"));
        assert!(lines[at].ends_with(" s elapsed"), "{}", lines[at]);
        assert!(
            lines[at - 1].starts_with(&format!("step {step}/40: ")),
            "{text}"
        );
    }

    // Step 40 is no evaluation step: the final evaluation runs, announced first.
    let n = lines.len();
    assert!(lines[n - 3].starts_with("step 40/40: "), "{text}");
    assert_eq!(lines[n - 2], "final evaluation on 2 held-out batches...");
    assert!(lines[n - 1].starts_with("done: 40 steps in "), "{text}");
    assert!(lines[n - 1].contains(" val loss "), "{text}");
    assert!(lines[n - 1].contains("(2 held-out batches)"), "{text}");
}

/// `--f16-attention` says where attention stays f32: without `--precision f16`, and
/// on a device without cooperative matrices (`tidepool info` says which this is).
/// Tensor-core attention is the default, and `--f16-attention=false` turns it off.
#[test]
fn f16_attention_says_where_it_does_not_apply() {
    let out = tidepool(&train_args(
        "1",
        &["--f16-attention", "--eval-batches", "1"],
    ));
    assert_eq!(out.code, Some(0), "tidepool train failed: {}", out.stderr);
    assert!(
        out.stderr
            .contains("note: --f16-attention applies to --precision f16 only"),
        "{}",
        out.stderr
    );
    let f16 = [
        "--f16-attention",
        "--precision",
        "f16",
        "--eval-batches",
        "1",
    ];
    let out = tidepool(&train_args("1", &f16));
    assert_eq!(out.code, Some(0), "tidepool train failed: {}", out.stderr);
    let info = tidepool(&["info"]);
    let refused = out
        .stderr
        .contains("note: --f16-attention: attention stays f32 here: ");
    assert_eq!(
        refused,
        info.stdout.contains("cooperative matrices: no"),
        "{}\n{}",
        out.stderr,
        info.stdout
    );
    // With --json the note still goes to stderr, and the last line says what ran.
    let out = tidepool(&train_args("1", &[&f16[..], &["--json"]].concat()));
    assert_eq!(out.code, Some(0), "tidepool train failed: {}", out.stderr);
    assert_eq!(
        out.stderr
            .contains("note: --f16-attention: attention stays f32 here: "),
        refused,
        "{}",
        out.stderr
    );
    let last: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().expect("a final line")).expect("JSON");
    assert_eq!(last["f16_attention"], !refused, "{last}");
    // It is the default, said of nowhere; `--f16-attention=false` keeps attention f32.
    let last_line = |extra: &[&str]| {
        let args = [
            &["--precision", "f16", "--eval-batches", "1", "--json"],
            extra,
        ]
        .concat();
        let out = tidepool(&train_args("1", &args));
        assert_eq!(out.code, Some(0), "tidepool train failed: {}", out.stderr);
        assert!(
            !out.stderr.contains("note: --f16-attention"),
            "{}",
            out.stderr
        );
        let last = out.stdout.lines().last().expect("a final line").to_string();
        serde_json::from_str::<serde_json::Value>(&last).expect("JSON")
    };
    assert_eq!(last_line(&[])["f16_attention"], !refused);
    assert_eq!(
        last_line(&["--f16-attention=false"])["f16_attention"],
        false
    );
    let out = tidepool(&train_args("1", &["--f16-attention=maybe"]));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--f16-attention"), "{}", out.stderr);
    // bench says it of each f16 preset it times.
    let out = tidepool(&[
        "bench",
        "step",
        "--presets",
        "tiny",
        "--precision",
        "f32,f16",
        "--f16-attention",
        "--at-once",
        "1",
        "--warmup",
        "1",
        "--steps",
        "1",
    ]);
    assert_eq!(out.code, Some(0), "tidepool bench failed: {}", out.stderr);
    assert_eq!(
        out.stderr
            .matches("note: --f16-attention: tiny f16's attention stays f32 here: ")
            .count(),
        usize::from(refused),
        "{}",
        out.stderr
    );
    let out = tidepool(&["train", "--resume", "x.safetensors", "--f16-attention"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

/// bench says where its f16 flags change nothing: with no f16 run, both flags in one
/// note; with one, `--f16-weights` only where the f16 core reads the f32 weights.
#[test]
fn bench_notes_f16_flags_that_change_nothing() {
    let bench = |extra: &[&str]| {
        let base = ["bench", "step", "--presets", "tiny", "--at-once", "1"];
        let out = tidepool(&[&base[..], &["--warmup", "0", "--steps", "1"], extra].concat());
        assert_eq!(out.code, Some(0), "tidepool bench failed: {}", out.stderr);
        out.stderr
    };
    let none = "changes only f16 runs (--precision f16), and none runs here";
    assert!(bench(&["--f16-weights"]).contains(&format!("note: --f16-weights {none}")));
    let both = bench(&["--f16-weights", "--f16-attention"]);
    assert!(
        both.contains("note: --f16-weights and --f16-attention change only f16 runs"),
        "{both}"
    );
    assert!(!bench(&[]).contains("note: --f16"));
    // With an f16 run: a note exactly where the device's f16 core cannot read the copy.
    let options = tidepool::ContextOptions {
        precision: tidepool::config::Precision::F16,
        f16_weights: true,
        ..Default::default()
    };
    // Without shader-f16 the run itself refuses f16, and says so.
    let Ok(ctx) = pollster::block_on(tidepool::WgpuContext::with_options(options)) else {
        return;
    };
    let copy = tidepool::kernels::matmul::reads_f16_weights(&ctx);
    let f16 = bench(&["--precision", "f16", "--f16-weights"]);
    assert_eq!(
        f16.contains("note: --f16-weights: the f16 matmuls here read the f32 weights"),
        !copy,
        "{f16}"
    );
}

#[test]
fn recompute_is_stated_and_trains_the_same_losses() {
    let json_lines = |extra: &[&str]| {
        let out = tidepool(&train_args(
            "3",
            &[extra, &["--json", "--eval-batches", "1"]].concat(),
        ));
        assert_eq!(out.code, Some(0), "tidepool train failed: {}", out.stderr);
        out.stdout
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON lines"))
            .collect::<Vec<_>>()
    };
    let losses = |lines: &[serde_json::Value]| -> Vec<String> {
        lines.iter().map(|l| l["loss"].to_string()).collect()
    };
    let kept = json_lines(&[]);
    let recomputed = json_lines(&["--recompute"]);
    assert_eq!(kept.last().unwrap()["recompute"], false);
    assert_eq!(recomputed.last().unwrap()["recompute"], true);
    assert_eq!(
        json_lines(&["--recompute", "false"]).last().unwrap()["recompute"],
        false
    );
    assert_eq!(losses(&recomputed), losses(&kept));

    let lines = train_plain("2", &["--recompute", "--eval-batches", "1"]);
    assert!(
        lines[0].contains("layernorms recomputed in the backward"),
        "{lines:?}"
    );
    let done = lines.last().unwrap();
    assert!(
        done.contains("peak reserved ") && done.ends_with(" with layernorms recomputed"),
        "{done}"
    );

    let out = tidepool(&[
        "bench",
        "policies",
        "--policies",
        "pow2/8",
        "--warmup",
        "1",
        "--steps",
        "1",
        "--recompute",
        "--json",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let rows: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| !r["policy"].is_null())
        .collect();
    let settings: Vec<_> = rows
        .iter()
        .map(|r| (r["policy"].clone(), r["recompute"].clone()))
        .collect();
    assert_eq!(
        settings,
        [
            ("pow2/8".into(), false.into()),
            ("pow2/8".into(), true.into())
        ]
    );
    let requested = |r: &serde_json::Value| r["peak_bytes_requested"].as_u64().unwrap();
    assert!(requested(&rows[1]) < requested(&rows[0]), "{rows:?}");
}

/// `--log-every N` sets the plain lines (the last step always has one; 0: none).
/// A run that ends on an evaluation step reports that evaluation as its final one
/// instead of evaluating the same weights again.
#[test]
fn log_every_sets_the_plain_lines_and_a_last_evaluation_is_not_repeated() {
    let sevens = train_plain("40", &["--log-every", "7", "--eval-batches", "2"]);
    assert_eq!(progress_steps(&sevens, 40), [7, 14, 21, 28, 35, 40]);

    let flags = [
        "--log-every",
        "0",
        "--eval-every",
        "20",
        "--eval-batches",
        "2",
    ];
    let lines = train_plain("40", &flags);
    let text = lines.join("\n");
    assert!(progress_steps(&lines, 40).is_empty(), "{text}");
    assert!(!text.contains("final evaluation"), "{text}");
    let last = lines
        .iter()
        .find_map(|l| l.strip_prefix("step 40: train loss "))
        .unwrap_or_else(|| panic!("no evaluation at step 40:\n{text}"));
    let val = last.split(", val loss ").nth(1).unwrap().split(',').next();
    let done = lines.last().unwrap();
    assert!(
        done.contains(&format!("val loss {} (2 held-out", val.unwrap())),
        "{text}"
    );
}

/// On a terminal the steps go on a progress bar, the evaluation lines above it,
/// and the final evaluation has a spinner of its own.
#[test]
fn on_a_terminal_a_bar_shows_the_steps_and_a_spinner_the_final_evaluation() {
    let bin = env!("CARGO_BIN_EXE_tidepool");
    let args = train_args("20", &["--eval-every", "8", "--eval-batches", "2"]);
    // util-linux `script` runs the command on a pseudo-terminal and copies what it
    // writes; it is in every Debian (bsdutils).
    let command = format!("'{bin}' {}", args.join(" "));
    let limit = Duration::from_secs(600);
    let out = run_program("script", &["-q", "-e", "-c", &command, "/dev/null"], limit);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let screen = out.stdout;
    assert!(
        screen.starts_with("tiny on "),
        "the header comes first: {screen}"
    );
    assert!(screen.contains("20/20"), "a bar counts the steps: {screen}");
    assert!(screen.contains('\u{1b}'), "it redraws: {screen}");
    assert!(progress_steps(&screen.lines().map(String::from).collect::<Vec<_>>(), 20).is_empty());
    for step in [8, 16] {
        assert!(
            screen.contains(&format!("step {step}: train loss ")),
            "{screen}"
        );
    }
    assert!(
        screen.contains("final evaluation on 2 held-out batches"),
        "{screen}"
    );
    assert!(
        !screen.contains("held-out batches..."),
        "a spinner, not a line: {screen}"
    );
    assert!(screen.contains("done: 20 steps in "), "{screen}");
}

/// A reader that goes away (`tidepool train | head -1`) ends the run at its next
/// line, quietly: no panic, no error, exit code 0.
#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    // Hours of steps, a line each: only the closed pipe can end this run soon.
    let args = train_args("1000000", &["--log-every", "1"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs tidepool");
    let mut header = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut header)
        .unwrap();
    // The reader is dropped here, before the first step's line is written.
    assert!(header.starts_with("tiny on "), "{header}");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().ok();
            child.wait().ok();
            panic!("tidepool went on training after its reader had gone");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("error"),
        "{stderr}"
    );
}

/// Signs of Rust's debug formatting in what a user reads.
const DEBUG_FORMATTING: [&str; 6] = ["[\"", "\"]", "Some(", "Os {", "kind:", "os error"];

/// Runs each case, which must fail at once with `code`, its stderr holding the
/// expected words, and no panic and no debug formatting.
fn refused(cases: &[(&[&str], &str)], code: i32) {
    for (args, expected) in cases {
        let out = tidepool(args);
        let stderr = &out.stderr;
        assert_eq!(out.code, Some(code), "tidepool {args:?}: {stderr}");
        assert!(stderr.contains(expected), "tidepool {args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "tidepool {args:?}: {stderr}");
        for sign in DEBUG_FORMATTING {
            assert!(!stderr.contains(sign), "tidepool {args:?}: {stderr}");
        }
        // Seconds at most: none of these may train (tiny's first step on lavapipe
        // compiles for longer) or read an endless file past its cap.
        assert!(
            out.took.as_secs() < 20,
            "tidepool {args:?} took {:?}",
            out.took
        );
    }
}

/// Each bench subcommand takes its own flags, each checked by the command line
/// (exit code 2) before any work.
#[test]
fn bench_subcommands_refuse_bad_and_foreign_flags() {
    refused(
        &[
            (&["bench", "nope"], "unrecognized subcommand 'nope'"),
            (&["bench"], "Usage: tidepool bench <COMMAND>"),
            (
                &["bench", "pool", "--batches", "0"],
                "invalid value '0' for '--batches <BATCHES>': must be at least 1",
            ),
            (&["bench", "pool", "--presets", "tiny"], "unexpected argument '--presets'"),
            (
                &["bench", "step", "--steps", "0"],
                "invalid value '0' for '--steps <STEPS>': must be at least 1",
            ),
            (
                &["bench", "step", "--steps", "-1"],
                "invalid value '-1' for '--steps <STEPS>'",
            ),
            (
                &["bench", "step", "--at-once", "0"],
                "invalid value '0' for '--at-once <AT_ONCE>': must be a whole number from 1 to 1024",
            ),
            (&["bench", "step", "--at-once", "8,5000"], "invalid value '5000'"),
            (
                &["bench", "step", "--at-once", "16", "--in-flight", "1,3"],
                "invalid value '3' for '--in-flight <IN_FLIGHT>': must be a whole number from 1 to 2",
            ),
            (
                &["bench", "step", "--in-flight", "2"],
                "the following required arguments were not provided:\n  --at-once",
            ),
            (
                &["bench", "step", "--presets", "tiny,,small"],
                "a value is required for '--presets <PRESETS>'",
            ),
            (
                &["bench", "step", "--presets", "tiny,huge"],
                "invalid value 'huge' for '--presets <PRESETS>'\n  [possible values: tiny, small, shakespeare]",
            ),
            (
                &["bench", "step", "--precision", "f64"],
                "[possible values: f32, f16]",
            ),
            (
                &["bench", "kernels", "--steps", "0"],
                "invalid value '0' for '--steps <STEPS>': must be at least 1",
            ),
            (&["bench", "kernels", "--at-once", "4"], "unexpected argument '--at-once'"),
            (
                &["bench", "kernels", "--policy", "pow3"],
                "invalid value 'pow3' for '--policy <POLICY>'",
            ),
            (
                &["bench", "policies", "--bindings", "write"],
                "invalid value 'write' for '--bindings <BINDINGS>'",
            ),
            (
                &["bench", "policies", "--precision", "f16"],
                "unexpected argument '--precision'",
            ),
            (&["bench", "policies", "--presets", "x"], "invalid value 'x' for '--presets"),
            (
                &["bench", "soak", "--every", "0"],
                "invalid value '0' for '--every <EVERY>': must be at least 1",
            ),
            (&["bench", "soak", "--preset", "x"], "invalid value 'x' for '--preset"),
            (&["bench", "soak", "--presets", "tiny"], "unexpected argument '--presets'"),
            (
                &["trace", "bench", "--steps", "0"],
                "invalid value '0' for '--steps <STEPS>': must be at least 1",
            ),
        ],
        2,
    );
}

/// Odd flags are refused at once by the command line (exit code 2), naming the
/// flag and its limit.
#[test]
fn odd_train_and_sample_flags_are_usage_errors() {
    let dir = std::env::temp_dir().join(format!("tidepool-cli-usage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-folder").join("out.json");
    let missing = missing.to_str().unwrap();
    refused(
        &[
            (
                &["train", "--preset", "tyni"],
                "invalid value 'tyni' for '--preset <PRESET>'\n  [possible values: tiny, small, shakespeare]",
            ),
            (&["train", "--layers", "0"], "layers must be from 1 to 1024, got 0"),
            (&["train", "--log-every", "5", "--json"], "'--log-every <N>' cannot be used with '--json'"),
            (
                &["train", "--steps", "1", "--sample", "99999"],
                "--sample must be at most 10000",
            ),
            (
                &["train", "--steps", "1", "--trace", missing, "--trace-steady", "1"],
                "--trace-steady must be 2 or later",
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
        ],
        2,
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing left behind"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Files that cannot be used fail the command (exit code 1) with an error that
/// names the file, what it is for and why, before any GPU work (or, for an endless
/// file, at its cap).
#[test]
fn unusable_files_are_named_with_what_they_are_for() {
    let dir = std::env::temp_dir().join(format!("tidepool-cli-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (gone, deep) = (path("run.safetensors"), path("no-such-folder/out.json"));
    let (binary, damaged, folder) = (path("binary.txt"), path("damaged.safetensors"), path(""));
    let folder = folder.trim_end_matches('/');
    std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x41]).unwrap();
    std::fs::write(&damaged, b"not a checkpoint at all").unwrap();
    let cannot = |verb: &str, what: &str, file: &str, why: &str| {
        format!("cannot {verb} {what} {file}: {why}")
    };
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["train", "--resume", &gone],
            cannot("read", "checkpoint", &gone, "no such file"),
        ),
        (
            vec!["sample", "--checkpoint", &gone],
            cannot("read", "checkpoint", &gone, "no such file"),
        ),
        (
            vec!["sample", "--checkpoint", &damaged],
            format!("{damaged}: bad checkpoint: not a complete safetensors file"),
        ),
        (
            vec!["train", "--corpus", &gone],
            cannot("read", "corpus", &gone, "no such file"),
        ),
        (
            vec!["train", "--corpus", folder],
            cannot("read", "corpus", folder, "it is a folder"),
        ),
        (
            vec!["train", "--corpus", &binary],
            format!("bad corpus: {binary} is not UTF-8 text"),
        ),
        (
            vec!["bench", "step", "--corpus", &gone],
            cannot("read", "corpus", &gone, "no such file"),
        ),
        // /dev/zero says it holds 0 bytes and never ends.
        (
            vec!["train", "--corpus", "/dev/zero"],
            "the largest corpus accepted is 67108864 bytes".into(),
        ),
        (
            vec!["train", "--steps", "1", "--save", &deep],
            cannot("write", "checkpoint", &deep, "no such folder"),
        ),
        (
            vec!["train", "--steps", "1", "--save", folder],
            cannot("write", "checkpoint", folder, "it is a folder"),
        ),
        (
            vec!["train", "--steps", "1", "--trace", &deep],
            cannot("write", "trace", &deep, "no such folder"),
        ),
        (
            vec!["trace", "replay", &gone],
            cannot("read", "trace", &gone, "no such file"),
        ),
        (
            vec!["trace", "replay", &binary],
            format!("bad trace: {binary}: neither a PyTorch memory snapshot"),
        ),
        (
            vec!["trace", "replay", &damaged],
            format!("bad trace: {damaged}: neither a PyTorch memory snapshot"),
        ),
    ];
    for (args, expected) in &cases {
        refused(&[(args, expected)], 1);
        let stderr = tidepool(args).stderr;
        assert!(!stderr.contains("bad configuration"), "{stderr}");
    }
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["binary.txt", "damaged.safetensors"],
        "nothing left behind"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Devices, named pipes and sockets: a pipe with no writer reads as empty instead
/// of blocking, a device is read no further than its format's cap (a checkpoint's
/// header declares its size), and none is ever replaced by a write; a symbolic
/// link is written through and stays a link.
#[test]
fn special_files_are_refused_or_read_within_their_caps() {
    use std::os::unix::fs::FileTypeExt;
    let dir = std::env::temp_dir().join(format!("tidepool-cli-special-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (fifo, socket) = (path("pipe"), path("socket"));
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("a socket");
    let (dangling, missing) = (path("dangling.safetensors"), path("missing.safetensors"));
    std::os::unix::fs::symlink(&missing, &dangling).unwrap();
    let not_regular = "it is not a regular file (a device, a named pipe or a socket)";
    let cannot = |what: &str, file: &str, why: &str| format!("cannot write {what} {file}: {why}");
    let cases: Vec<(Vec<&str>, String)> = vec![
        // No writer: empty at once, not a wait for one that never comes.
        (
            vec!["train", "--corpus", &fifo],
            format!("bad corpus: {fifo} is empty"),
        ),
        // /dev/zero's header declares 0 bytes: refused after 8 bytes, not 1 GiB.
        (
            vec!["sample", "--checkpoint", "/dev/zero"],
            "/dev/zero: bad checkpoint: not a complete safetensors file".into(),
        ),
        (
            vec!["train", "--steps", "1", "--save", &fifo],
            cannot("checkpoint", &fifo, not_regular),
        ),
        (
            vec!["train", "--steps", "1", "--trace", &socket],
            cannot("trace", &socket, not_regular),
        ),
        (
            vec!["train", "--steps", "1", "--save", &dangling],
            cannot(
                "checkpoint",
                &dangling,
                "it is a symbolic link to a file that does not exist",
            ),
        ),
    ];
    for (args, expected) in &cases {
        refused(&[(args, expected)], 1);
    }
    let kind = |p: &str| std::fs::symlink_metadata(p).unwrap().file_type();
    assert!(kind(&fifo).is_fifo(), "the pipe is still a pipe");
    assert!(kind(&socket).is_socket(), "the socket is still a socket");
    assert!(kind(&dangling).is_symlink(), "the link is still a link");

    // A link to a file: the file gets the checkpoint, the link stays.
    let (real, link) = (path("real.safetensors"), path("link.safetensors"));
    std::fs::write(&real, b"old").unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = tidepool(&train_args("1", &["--save", &link]));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(kind(&link).is_symlink(), "the link was replaced");
    let saved = std::fs::read(&real).unwrap();
    tidepool::checkpoint::Checkpoint::from_bytes(&saved).expect("the file it names holds the run");
    std::fs::remove_dir_all(&dir).ok();
}

/// `train --help` groups its flags by what they set.
#[test]
fn train_help_groups_flags_by_what_they_set() {
    let out = tidepool(&["train", "--help"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Each heading (a line "Name:") and the flags listed under it.
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for line in out.stdout.lines() {
        if let Some(heading) = line.strip_suffix(':').filter(|h| !h.starts_with(' ')) {
            groups.push((heading.to_string(), Vec::new()));
        } else if let (true, Some(at), Some((_, flags))) = (
            line.trim_start().starts_with('-'),
            line.find("--"),
            groups.last_mut(),
        ) {
            // "  -h, --help  Print help", "      --layers <LAYERS>  Transformer blocks"
            flags.push(line[at + 2..].split(' ').next().unwrap().to_string());
        }
    }
    let headings: Vec<&str> = groups.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        headings,
        [
            "Options",
            "Model",
            "Training",
            "Pool",
            "Output",
            "Checkpoint"
        ],
        "{}",
        out.stdout
    );
    let group = |name: &str| &groups.iter().find(|(h, _)| h == name).unwrap().1;
    for (heading, flags) in [
        (
            "Model",
            &["preset", "layers", "heads", "width", "context"][..],
        ),
        (
            "Training",
            &["batch", "lr", "steps", "eval-every", "corpus", "recompute"],
        ),
        ("Pool", &["pool", "policy", "no-pool"]),
        (
            "Output",
            &["json", "log-every", "sample", "trace", "trace-steady"],
        ),
        ("Checkpoint", &["save", "save-every", "resume"]),
    ] {
        for flag in flags {
            assert!(
                group(heading).iter().any(|f| f == flag),
                "--{flag} under {heading}: {}",
                out.stdout
            );
        }
    }
    assert_eq!(group("Options"), &["help"]);

    // Each bench subcommand lists only its own flags.
    let help = |which: &str| tidepool(&["bench", which, "--help"]).stdout;
    assert!(help("step").contains("--at-once"));
    assert!(!help("pool").contains("--presets"));
    assert!(!help("soak").contains("--precision"));
}

/// The snapshots scripts/torch_snapshot.py recorded of real PyTorch training on an
/// H200, each with the figures PyTorch itself reported.
const SNAPSHOTS: [&str; 4] = ["gpt_eager", "gpt_sdpa", "resnet18", "gpt2"];

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/snapshots/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Every row a replay table holds, by name.
const ROWS: [&str; 14] = [
    "lower bound",
    "pow2",
    "pow2/2",
    "pow2/4",
    "pow2/8",
    "pow2/16",
    "exact",
    "pow2/8 fit2",
    "pow2/8 fit4",
    "pow2/8 fit8",
    "pow2 fit2",
    "exact fit2",
    "object plan",
    "offset plan",
];

/// A table's rows: allocator name -> peak bytes.
fn table_rows(stdout: &str) -> Vec<(String, u64)> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("allocator "))
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("note:"))
        .filter_map(|l| {
            // name, peak bytes, x bound, created, hits: the name may hold spaces.
            let fields: Vec<&str> = l.split_whitespace().collect();
            let n = fields.len().checked_sub(4)?;
            Some((fields[..n].join(" "), fields[n].parse().ok()?))
        })
        .collect()
}

/// `tidepool trace replay snap.pickle`: the table names PyTorch's own reserved
/// figure as a row, the lower bound, every policy and both plans, and says what
/// step it found; `--json` holds the same figures, and PyTorch's peaks within 1% of
/// what PyTorch reported for the run.
#[test]
fn trace_replay_reads_pytorch_snapshots() {
    for name in SNAPSHOTS {
        let file = fixture(&format!("{name}.pickle"));
        let out = tidepool(&["trace", "replay", &file]);
        assert_eq!(out.code, Some(0), "{name}: {}", out.stderr);
        let text = &out.stdout;
        assert!(
            text.starts_with("PyTorch caching allocator, device 0: "),
            "{name}: {text}"
        );
        assert!(text.contains("the repeating step ("), "{name}: {text}");
        assert!(text.contains("% matched)"), "{name}: {text}");
        let rows = table_rows(text);
        let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[0], "lower bound", "{name}: {text}");
        assert_eq!(names[1], "PyTorch caching allocator (recorded)", "{name}");
        for row in ROWS {
            assert!(names.contains(&row), "{name}: no row {row}: {text}");
        }
        let lower = rows[0].1;
        assert!(
            rows.iter().all(|(_, peak)| *peak >= lower),
            "{name}: {text}"
        );

        let json = tidepool(&["trace", "replay", &file, "--json"]);
        assert_eq!(json.code, Some(0), "{name}: {}", json.stderr);
        let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
        assert_eq!(report["format"], "pytorch-snapshot");
        let step = &report["steps"][0];
        assert_eq!(step["chosen"], "found");
        assert!(step["period"]["matched"].as_f64().unwrap() > 0.99);
        let json_rows: Vec<(String, u64)> = step["replay"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let name = r["allocator"].as_str().unwrap().to_string();
                (name, r["peak_bytes"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(json_rows, rows, "{name}: the table and the JSON agree");
        assert_eq!(rows[1].1, step["step_peaks"]["reserved"].as_u64().unwrap());

        let figures: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture(&format!("{name}.json"))).unwrap())
                .unwrap();
        for (ours, theirs) in [
            ("allocated", "max_memory_allocated"),
            ("reserved", "max_memory_reserved"),
        ] {
            let ours = step["peaks"][ours].as_f64().unwrap();
            let theirs = figures[theirs].as_f64().unwrap();
            assert!(
                (ours - theirs).abs() <= theirs * 0.01,
                "{name}: {ours} against PyTorch's {theirs}"
            );
        }
    }
}

/// `--events A..B` replays those events; `--device N` reads that device.
#[test]
fn trace_replay_takes_a_range_of_events_and_a_device() {
    let file = fixture("synthetic_gpt.pickle");
    let out = tidepool(&["trace", "replay", &file, "--events", "10..200"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("step: events 10..200, the events asked for"),
        "{}",
        out.stdout
    );
    let json = tidepool(&["trace", "replay", &file, "--events", "10..200", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    let step = &report["steps"][0];
    assert_eq!(
        (&step["first_event"], &step["end_event"], &step["chosen"]),
        (&10.into(), &200.into(), &"range".into())
    );

    let two = fixture("synthetic_two_devices.pickle");
    for (device, label) in [("0", "device 0"), ("1", "device 1")] {
        let out = tidepool(&["trace", "replay", &two, "--device", device]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert!(
            out.stdout
                .starts_with(&format!("PyTorch caching allocator, {label}:")),
            "{}",
            out.stdout
        );
    }
    refused(
        &[
            (
                &["trace", "replay", &two, "--device", "5"],
                "no device 5: the snapshot traces 2 devices",
            ),
            (
                &["trace", "replay", &file, "--events", "10..900000"],
                "events 10..900000 are not a range of device 0's",
            ),
        ],
        1,
    );
    refused(
        &[
            (
                &["trace", "replay", &file, "--events", "5..5"],
                "5..5 holds no events",
            ),
            (
                &["trace", "replay", &file, "--events", "ten"],
                "expected A..B",
            ),
            (
                &["trace", "replay", &file, "--events", "-1..4"],
                "is not an event number",
            ),
            (&["trace", "replay", &file, "--max-mb", "0"], "--max-mb"),
        ],
        2,
    );
}

/// Hostile and broken files: an error of kind trace (`bad trace:`) naming the file
/// and what is wrong, exit code 1, no panic; a file above the cap is refused before
/// it is read, naming the flag that raises it.
#[test]
fn trace_replay_refuses_hostile_files() {
    let dir = std::env::temp_dir().join(format!("tidepool-cli-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let snapshot = std::fs::read(fixture("gpt_eager.pickle")).unwrap();
    let proto = |body: &[u8]| [&[0x80u8, 4][..], body].concat();
    let mut deep = vec![0x80u8, 4];
    deep.extend(std::iter::repeat_n(b'(', 100_000));
    let mut large = vec![0x80u8, 4];
    large.resize(3 << 20, b'N');
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.pickle", vec![], "neither a PyTorch memory snapshot"),
        (
            "truncated.pickle",
            snapshot[..snapshot.len() / 2].to_vec(),
            "truncated",
        ),
        (
            "imports.pickle",
            proto(b"cos\nsystem\n(S'echo hi'\ntR."),
            "GLOBAL (imports",
        ),
        ("calls.pickle", proto(b"NNR."), "REDUCE (calls"),
        ("deep.pickle", deep, "Limits::max_depth"),
        (
            "huge-length.pickle",
            proto(b"\x8d\xff\xff\xff\xff\xff\xff\xff\x7f."),
            "bad length",
        ),
        (
            "a-number-where-a-list-belongs.pickle",
            proto(b"}(\x8c\x08segments]\x8c\x0ddevice_tracesK\x05u."),
            "device_traces is an integer, not a list",
        ),
        (
            "trace.json",
            b"{\"format\": 3}".to_vec(),
            "not a tidepool trace",
        ),
        (
            "large.pickle",
            large,
            "the file is 3145728 bytes; at most 2097152 are read (--max-mb 2)",
        ),
    ];
    for (name, bytes, why) in &cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let path = path.to_str().unwrap();
        let expected = format!("bad trace: {path}: ");
        refused(
            &[(&["trace", "replay", path, "--max-mb", "2"], &expected)],
            1,
        );
        refused(&[(&["trace", "replay", path, "--max-mb", "2"], why)], 1);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// tidepool's own trace replays through the same path: its pool's recorded row
/// beside the others.
#[test]
fn trace_replay_reads_tidepool_traces() {
    let dir = std::env::temp_dir().join(format!("tidepool-cli-own-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    let t = trace.to_str().unwrap();
    train_plain("3", &["--trace", t]);
    let out = tidepool(&["trace", "replay", t]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("tidepool pow2/8 fit2, step 1 (first): "),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("step 3 (steady)"), "{}", out.stdout);
    let rows = table_rows(&out.stdout);
    assert_eq!(rows[1].0, "tidepool pow2/8 fit2 (recorded)");
    for row in ROWS {
        assert!(rows.iter().any(|(n, _)| n == row), "no row {row}");
    }
    assert!(
        rows.iter().all(|(n, _)| n != "planned (live)"),
        "a pool's run has no planned row: {}",
        out.stdout
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The rows of one step of `trace replay --json`: allocator -> peak bytes.
fn json_rows(step: &serde_json::Value) -> Vec<(String, u64)> {
    step["replay"]["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let name = r["allocator"].as_str().unwrap().to_string();
            (name, r["peak_bytes"].as_u64().unwrap())
        })
        .collect()
}

/// A run under the planned policy: its trace's replay has a "planned (live)" row
/// beside the recorded one, and on the steady step it is exactly the peak the run
/// measured (its `--json` final line); the other rows are all there. A trace
/// written before the figure was recorded still replays, without that row.
#[test]
fn trace_replay_of_a_planned_run_shows_what_it_reserved() {
    let dir = std::env::temp_dir().join(format!("tidepool-cli-planned-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    let t = trace.to_str().unwrap();
    let flags = ["--policy", "planned", "--trace", t, "--json"];
    let out = tidepool(&train_args("4", &flags));
    assert_eq!(out.code, Some(0), "tidepool train failed: {}", out.stderr);
    let last = out.stdout.lines().last().expect("a final line");
    let last: serde_json::Value = serde_json::from_str(last).expect("JSON");
    assert_eq!(last["final"], true, "{last}");
    assert_eq!(last["policy"], "planned");
    let measured = last["peak_bytes_reserved"].as_u64().expect("a peak");

    let json = tidepool(&["trace", "replay", t, "--json"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    let steady = &report["steps"][1];
    assert_eq!(steady["recording"], "step 3 (steady)");
    let rows = json_rows(steady);
    assert_eq!(rows[1].0, "tidepool planned fit2 (recorded)");
    assert_eq!(rows[2], ("planned (live)".into(), measured), "{rows:?}");
    assert!(
        measured >= rows[0].1,
        "no run holds less than the lower bound"
    );
    for row in ROWS {
        assert!(rows.iter().any(|(n, _)| n == row), "no row {row}");
    }
    let table = tidepool(&["trace", "replay", t]);
    assert_eq!(table.code, Some(0), "{}", table.stderr);
    let steady_table = table
        .stdout
        .split("step 3 (steady)")
        .nth(1)
        .expect("step 3");
    assert_eq!(
        table_rows(steady_table),
        rows,
        "the table and the JSON agree"
    );

    let text = std::fs::read_to_string(&trace).unwrap();
    let mut old: serde_json::Value = serde_json::from_str(&text).unwrap();
    for step in old["steps"].as_array_mut().unwrap() {
        step.as_object_mut()
            .unwrap()
            .remove("peak_reserved")
            .expect("recorded");
    }
    let older = dir.join("older.json");
    std::fs::write(&older, old.to_string()).unwrap();
    let json = tidepool(&["trace", "replay", older.to_str().unwrap(), "--json"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    let older_rows = json_rows(&report["steps"][1]);
    let mut without = rows.clone();
    without.remove(2);
    assert_eq!(older_rows, without, "the same rows but the live one");
    std::fs::remove_dir_all(&dir).ok();
}
