//! `parcae-host`'s logs as a log file or a log shipper sees them: stderr redirected to
//! a file holds no ANSI escapes, `-v` adds the project's own debug messages but not
//! those of wasmtime or cranelift, and `--log-format json` writes one JSON object per
//! line.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `parcae-host ARGS replay` (reactive guest, demo trace) with stderr to a file
/// and no RUST_LOG; returns what the file holds.
fn replay_stderr(name: &str, args: &[&str]) -> String {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("logging-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("stderr.log");
    let file = std::fs::File::create(&path).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(root())
        .args(args)
        .args(["replay", "--policy", "builtin:reactive"])
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(file)
        .status()
        .expect("running parcae-host");
    assert!(
        status.success(),
        "parcae-host {args:?} replay failed: {}",
        std::fs::read_to_string(&path).unwrap()
    );
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn verbose_text_to_a_file_has_no_colour_and_only_our_debug_messages() {
    let log = replay_stderr("text", &["-v"]);
    assert!(!log.contains('\x1b'), "ANSI escapes in a log file:\n{log}");
    // The reactive guest logs its choice at debug level, under the project's target.
    let guest = log.lines().filter(|l| l.contains(" DEBUG parcae::guest: reactive: ")).count();
    assert_eq!(guest, 60, "one guest debug message per interval of the demo trace:\n{log}");
    for line in log.lines() {
        assert!(
            !line.contains("DEBUG") || line.contains(" parcae"),
            "a debug message from outside the project without RUST_LOG: {line}"
        );
    }
    assert!(!log.contains("cranelift"), "cranelift's internals without RUST_LOG:\n{log}");
    // Without -v the guest's debug messages are filtered out.
    let quiet = replay_stderr("quiet", &[]);
    assert!(!quiet.contains("DEBUG"), "{quiet}");
}

#[test]
fn rust_log_still_reaches_dependencies() {
    let output = Command::new(env!("CARGO_BIN_EXE_parcae-host"))
        .current_dir(root())
        .args(["replay", "--policy", "builtin:reactive"])
        .env("RUST_LOG", "parcae=warn,wasmtime_internal_cranelift=debug")
        .output()
        .expect("running parcae-host");
    assert!(output.status.success());
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("DEBUG wasmtime_internal_cranelift"), "RUST_LOG selects a dependency:\n{log}");
    assert!(!log.contains("parcae::guest"), "RUST_LOG overrides the default filter:\n{log}");
}

#[test]
fn json_format_writes_one_object_per_line() {
    let log = replay_stderr("json", &["--log-format", "json", "-v"]);
    let mut guest = 0;
    for line in log.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        for field in ["timestamp", "level", "target", "fields"] {
            assert!(value.get(field).is_some(), "no {field} in {line}");
        }
        if value["target"] == "parcae::guest" {
            guest += 1;
            assert_eq!(value["level"], "DEBUG");
            assert_eq!(value["fields"]["policy"], "builtin:reactive");
            assert!(value["fields"]["message"].as_str().unwrap().starts_with("reactive: "), "{line}");
        }
    }
    assert_eq!(guest, 60, "{log}");
}
