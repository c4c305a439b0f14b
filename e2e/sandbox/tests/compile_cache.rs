//! The compile cache: a large component is compiled once, a second runtime
//! (another process, in practice) reads the machine code back and decides the
//! same; a damaged entry is recompiled and replaced, never trusted.

use std::path::PathBuf;

use parcae_e2e_sandbox::{optimize_request, policy_wasm, predict_request};
use parcae_runtime::{CACHE_MIN_BYTES, GuardedPolicy, PolicyRuntime, SandboxLimits, Source};

/// The reactive guest grown past the cache threshold by a custom section
/// (which the component model ignores).
fn large_component() -> Vec<u8> {
    let mut bytes = std::fs::read(policy_wasm("reactive.wasm")).unwrap();
    let name = b"parcae-test-padding";
    let payload = CACHE_MIN_BYTES;
    let mut section = Vec::new();
    leb128(&mut section, name.len());
    section.extend_from_slice(name);
    section.resize(section.len() + payload, 0);
    bytes.push(0); // custom section id
    leb128(&mut bytes, section.len());
    bytes.extend(section);
    bytes
}

fn leb128(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn entries(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "cwasm")).collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[test]
fn a_large_component_is_compiled_once_and_a_damaged_entry_is_replaced() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compile-cache-test");
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = large_component();
    let runtime = || PolicyRuntime::new(SandboxLimits::default()).unwrap().with_compile_cache(&dir);

    let first = runtime().load_bytes("large.wasm", &bytes).unwrap();
    assert!(!first.from_cache());
    let written = entries(&dir);
    assert_eq!(written.len(), 1, "one entry: {written:?}");

    let second = runtime().load_bytes("large.wasm", &bytes).unwrap();
    assert!(second.from_cache(), "a second runtime reads the entry back");
    let (mut a, mut b) = (GuardedPolicy::new(None, Some(first)), GuardedPolicy::new(None, Some(second)));
    let request = optimize_request(11, 5);
    let (x, y) = (a.optimize(&request), b.optimize(&request));
    assert_eq!((x.source, y.source), (Source::Guest, Source::Guest));
    assert_eq!(x.value, y.value);

    // Damaged: recompiled, answered, and the entry rewritten.
    std::fs::write(&written[0], b"not machine code").unwrap();
    let third = runtime().load_bytes("large.wasm", &bytes).unwrap();
    assert!(!third.from_cache());
    let mut c = GuardedPolicy::new(Some(third), None);
    assert_eq!(c.predict(&predict_request(&[3, 4], 2)).source, Source::Guest);
    assert!(std::fs::metadata(&written[0]).unwrap().len() > 1000, "the entry was rewritten");
    assert!(runtime().load_bytes("large.wasm", &bytes).unwrap().from_cache());

    // Small components are not cached; a different component has its own entry.
    let small = std::fs::read(policy_wasm("reactive.wasm")).unwrap();
    assert!(!runtime().load_bytes("small.wasm", &small).unwrap().from_cache());
    assert_eq!(entries(&dir).len(), 1);
    let mut other = bytes.clone();
    *other.last_mut().unwrap() = 1;
    assert!(!runtime().load_bytes("other.wasm", &other).unwrap().from_cache());
    assert_eq!(entries(&dir).len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
