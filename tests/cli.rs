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
    let out = Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args([
            "train",
            "--preset",
            "tiny",
            "--batch",
            "2",
            "--context",
            "8",
        ])
        .args([
            "--steps",
            "23",
            "--eval-every",
            "6",
            "--eval-batches",
            "2",
            "--json",
        ])
        .args(["--trace-steady", "4", "--save-every", "10"])
        .arg("--trace")
        .arg(&trace)
        .arg("--save")
        .arg(&ckpt)
        .output()
        .expect("runs tidepool");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tidepool train failed: {stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    let steps: Vec<&serde_json::Value> = lines.iter().filter(|l| l["final"].is_null()).collect();
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
    std::fs::remove_dir_all(&dir).ok();
}
