//! The project's own synthetic traces (`traces/` at the workspace root) and
//! the format examples in `traces/README.md`.

use std::path::{Path, PathBuf};

use parcae_traces::{EventKind, Format, load, parse};

const MINUTE: u64 = 60_000;

fn traces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/traces")
}

#[test]
fn every_own_trace_loads_as_canonical_events() {
    let mut n = 0;
    for entry in std::fs::read_dir(traces_dir()).expect("data/traces/ exists") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "csv") {
            let t = load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(t.format(), Format::EventsCsv, "{}", path.display());
            assert!(!t.node_ids_inferred());
            let text = std::fs::read_to_string(&path).expect("readable");
            assert!(text.starts_with("t_ms,op,node\n"), "{}: canonical header", path.display());
            n += 1;
        }
    }
    assert!(n >= 2, "expected at least two traces in traces/");
}

#[test]
fn demo_8node_exercises_a_scheduler() {
    let t = load(&traces_dir().join("demo-8node.csv")).unwrap();
    let s = t.stats(MINUTE).unwrap();
    println!("{s}");
    assert_eq!(s.max_instances, 8);
    assert_eq!(s.intervals, 60);
    assert!(s.preemptions >= 10 && s.arrivals >= 10);
    assert!(s.intervals_with_arrivals_and_preemptions >= 1);
    let series = t.series(MINUTE).unwrap();
    // At least one interval where most of the fleet vanishes.
    let burst = (0..series.len()).any(|k| {
        let before = series.instances_before(k);
        before > 0 && series.intervals[k].preemptions * 2 > before
    });
    assert!(burst, "no interval loses most of the fleet");
    // Mostly on 60 s boundaries, with a few events inside intervals.
    let on_grid = t.events().iter().filter(|e| e.t_ms % MINUTE == 0).count();
    assert!(on_grid * 10 >= t.events().len() * 9 && on_grid < t.events().len());
    // Re-allocations: instances arrive after preemptions.
    let first_remove = t.events().iter().position(|e| e.kind == EventKind::Remove).unwrap();
    assert!(t.events()[first_remove..].iter().any(|e| e.kind == EventKind::Add));
}

#[test]
fn calm_4node_is_calm() {
    let t = load(&traces_dir().join("calm-4node.csv")).unwrap();
    let s = t.stats(MINUTE).unwrap();
    println!("{s}");
    assert_eq!(s.max_instances, 4);
    assert!(s.min_instances >= 3);
    assert_eq!(s.max_preemptions_in_interval, 1);
    assert_eq!(s.intervals, 120);
}

/// Each `### \`format\`` section of the README starts with an example that
/// must parse as that format, both forced and detected.
#[test]
fn readme_examples_parse() {
    let readme = std::fs::read_to_string(traces_dir().join("README.md")).expect("data/traces/README.md");
    let mut seen = Vec::new();
    for section in readme.split("\n### `").skip(1) {
        let Some((name, body)) = section.split_once('`') else {
            continue;
        };
        let format: Format = name.parse().unwrap_or_else(|e| panic!("{e}"));
        let example: String = body
            .lines()
            .skip_while(|l| !l.starts_with("    "))
            .take_while(|l| l.starts_with("    "))
            .map(|l| format!("{}\n", &l[4..]))
            .collect();
        assert!(!example.is_empty(), "{name}: no example");
        let source = Path::new("README.md");
        let t = parse(source, example.as_bytes(), Some(format)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let detected = parse(source, example.as_bytes(), None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(detected.format(), format);
        assert!(!t.events().is_empty(), "{name}");
        seen.push(format);
    }
    assert_eq!(seen, Format::ALL.to_vec());
}
