//! Malformed input: every error names the file, the line (or JSON path) and
//! the reason, and no input of any shape makes the loaders panic.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use parcae_traces::{Format, TraceError, load, load_as, parse};

fn err(file: &str, text: &str, format: Option<Format>) -> TraceError {
    match parse(Path::new(file), text.as_bytes(), format) {
        Ok(t) => panic!("{file}: expected an error for {text:?}, got {} events", t.events().len()),
        Err(e) => e,
    }
}

/// Asserts the message is `file:line: ...reason...` (or `file: at path: ...`).
#[track_caller]
fn check(file: &str, text: &str, format: Option<Format>, location: &str, reason: &str) {
    let msg = err(file, text, format).to_string();
    let prefix = format!("{file}{location}: ");
    assert!(msg.starts_with(&prefix), "message {msg:?} should start with {prefix:?}");
    assert!(msg.contains(reason), "message {msg:?} should contain {reason:?}");
}

const SEG_OK: &str = r#"[0, "add", {"nodes": ["a", "b"], "duration": 60000, "throughput_opt_strategy": [2, 1], "liveput_truth_strategy": [2, 1], "liveput_predict_strategy": [2, 1]}]"#;

fn seg(t: &str, op: &str, nodes: &str, duration: &str) -> String {
    format!(
        r#"[{t}, "{op}", {{"nodes": {nodes}, "duration": {duration}, "throughput_opt_strategy": [1, 1], "liveput_truth_strategy": [1, 1], "liveput_predict_strategy": [1, 1]}}]"#
    )
}

#[test]
fn event_csv_errors() {
    let f = "p3-events.csv";
    check(
        f,
        "0,add,a\n0,add,b\n60000,ad,c\n",
        None,
        ":3",
        "unknown operation 'ad' (expected add, remove or end)",
    );
    assert_eq!(
        err(f, "0,add,a\n0,add,b\n60000,ad,c\n", None).to_string(),
        "p3-events.csv:3: unknown operation 'ad' (expected add, remove or end)"
    );
    check(f, "t_ms,op,node\n0,add,a\n10,add\n", None, ":3", "expected 3 comma-separated fields");
    check(f, "0,add,a\n-5,add,b\n", None, ":2", "timestamp '-5' is negative");
    check(
        f,
        "# comment\n\nabc,add,a\n",
        Some(Format::EventsCsv),
        ":3",
        "timestamp 'abc' is not a non-negative integer",
    );
    check(f, "0,add,a\n99999999999999999999999,add,b\n", None, ":2", "too large");
    check(f, "10,add,a\n5,add,b\n", None, ":2", "earlier than the previous event");
    check(f, "0,add,a\n1,remove,b\n", None, ":2", "cannot remove node 'b': it is not alive");
    check(f, "0,add,a\n1,remove,a\n2,remove,a\n", None, ":3", "cannot remove node 'a': it is not alive");
    check(f, "0,add,a\n1,add,a\n", None, ":2", "cannot add node 'a': it is already alive");
    check(f, "0,add,\n", None, ":1", "empty node id");
    check(f, "0,add,a,extra\n", Some(Format::EventsCsv), ":1", "expected 3 comma-separated fields");
    check(f, "0,add,a\r\n1,remove,a\r\n2,Remove,a\r\n", None, ":3", "unknown operation 'Remove'");
}

#[test]
fn count_csv_errors() {
    let f = "p3-counts.csv";
    check(f, "0,3\n60000,-1\n", None, ":2", "negative instance count '-1'");
    check(f, "t_ms,count_after_event\n60000,1\n0,2\n", None, ":3", "earlier than the previous row's 60000");
    check(f, "0,three\n", None, ":1", "instance count 'three' is not a non-negative integer");
    check(f, "0,1\n5,99999999999\n", None, ":2", "exceeds the supported maximum");
    check(f, "0,1\n5,2,3\n", Some(Format::CountsCsv), ":2", "expected 2 comma-separated fields");
    check(f, "0,1\n-7,2\n", None, ":2", "timestamp '-7' is negative");
}

#[test]
fn segment_errors() {
    let f = "trace_hh_55_65.txt";
    let text = format!("{SEG_OK}\n{}\n", seg("60000", "explode", "[]", "60000"));
    check(f, &text, None, ":2: at [1]", "unknown operation 'explode'");
    let text = format!("{SEG_OK}\n{}\n", seg("60000", "remove", r#"["zz"]"#, "60000"));
    check(f, &text, None, ":2: at [2].nodes[0]", "cannot remove node 'zz': it is not alive");
    let text = format!("{SEG_OK}\n{}\n", seg("60000", "add", r#"["a"]"#, "60000"));
    check(f, &text, None, ":2: at [2].nodes[0]", "cannot add node 'a': it is already alive");
    let text = format!("{SEG_OK}\n{}\n", seg("30000", "no-op", "[]", "60000"));
    check(f, &text, None, ":2: at [0]", "before the previous row's interval ends at 60000 ms");
    let text = format!("{SEG_OK}\n{}\n", seg("60000", "no-op", "[]", "-60000"));
    check(f, &text, None, ":2: at [2].duration", "duration must not be negative");
    let text = format!("{SEG_OK}\n{}\n", seg("-1", "no-op", "[]", "60000"));
    check(f, &text, None, ":2: at [0]", "t_ms must not be negative");
    let text = format!("{SEG_OK}\n{}\n", seg("60000", "no-op", r#"["a"]"#, "60000"));
    check(f, &text, None, ":2: at [2].nodes", "must not list nodes");
    let truncated = &SEG_OK[..SEG_OK.len() - 20];
    check(f, &format!("{SEG_OK}\n\n{truncated}\n"), None, ":3", "invalid JSON");
    check(f, "[0, \"add\"]\n", None, ":1", "row of 3 elements");
    let missing = SEG_OK.replace(r#""liveput_truth_strategy": [2, 1], "#, "");
    check(f, &missing, None, ":1: at [2]", "missing field \"liveput_truth_strategy\"");
    let bad = SEG_OK.replace(r#""throughput_opt_strategy": [2, 1]"#, r#""throughput_opt_strategy": [2]"#);
    check(f, &bad, None, ":1: at [2].throughput_opt_strategy", "expected a [D, P] pair");
}

#[test]
fn decision_errors() {
    let f = "bert_p3_gbs1024_mbs8.json";
    let entry = |i: &str| {
        format!(
            r#"{{"interval": {i}, "duration": 60000, "throughut-opt": [1, 1], "liveput-truth": [1, 1], "liveput-predict": [1, 1]}}"#
        )
    };
    let text = format!("[{}, {}]", entry("[0, 3, 0]"), entry("[5, 0, 0]"));
    check(f, &text, None, ": at [1].interval[0]", "prev_N 5 does not match the 3 instance(s) alive");
    let text = format!("[{}]", entry("[0, -2, 0]"));
    check(f, &text, None, ": at [0].interval[1]", "in must not be negative (got -2)");
    let text = format!("[{}]", entry("[0, 0, 1]"));
    check(f, &text, None, ": at [0].interval[2]", "cannot remove 1 instance(s): only 0 alive");
    let text = format!("[{}]", entry("[0, 1]"));
    check(f, &text, None, ": at [0].interval", "expected [prev_N, in, out]");
    let text = format!("[\n{},\n{}", entry("[0, 1, 0]"), entry("[1, 0, 0]"));
    check(f, &text, None, ":3", "invalid JSON");
    let text = format!("[{}, 7]", entry("[0, 1, 0]"));
    check(f, &text, None, ": at [1]", "expected a decision object, not a number");
    let text = format!(
        "[{}]",
        entry("[0, 1, 0]").replace("\"liveput-truth\": [1, 1]", "\"liveput-truth\": [1, \"x\"]")
    );
    check(f, &text, None, ": at [0].\"liveput-truth\"[1]", "P must be a non-negative integer, not a string");
    assert!(matches!(err(f, "[]", None), TraceError::Empty { .. }));
}

#[test]
fn tick_errors() {
    let f = "aws-16node.json";
    check(
        f,
        r#"{"metadata": {"gap_seconds": 300}, "data": [1, 2, -1]}"#,
        None,
        ": at data[2]",
        "instance count must not be negative (got -1)",
    );
    check(f, r#"{"metadata": {"gap_seconds": 300}, "data": [1, "2"]}"#, None, ": at data[1]", "not a string");
    check(
        f,
        r#"{"metadata": {"gap_seconds": 0}, "data": [1]}"#,
        None,
        ": at metadata.gap_seconds",
        "positive number of seconds",
    );
    check(
        f,
        r#"{"metadata": {"gap_seconds": -5}, "data": [1]}"#,
        None,
        ": at metadata.gap_seconds",
        "positive number of seconds",
    );
    check(f, r#"{"data": [1]}"#, None, ": at $", "missing field \"metadata\"");
    check(f, "{\"metadata\": {\"gap_seconds\": 300},\n \"data\": [1, 2", None, ":2", "invalid JSON");
    assert!(matches!(
        err(f, r#"{"metadata": {"gap_seconds": 1}, "data": []}"#, None),
        TraceError::Empty { .. }
    ));
}

#[test]
fn timestamped_errors() {
    let f = "counts.txt";
    check(f, "2023-01-01, 00:00:00, 3\n2023-02-30, 00:00:00, 2\n", None, ":2", "day 30 is not in 1..=28");
    check(f, "2023-01-01, 00:00:00, 3\n2023-01-01, 25:00:00, 2\n", None, ":2", "out of range");
    check(f, "2023-01-01, 00:00:00, -3\n", None, ":1", "negative instance count '-3'");
    check(
        f,
        "2023-01-01, 00:00:00\n",
        Some(Format::TimestampedCounts),
        ":1",
        "expected 3 comma-separated fields",
    );
    check(f, "2023-01-01, 00:00:00, 3\n2023/01/02, 00:00:00, 2\n", None, ":2", "is not YYYY-MM-DD");
}

#[test]
fn whole_file_errors() {
    for empty in ["", "\n\n", "# only a comment\n", "\u{feff}"] {
        let e = err("empty.csv", empty, None);
        assert!(matches!(e, TraceError::Empty { .. }), "{e}");
        assert!(e.to_string().starts_with("empty.csv: empty trace"), "{e}");
    }
    let e = err("header-only.csv", "t_ms,op,node\n", None);
    assert_eq!(e.to_string(), "header-only.csv: empty trace: no event rows");
    check("odd.csv", "\n1,2,3,4\n", None, ":2", "cannot tell the trace format");
    let e = parse(Path::new("bin.csv"), b"0,add,a\n1,add,\xff\xfe\n", None).unwrap_err();
    assert_eq!(e.line(), Some(2));
    assert!(e.to_string().starts_with("bin.csv:2: not valid UTF-8"), "{e}");

    let missing = Path::new("/nonexistent/trace.csv");
    let e = load(missing).unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }) && e.to_string().contains("/nonexistent/trace.csv"), "{e}");
    assert!(load_as(missing, Format::CountsCsv).is_err());

    // Parsing a file as the wrong explicit format is an error, not a panic.
    check("p3-events.csv", "0,add,a\n", Some(Format::CountsCsv), ":1", "expected 2 comma-separated fields");
    check("p3-events.csv", "0,add,a\n", Some(Format::TicksJson), ":1", "invalid JSON");
}

#[test]
fn unusable_intervals_are_errors() {
    let t = parse(Path::new("far.csv"), b"18446744073709551615,add,a\n", None).unwrap();
    assert!(t.series(0).unwrap_err().to_string().contains("at least 1 ms"));
    assert!(t.series(60_000).unwrap_err().to_string().contains("more than the supported"));
    assert!(t.stats(60_000).is_err());
    assert!(t.preemptions_by_hour_of_trace().is_empty());
    assert_eq!(t.lifetimes().len(), 1);
    assert!(parse(Path::new("x.json"), br#"[{"interval":[0,1,0],"duration":18446744073709551615,"throughut-opt":[1,1],"liveput-truth":[1,1],"liveput-predict":[1,1]},{"interval":[1,0,0],"duration":1,"throughut-opt":[1,1],"liveput-truth":[1,1],"liveput-predict":[1,1]}]"#, None).is_err());
    assert!(parse(Path::new("x.json"), br#"{"metadata":{"gap_seconds":1e300},"data":[1]}"#, None).is_err());
}

/// Small valid samples of every format, to be mangled.
fn samples() -> Vec<(Format, String)> {
    vec![
        (Format::EventsCsv, "t_ms,op,node\n0,add,a\n0,add,b\n60000,remove,a\n90000,add,c\n120000,remove,b\n".into()),
        (Format::CountsCsv, "t_ms,count_after_event\n0,1\n0,2\n60000,1\n120000,3\n".into()),
        (Format::SegmentsJsonl, format!("{SEG_OK}\n{}\n{}\n", seg("60000", "remove", r#"["a"]"#, "60000"), seg("120000", "migration", "[]", "60000"))),
        (
            Format::DecisionsJson,
            r#"[{"interval": [0, 2, 0], "duration": 60000, "throughut-opt": [2, 1], "liveput-truth": [2, 1], "liveput-predict": [2, 1]}, {"interval": [2, 1, 1], "duration": 60000, "throughut-opt": [1, 1], "liveput-truth": [1, 1], "liveput-predict": [1, 1]}]"#.into(),
        ),
        (Format::TicksJson, r#"{"metadata": {"gap_seconds": 300}, "data": [0, 3, 3, 1, 16]}"#.into()),
        (Format::TimestampedCounts, "2024-03-01, 00:02:00, 1\n2024-02-29, 23:59:00, 2\n2024-03-01, 00:00:00, 3\n".into()),
    ]
}

/// Runs every entry point on `data`; a panic fails the test with the input shown.
fn exercise(data: &[u8], format: Option<Format>) -> bool {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let r = parse(Path::new("fuzz.txt"), data, format);
        if let Ok(t) = &r {
            for l in [1_000, 60_000] {
                let _ = t.series(l);
                let _ = t.stats(l).map(|s| s.to_string());
            }
            let mut out = Vec::new();
            parcae_traces::write_events_csv(t, &mut out).expect("write to a Vec");
            let again = parse(Path::new("again.csv"), &out, None).expect("canonical output must load");
            assert_eq!(again.events(), t.events());
            assert_eq!(again.end_ms(), t.end_ms(), "the canonical output keeps the end");
        } else if let Err(e) = &r {
            let _ = e.to_string();
        }
        r.is_ok()
    }));
    match outcome {
        Ok(ok) => ok,
        Err(_) => panic!("panicked on {format:?} input {:?}", String::from_utf8_lossy(data)),
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn samples_are_valid() {
    for (format, text) in samples() {
        assert!(exercise(text.as_bytes(), Some(format)), "{format}");
        assert!(exercise(text.as_bytes(), None), "{format} (detected)");
        assert_eq!(parse(Path::new("s"), text.as_bytes(), None).unwrap().format(), format);
    }
}

#[test]
fn truncated_inputs_never_panic() {
    for (format, text) in samples() {
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let prefix = &bytes[..cut];
            let ok = exercise(prefix, Some(format));
            exercise(prefix, None);
            // A JSON document cut short is never valid.
            if matches!(format, Format::DecisionsJson | Format::TicksJson) {
                assert!(!ok, "{format}: prefix of {cut} bytes loaded");
            }
        }
    }
}

#[test]
fn mutated_inputs_never_panic() {
    let alphabet: &[u8] = b",-+.[]{}\"\n\r :#0129aez\xff\x00";
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for (format, text) in samples() {
        for _ in 0..1500 {
            let mut data = text.as_bytes().to_vec();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(data.len());
                match rng.below(4) {
                    0 => data[at] = alphabet[rng.below(alphabet.len())],
                    1 => {
                        data.remove(at);
                    }
                    2 => data.insert(at, alphabet[rng.below(alphabet.len())]),
                    _ => {
                        let end = (at + rng.below(16)).min(data.len());
                        let chunk = data[at..end].to_vec();
                        data.splice(at..at, chunk);
                    }
                }
                if data.is_empty() {
                    break;
                }
            }
            exercise(&data, Some(format));
            exercise(&data, None);
        }
    }
}

#[test]
fn garbage_is_rejected() {
    let mut rng = XorShift(42);
    let mut inputs: Vec<Vec<u8>> = vec![
        b"\x00\x00\x00".to_vec(),
        "[".repeat(100_000).into_bytes(),
        "{".repeat(100_000).into_bytes(),
        b"[1, 2, 3]".to_vec(),
        b"{}".to_vec(),
        b"null".to_vec(),
        b"hello world".to_vec(),
        b",,,\n,,,".to_vec(),
        b"0,add,a,\n".to_vec(),
    ];
    for _ in 0..200 {
        let n = 1 + rng.below(200);
        inputs.push((0..n).map(|_| (rng.next() & 0xff) as u8).collect());
    }
    for data in &inputs {
        assert!(!exercise(data, None), "garbage accepted: {:?}", String::from_utf8_lossy(data));
        for format in Format::ALL {
            assert!(
                !exercise(data, Some(format)),
                "garbage accepted as {format}: {:?}",
                String::from_utf8_lossy(data)
            );
        }
    }
}
