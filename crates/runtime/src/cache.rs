//! Compiled components kept on disk between runs.
//!
//! Cranelift needs seconds to compile a component that carries a language
//! runtime (about 20 s of CPU for an 18 MB Python or 12 MB JavaScript policy),
//! and every `parcae-host` command loads its policies afresh. With a cache
//! directory ([`crate::PolicyRuntime::with_compile_cache`]), a component of at
//! least [`CACHE_MIN_BYTES`] is compiled once and later loads read the
//! machine code back.
//!
//! An entry is named by the SHA-256 of the component's bytes and of the
//! engine's compilation settings, so another component, another sandbox
//! configuration or another wasmtime never reads it. Entries are written to a
//! temporary file and renamed into place (concurrent runs never see a partial
//! entry), read whole into memory (never mapped), and the least recently used
//! go when the directory holds more than [`CACHE_MAX_BYTES`]. Any cache failure
//! falls back to compiling: the cache only ever saves time.
//!
//! An entry is native code the host executes: the directory must be writable by
//! its user only (the default, under the user's cache directory, is). Wasmtime
//! itself checks that an entry was made by a compatible engine.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Components smaller than this are compiled every time (a Rust policy of a
/// few hundred KiB compiles in a fraction of a second).
pub const CACHE_MIN_BYTES: usize = 1 << 20;

/// When the entries exceed this many bytes together, the least recently used go.
pub const CACHE_MAX_BYTES: u64 = 2 << 30;

/// File name suffix of an entry.
const SUFFIX: &str = ".cwasm";

/// Why an entry could not be written (reported, never fatal).
#[derive(Debug, thiserror::Error)]
enum CacheWriteError {
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Wasmtime could not serialize the component.
    #[error("serializing the compiled component: {0:#}")]
    Serialize(wasmtime::Error),
}

/// A directory of compiled components for one engine configuration.
pub(crate) struct CompileCache {
    dir: PathBuf,
    engine_key: String,
}

/// Feeds what `Hash` writes into a SHA-256.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        0
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl CompileCache {
    /// A cache in `dir` for components compiled by `engine`.
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> Self {
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex(&hasher.0.finalize()[..8]);
        Self { dir, engine_key }
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry(&self, bytes: &[u8]) -> PathBuf {
        let component = hex(&Sha256::digest(bytes));
        self.dir.join(format!("{component}-{}{SUFFIX}", self.engine_key))
    }

    /// The component of `bytes`, from the cache when it holds it (then `true`),
    /// else compiled now (and stored when it is large enough).
    pub(crate) fn load(&self, engine: &Engine, bytes: &[u8]) -> wasmtime::Result<(Component, bool)> {
        if bytes.len() < CACHE_MIN_BYTES {
            return Ok((Component::new(engine, bytes)?, false));
        }
        let entry = self.entry(bytes);
        if let Ok(compiled) = std::fs::read(&entry) {
            // SAFETY: the entry was written by `store` below from
            // `Component::serialize` of the component whose bytes (and
            // engine settings) name it, in a directory only this user may
            // write (see the module docs); wasmtime checks its header against
            // this engine. It is read into memory, so later changes to the
            // file cannot affect the loaded code.
            match unsafe { Component::deserialize(engine, &compiled) } {
                Ok(component) => {
                    touch(&entry);
                    return Ok((component, true));
                }
                Err(e) => {
                    tracing::warn!(entry = %entry.display(), "unusable compile-cache entry, recompiling: {e:#}")
                }
            }
        }
        let component = Component::new(engine, bytes)?;
        if let Err(e) = self.store(&entry, &component) {
            tracing::warn!(dir = %self.dir.display(), "cannot write to the compile cache: {e:#}");
        }
        Ok((component, false))
    }

    fn store(&self, entry: &Path, component: &Component) -> Result<(), CacheWriteError> {
        std::fs::create_dir_all(&self.dir)?;
        let compiled = component.serialize().map_err(CacheWriteError::Serialize)?;
        let temporary = self.dir.join(format!(
            ".{}.{}.tmp",
            entry.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
            std::process::id()
        ));
        std::fs::write(&temporary, compiled)?;
        std::fs::rename(&temporary, entry).inspect_err(|_| {
            let _ = std::fs::remove_file(&temporary);
        })?;
        self.evict(CACHE_MAX_BYTES)?;
        Ok(())
    }

    /// Removes the least recently used entries until they hold at most `budget` bytes.
    pub(crate) fn evict(&self, budget: u64) -> std::io::Result<()> {
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        for item in std::fs::read_dir(&self.dir)? {
            let item = item?;
            let path = item.path();
            if !path.to_str().is_some_and(|p| p.ends_with(SUFFIX)) {
                continue;
            }
            let metadata = item.metadata()?;
            entries.push((metadata.modified()?, metadata.len(), path));
        }
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= budget {
                break;
            }
            std::fs::remove_file(&path)?;
            total -= len;
        }
        Ok(())
    }
}

/// Marks an entry used now (eviction removes the least recently used).
fn touch(entry: &Path) {
    let _ = std::fs::File::options().append(true).open(entry).and_then(|f| f.set_modified(SystemTime::now()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_removes_the_least_recently_used_entries_first() {
        let dir = std::env::temp_dir().join(format!("parcae-cache-evict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let engine = Engine::default();
        let cache = CompileCache::new(dir.clone(), &engine);
        let now = SystemTime::now();
        for (name, age_s) in [("old", 300), ("mid", 200), ("new", 100)] {
            let path = dir.join(format!("{name}{SUFFIX}"));
            std::fs::write(&path, vec![0u8; 100]).unwrap();
            let file = std::fs::File::options().append(true).open(&path).unwrap();
            file.set_modified(now - std::time::Duration::from_secs(age_s)).unwrap();
        }
        std::fs::write(dir.join("unrelated.txt"), vec![0u8; 1000]).unwrap();
        cache.evict(250).unwrap();
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["mid.cwasm", "new.cwasm", "unrelated.txt"]);
        touch(&dir.join(format!("mid{SUFFIX}")));
        cache.evict(100).unwrap();
        assert!(dir.join(format!("mid{SUFFIX}")).exists() && !dir.join(format!("new{SUFFIX}")).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn entries_are_named_by_component_and_engine() {
        let dir = PathBuf::from("/cache");
        let engine = Engine::default();
        let cache = CompileCache::new(dir.clone(), &engine);
        let a = cache.entry(b"a");
        assert_eq!(a, cache.entry(b"a"));
        assert_ne!(a, cache.entry(b"b"));
        let mut config = wasmtime::Config::new();
        config.consume_fuel(true);
        let other = CompileCache::new(dir, &Engine::new(&config).unwrap());
        assert_ne!(a, other.entry(b"a"), "another engine configuration has its own entries");
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb-"),
            "{name}"
        );
    }
}
