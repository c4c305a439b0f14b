//! A layer's migratable state, its byte format, and checkpoints.
//!
//! A layer's state is its parameters plus Adam's first and second moments (12 bytes per
//! parameter, as `ModelSpec::layer_state_bytes` counts) and the number of optimizer steps
//! already applied (Adam's bias correction needs it; it is also the data-loader position,
//! since the data of step `k` is a pure function of the seed and `k`). No RNG is used after
//! initialisation, so this is all the state a layer has.
//!
//! # Byte format (version 1, little endian)
//!
//! ```text
//! magic "PRCLAYER" | u32 version | u32 layer | u64 step | u32 tensor count n
//! n x (u32 ndim, ndim x u64 dim)                       shapes, shared by the three groups
//! parameters, then exp_avg, then exp_avg_sq            f32 data, tensors in order
//! u64 FNV-1a of every byte before it                   detects corruption
//! ```
//!
//! A checkpoint of a stage is one object per layer (`layer-LLLL-step-SSSSSSSSSSSS.bin`, the
//! bytes above) plus a text manifest naming them, written last: in a directory
//! ([`save_checkpoint`]) or under a prefix of a checkpoint store ([`save_checkpoint_to`]; a
//! local directory, S3, GCS or Azure), with the same names, so either reader loads either.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use parcae_cluster::ModelSpec;
use parcae_store::Store;
use tracing::{debug, info};

use crate::error::WorkerError;
use crate::model;
use crate::tensor::{Reader, TensorData, encode_f32s};

/// First bytes of every layer-state blob.
pub const STATE_MAGIC: [u8; 8] = *b"PRCLAYER";
/// The layer-state format this build writes and reads.
pub const STATE_VERSION: u32 = 1;
/// Name of a checkpoint directory's manifest.
pub const MANIFEST: &str = "manifest.txt";
const MANIFEST_HEADER: &str = "parcae-checkpoint 1";

/// Everything that must move with a layer when it migrates.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerState {
    /// Layer index in the model (0 = embedding).
    pub layer: usize,
    /// Optimizer steps already applied to this layer (the trainer's step counter).
    pub step: u64,
    /// Parameters, in `model::param_shapes` order.
    pub params: Vec<TensorData>,
    /// Adam's first moments, one per parameter.
    pub exp_avg: Vec<TensorData>,
    /// Adam's second moments, one per parameter.
    pub exp_avg_sq: Vec<TensorData>,
}

impl LayerState {
    /// The state of `layer` before training: deterministic initial weights, zero moments, step 0.
    pub fn initial(spec: &ModelSpec, layer: usize) -> Result<Self, WorkerError> {
        check_layer_index(spec, layer)?;
        let params = model::init_layer(spec, layer);
        let zeros: Vec<TensorData> = params.iter().map(|p| TensorData::zeros(&p.shape)).collect();
        Ok(LayerState { layer, step: 0, params, exp_avg: zeros.clone(), exp_avg_sq: zeros })
    }

    /// Checks that this state fits layer `self.layer` of `spec`: index in range and every
    /// tensor of the three groups has the shape the model gives it.
    pub fn check(&self, spec: &ModelSpec) -> Result<(), WorkerError> {
        check_layer_index(spec, self.layer)?;
        let shapes = model::param_shapes(spec, self.layer);
        for group in [&self.params, &self.exp_avg, &self.exp_avg_sq] {
            if group.len() != shapes.len() {
                return Err(WorkerError::WrongShape {
                    layer: self.layer,
                    tensor: format!("<{} tensors>", group.len()),
                    expected: vec![shapes.len()],
                    found: vec![group.len()],
                });
            }
            for (t, (name, shape)) in group.iter().zip(&shapes) {
                if &t.shape != shape || t.data.len() != shape.iter().product::<usize>() {
                    return Err(WorkerError::WrongShape {
                        layer: self.layer,
                        tensor: name.to_string(),
                        expected: shape.clone(),
                        found: t.shape.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Parameters in this layer (not counting the moments).
    pub fn num_params(&self) -> usize {
        self.params.iter().map(TensorData::numel).sum()
    }

    /// Largest absolute difference over parameters and moments (infinite if shapes differ).
    pub fn max_abs_diff(&self, other: &LayerState) -> f32 {
        let groups = [(&self.params, &other.params), (&self.exp_avg, &other.exp_avg)];
        let groups = groups.into_iter().chain([(&self.exp_avg_sq, &other.exp_avg_sq)]);
        let mut diff = 0f32;
        for (a, b) in groups {
            if a.len() != b.len() {
                return f32::INFINITY;
            }
            for (x, y) in a.iter().zip(b) {
                diff = diff.max(x.max_abs_diff(y));
            }
        }
        diff
    }

    /// Encodes the state in the versioned byte format (module docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let floats = 3 * self.num_params();
        let mut out = Vec::with_capacity(64 + 4 * floats);
        out.extend_from_slice(&STATE_MAGIC);
        out.extend_from_slice(&STATE_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.layer as u32).to_le_bytes());
        out.extend_from_slice(&self.step.to_le_bytes());
        out.extend_from_slice(&(self.params.len() as u32).to_le_bytes());
        for p in &self.params {
            p.encode_shape_into(&mut out);
        }
        for group in [&self.params, &self.exp_avg, &self.exp_avg_sq] {
            for t in group {
                encode_f32s(&t.data, &mut out);
            }
        }
        let sum = fnv1a(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Decodes bytes written by [`LayerState::to_bytes`], checking structure and checksum
    /// (not the model shape: see [`LayerState::decode_for`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WorkerError> {
        const WHAT: &str = "layer state";
        let mut r = Reader::new(bytes, WHAT);
        let magic = r.take(STATE_MAGIC.len(), "magic")?;
        if magic != STATE_MAGIC {
            return Err(WorkerError::malformed(WHAT, format!("bad magic {magic:?}, not a layer state")));
        }
        let version = r.u32("version")?;
        if version != STATE_VERSION {
            return Err(WorkerError::malformed(
                WHAT,
                format!("format version {version}, this build reads version {STATE_VERSION}"),
            ));
        }
        let layer = r.u32("layer")? as usize;
        let step = r.u64("step")?;
        let n = r.u32("tensor count")? as usize;
        if n > 64 {
            return Err(WorkerError::malformed(WHAT, format!("{n} tensors per group (at most 64)")));
        }
        let shapes = (0..n).map(|_| r.shape()).collect::<Result<Vec<_>, _>>()?;
        let numel: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        // Size check before the checksum, so a short blob says "truncated", not "corrupt".
        let needed = numel.checked_mul(12).and_then(|b| b.checked_add(8 + r.position()));
        match needed {
            Some(needed) if needed == bytes.len() => {}
            Some(needed) if needed > bytes.len() => {
                return Err(WorkerError::malformed(
                    WHAT,
                    format!("truncated: layer {layer} needs {needed} bytes, got {}", bytes.len()),
                ));
            }
            Some(needed) => {
                return Err(WorkerError::malformed(
                    WHAT,
                    format!("{} unexpected trailing bytes after layer {layer}", bytes.len() - needed),
                ));
            }
            None => return Err(WorkerError::malformed(WHAT, "tensor sizes overflow")),
        }
        let body = &bytes[..bytes.len() - 8];
        let stored = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().expect("8 bytes"));
        if fnv1a(body) != stored {
            return Err(WorkerError::malformed(
                WHAT,
                format!("checksum mismatch: layer {layer} data is corrupt"),
            ));
        }
        let mut group = || -> Result<Vec<TensorData>, WorkerError> {
            shapes
                .iter()
                .map(|s| Ok(TensorData { shape: s.clone(), data: r.f32s(s.iter().product())? }))
                .collect()
        };
        let params = group()?;
        let exp_avg = group()?;
        let exp_avg_sq = group()?;
        Ok(LayerState { layer, step, params, exp_avg, exp_avg_sq })
    }

    /// Decodes the state of layer `expected_layer` of `spec`: [`LayerState::from_bytes`] plus
    /// the layer index and every tensor shape.
    pub fn decode_for(spec: &ModelSpec, expected_layer: usize, bytes: &[u8]) -> Result<Self, WorkerError> {
        let state = LayerState::from_bytes(bytes)?;
        if state.layer != expected_layer {
            return Err(WorkerError::WrongLayer { expected: expected_layer, found: state.layer });
        }
        state.check(spec)?;
        Ok(state)
    }
}

fn check_layer_index(spec: &ModelSpec, layer: usize) -> Result<(), WorkerError> {
    if layer >= spec.num_layers() {
        return Err(WorkerError::malformed(
            "layer state",
            format!("layer {layer} does not exist (the model has {} layers)", spec.num_layers()),
        ));
    }
    Ok(())
}

/// 64-bit FNV-1a: simple, dependency-free, and enough to catch corruption (not tampering).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = 0xCBF2_9CE4_8422_2325_u64;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// A set of layers saved together at one optimizer step.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The step every layer is at (the data-loader position too).
    pub step: u64,
    /// The spec's seed the run was started with (init and data depend on it).
    pub seed: u64,
    /// The saved layers, in increasing layer order.
    pub layers: Vec<LayerState>,
}

fn layer_file(layer: usize, step: u64) -> String {
    format!("layer-{layer:04}-step-{step:012}.bin")
}

/// Writes `bytes` to `path` crash-safely: a temporary file is written and synced, then
/// renamed over `path` (atomic on POSIX), so `path` holds either its old or its new content.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WorkerError> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp).map_err(|e| WorkerError::io(&tmp, e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| WorkerError::io(&tmp, e))?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| WorkerError::io(path, e))
}

/// Saves `layers` (all at step `step`) into `dir`, one file per layer plus [`MANIFEST`].
///
/// Layer files carry the step in their name and the manifest is replaced last, atomically;
/// a crash mid-save therefore leaves the previous checkpoint intact (at worst with some
/// orphan files, removed by the next save). Files of older steps are removed afterwards.
pub fn save_checkpoint(dir: &Path, step: u64, seed: u64, layers: &[LayerState]) -> Result<(), WorkerError> {
    fs::create_dir_all(dir).map_err(|e| WorkerError::io(dir, e))?;
    let sorted = checked_layers(step, layers)?;
    let mut keep = vec![MANIFEST.to_string()];
    for state in &sorted {
        let name = layer_file(state.layer, step);
        write_atomically(&dir.join(&name), &state.to_bytes())?;
        keep.push(name);
    }
    write_atomically(&dir.join(MANIFEST), Manifest::render(step, seed, &sorted).as_bytes())?;
    // Make the renames durable before deleting what the old manifest referenced.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    for entry in fs::read_dir(dir).map_err(|e| WorkerError::io(dir, e))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = (name.starts_with("layer-") && (name.ends_with(".bin") || name.ends_with(".tmp")))
            || name == "manifest.tmp";
        if ours && !keep.contains(&name) {
            debug!(file = %name, "removing stale checkpoint file");
            let _ = fs::remove_file(entry.path());
        }
    }
    info!(dir = %dir.display(), step, layers = layers.len(), "checkpoint saved");
    Ok(())
}

/// Loads the checkpoint in `dir`, checking each layer file against the manifest (layer index,
/// step, checksum) and, if `spec` is given, against the model's shapes and seed.
pub fn load_checkpoint(dir: &Path, spec: Option<&ModelSpec>) -> Result<Checkpoint, WorkerError> {
    let manifest_path = dir.join(MANIFEST);
    let text = fs::read_to_string(&manifest_path).map_err(|e| WorkerError::io(&manifest_path, e))?;
    let manifest = Manifest::parse(&text, &manifest_path.display().to_string(), spec)?;
    let mut layers = Vec::new();
    for (layer, name) in &manifest.layers {
        let path: PathBuf = dir.join(name);
        let bytes = fs::read(&path).map_err(|e| WorkerError::io(&path, e))?;
        layers.push(decode_saved(spec, *layer, manifest.step, &bytes, &path.display().to_string())?);
    }
    Ok(Checkpoint { step: manifest.step, seed: manifest.seed, layers })
}

/// A stage's manifest: the step and seed, then each layer's object name.
struct Manifest {
    step: u64,
    seed: u64,
    layers: Vec<(usize, String)>,
}

impl Manifest {
    /// The manifest text of `layers` (sorted, distinct, all at `step`).
    fn render(step: u64, seed: u64, layers: &[&LayerState]) -> String {
        let mut manifest = format!("{MANIFEST_HEADER}\nstep {step}\nseed {seed}\n");
        for state in layers {
            manifest.push_str(&format!("layer {} {}\n", state.layer, layer_file(state.layer, step)));
        }
        manifest
    }

    /// Parses a manifest read from `origin` (named in errors); checks the seed against `spec`.
    fn parse(text: &str, origin: &str, spec: Option<&ModelSpec>) -> Result<Manifest, WorkerError> {
        const WHAT: &str = "checkpoint manifest";
        let mut lines = text.lines();
        if lines.next() != Some(MANIFEST_HEADER) {
            return Err(WorkerError::malformed(
                WHAT,
                format!("{origin} does not start with `{MANIFEST_HEADER}`"),
            ));
        }
        let mut field = |name: &str| -> Result<u64, WorkerError> {
            let line = lines.next().unwrap_or_default();
            line.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.parse().ok()).ok_or_else(
                || {
                    WorkerError::malformed(
                        WHAT,
                        format!("{origin}: expected `{name} <number>`, found `{line}`"),
                    )
                },
            )
        };
        let step = field("step")?;
        let seed = field("seed")?;
        if let Some(spec) = spec
            && spec.seed != seed
        {
            return Err(WorkerError::malformed(
                WHAT,
                format!("{origin}: checkpoint seed {seed}, the model spec's seed is {}", spec.seed),
            ));
        }
        let mut layers = Vec::new();
        for line in lines.filter(|l| !l.trim().is_empty()) {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["layer", idx, name] if !name.contains('/') => match idx.parse::<usize>() {
                    Ok(i) => layers.push((i, name.to_string())),
                    Err(_) => {
                        return Err(WorkerError::malformed(
                            WHAT,
                            format!("{origin}: bad layer line `{line}`"),
                        ));
                    }
                },
                _ => return Err(WorkerError::malformed(WHAT, format!("{origin}: bad layer line `{line}`"))),
            }
        }
        Ok(Manifest { step, seed, layers })
    }
}

/// Decodes one saved layer (read from `origin`) and checks it is `layer` at `step`.
fn decode_saved(
    spec: Option<&ModelSpec>,
    layer: usize,
    step: u64,
    bytes: &[u8],
    origin: &str,
) -> Result<LayerState, WorkerError> {
    let state = match spec {
        Some(spec) => LayerState::decode_for(spec, layer, bytes),
        None => LayerState::from_bytes(bytes).and_then(|s| {
            if s.layer == layer {
                Ok(s)
            } else {
                Err(WorkerError::WrongLayer { expected: layer, found: s.layer })
            }
        }),
    }
    .map_err(|e| WorkerError::malformed("checkpoint manifest", format!("{origin}: {e}")))?;
    if state.step != step {
        return Err(WorkerError::StepMismatch { expected: step, found: state.step });
    }
    Ok(state)
}

/// Sorted by layer; refuses a layer given twice or one at another step than `step`.
fn checked_layers(step: u64, layers: &[LayerState]) -> Result<Vec<&LayerState>, WorkerError> {
    let mut sorted: Vec<&LayerState> = layers.iter().collect();
    sorted.sort_by_key(|s| s.layer);
    for pair in sorted.windows(2) {
        if pair[0].layer == pair[1].layer {
            return Err(WorkerError::Sequence(format!("layer {} given twice to save", pair[0].layer)));
        }
    }
    if let Some(state) = sorted.iter().find(|s| s.step != step) {
        return Err(WorkerError::StepMismatch { expected: step, found: state.step });
    }
    Ok(sorted)
}

/// Saves `layers` (all at step `step`) under `prefix` in `store`: one object per layer, then
/// [`MANIFEST`] last, so the stage looks saved only once every layer is there (an upload cut
/// off half-way leaves no manifest, and objects appear only when whole). Returns the bytes
/// written.
pub async fn save_checkpoint_to(
    store: &Store,
    prefix: &str,
    step: u64,
    seed: u64,
    layers: &[LayerState],
) -> Result<u64, WorkerError> {
    let sorted = checked_layers(step, layers)?;
    let mut bytes = 0;
    for state in &sorted {
        let key = format!("{prefix}/{}", layer_file(state.layer, step));
        bytes += store.put(&key, Bytes::from(state.to_bytes())).await?;
    }
    let manifest = Manifest::render(step, seed, &sorted);
    bytes += store.put(&format!("{prefix}/{MANIFEST}"), Bytes::from(manifest)).await?;
    info!(location = %store.location(prefix), step, layers = layers.len(), bytes, "checkpoint saved");
    Ok(bytes)
}

/// Loads the checkpoint saved under `prefix` in `store` by [`save_checkpoint_to`], checking
/// each layer against the manifest (layer index, step, checksum) and, if `spec` is given,
/// against the model's shapes and seed. A stage without a manifest (never saved, or cut off
/// half-way) is an error that names its location.
pub async fn load_checkpoint_from(
    store: &Store,
    prefix: &str,
    spec: Option<&ModelSpec>,
) -> Result<Checkpoint, WorkerError> {
    let manifest_key = format!("{prefix}/{MANIFEST}");
    let text = store.get(&manifest_key).await?;
    let origin = store.location(&manifest_key);
    let text = std::str::from_utf8(&text)
        .map_err(|e| WorkerError::malformed("checkpoint manifest", format!("{origin}: {e}")))?;
    let manifest = Manifest::parse(text, &origin, spec)?;
    let mut layers = Vec::new();
    for (layer, name) in &manifest.layers {
        let key = format!("{prefix}/{name}");
        let bytes = store.get(&key).await?;
        layers.push(decode_saved(spec, *layer, manifest.step, &bytes, &store.location(&key))?);
    }
    Ok(Checkpoint { step: manifest.step, seed: manifest.seed, layers })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (ModelSpec, LayerState) {
        let spec =
            ModelSpec { vocab: 16, d_model: 8, n_heads: 2, n_blocks: 2, seq_len: 4, ..ModelSpec::default() };
        let mut state = LayerState::initial(&spec, 1).unwrap();
        state.step = 9;
        state.exp_avg[2].data[3] = 0.25;
        state.exp_avg_sq[4].data[0] = 1e-9;
        (spec, state)
    }

    #[test]
    fn bytes_round_trip_exactly() {
        let (spec, state) = sample();
        let bytes = state.to_bytes();
        assert_eq!(LayerState::decode_for(&spec, 1, &bytes).unwrap(), state);
    }

    #[test]
    fn bad_bytes_give_clear_errors() {
        let (spec, state) = sample();
        let bytes = state.to_bytes();
        let msg = |b: &[u8]| LayerState::decode_for(&spec, 1, b).unwrap_err().to_string();

        assert!(msg(&bytes[..bytes.len() / 2]).contains("truncated"), "{}", msg(&bytes[..bytes.len() / 2]));
        assert!(msg(&bytes[..10]).contains("truncated"));
        assert!(msg(&[]).contains("truncated"));
        let mut corrupt = bytes.clone();
        corrupt[bytes.len() / 2] ^= 0x40;
        assert!(msg(&corrupt).contains("checksum"), "{}", msg(&corrupt));
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert!(msg(&magic).contains("magic"));
        let mut version = bytes.clone();
        version[8] = 2;
        assert!(msg(&version).contains("version 2"));
        let mut long = bytes.clone();
        long.extend_from_slice(&[0; 4]);
        assert!(msg(&long).contains("trailing"));

        let err = LayerState::decode_for(&spec, 2, &bytes).unwrap_err();
        assert!(matches!(err, WorkerError::WrongLayer { expected: 2, found: 1 }), "{err}");
        let wider = ModelSpec { d_model: 12, ..spec.clone() };
        let err = LayerState::decode_for(&wider, 1, &bytes).unwrap_err().to_string();
        assert!(err.contains("ln1.weight") && err.contains("[12]"), "{err}");
    }

    #[test]
    fn checkpoints_round_trip_and_replace_old_steps() {
        let (spec, state) = sample();
        let dir = std::env::temp_dir().join(format!("parcae-ckpt-unit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let head = LayerState { step: 9, ..LayerState::initial(&spec, 3).unwrap() };
        save_checkpoint(&dir, 9, spec.seed, &[head.clone(), state.clone()]).unwrap();
        let ck = load_checkpoint(&dir, Some(&spec)).unwrap();
        assert_eq!(ck, Checkpoint { step: 9, seed: spec.seed, layers: vec![state.clone(), head.clone()] });

        let later = LayerState { step: 10, ..state.clone() };
        save_checkpoint(&dir, 10, spec.seed, std::slice::from_ref(&later)).unwrap();
        let ck = load_checkpoint(&dir, Some(&spec)).unwrap();
        assert_eq!((ck.step, ck.layers.len()), (10, 1));
        let files = fs::read_dir(&dir).unwrap().count();
        assert_eq!(files, 2, "stale layer files are removed");

        // A layer at another step than the checkpoint's is refused.
        assert!(save_checkpoint(&dir, 11, spec.seed, &[later]).is_err());
        // Corrupt a file: the error names it.
        let name = dir.join(layer_file(1, 10));
        let mut bytes = fs::read(&name).unwrap();
        bytes.truncate(bytes.len() - 3);
        fs::write(&name, bytes).unwrap();
        let err = load_checkpoint(&dir, Some(&spec)).unwrap_err().to_string();
        assert!(err.contains("truncated") && err.contains("layer-0001"), "{err}");
        let err = load_checkpoint(&dir, Some(&ModelSpec { seed: 1, ..spec })).unwrap_err().to_string();
        assert!(err.contains("seed"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
