//! Plain f32 tensors on the host, and their wire encoding.
//!
//! Everything that leaves a trainer (layer state for migration and checkpoints, activations
//! and gradients for the pipeline, buffers for the all-reduce) goes through these types, so
//! the network code never needs libtorch and the format is the same on CPU and CUDA.

use tch::{Device, Kind, Tensor};

use crate::error::WorkerError;

/// The most dimensions a wire tensor may have: far above what the model uses, low enough
/// that a corrupt header cannot ask for absurd allocations through its dimension list.
pub const MAX_DIMS: usize = 8;

/// A dense row-major f32 tensor held in host memory.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorData {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// The elements in row-major order; `shape.iter().product()` of them.
    pub data: Vec<f32>,
}

impl TensorData {
    /// Zeros of `shape` (fresh Adam moments).
    pub fn zeros(shape: &[usize]) -> Self {
        TensorData { shape: shape.to_vec(), data: vec![0.0; shape.iter().product()] }
    }

    /// Elements in the tensor.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Copies a tensor of any float kind, on any device, to host f32.
    pub fn from_tensor(t: &Tensor) -> Result<Self, WorkerError> {
        let t = t.f_detach()?.f_to_device(Device::Cpu)?.f_to_kind(Kind::Float)?.f_contiguous()?;
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        let n = shape.iter().product();
        let mut data = vec![0f32; n];
        t.f_copy_data(&mut data, n)?;
        Ok(TensorData { shape, data })
    }

    /// A new f32 tensor with this data on `device` (not tracking gradients).
    pub fn to_tensor(&self, device: Device) -> Result<Tensor, WorkerError> {
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        if self.shape.iter().product::<usize>() != self.data.len() {
            return Err(WorkerError::malformed(
                "tensor",
                format!("shape {:?} does not match {} elements", self.shape, self.data.len()),
            ));
        }
        Ok(Tensor::f_from_slice(&self.data)?.f_reshape(&shape)?.f_to_device(device)?)
    }

    /// Largest absolute element-wise difference (infinite when the shapes differ): the
    /// measure the equivalence tests use.
    pub fn max_abs_diff(&self, other: &TensorData) -> f32 {
        if self.shape != other.shape {
            return f32::INFINITY;
        }
        self.data.iter().zip(&other.data).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
    }

    /// Appends the wire encoding: `u32` ndim, ndim x `u64` dims, then the f32 data, all little
    /// endian.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        self.encode_shape_into(out);
        encode_f32s(&self.data, out);
    }

    /// The wire encoding of this tensor alone (see [`TensorData::encode_into`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 8 * self.shape.len() + 4 * self.data.len());
        self.encode_into(&mut out);
        out
    }

    /// Decodes exactly one tensor from `bytes` (no trailing bytes allowed).
    pub fn decode(bytes: &[u8]) -> Result<Self, WorkerError> {
        let mut r = Reader::new(bytes, "tensor");
        let shape = r.shape()?;
        let data = r.f32s(shape.iter().product())?;
        r.finish()?;
        Ok(TensorData { shape, data })
    }

    pub(crate) fn encode_shape_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.shape.len() as u32).to_le_bytes());
        for &d in &self.shape {
            out.extend_from_slice(&(d as u64).to_le_bytes());
        }
    }
}

/// Encodes a tensor (activation or gradient) for the wire: see [`TensorData::encode_into`].
pub fn tensor_to_bytes(t: &Tensor) -> Result<Vec<u8>, WorkerError> {
    Ok(TensorData::from_tensor(t)?.encode())
}

/// Decodes a tensor written by [`tensor_to_bytes`] onto `device`.
pub fn tensor_from_bytes(bytes: &[u8], device: Device) -> Result<Tensor, WorkerError> {
    TensorData::decode(bytes)?.to_tensor(device)
}

pub(crate) fn encode_f32s(data: &[f32], out: &mut Vec<u8>) {
    out.reserve(4 * data.len());
    for x in data {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// A bounds-checked little-endian reader whose errors say what was being read and where.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, pos: 0, what }
    }

    pub(crate) fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], WorkerError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| {
            WorkerError::malformed(
                self.what,
                format!(
                    "truncated: {field} needs {n} bytes at offset {}, only {} left",
                    self.pos,
                    self.bytes.len() - self.pos
                ),
            )
        })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u32(&mut self, field: &str) -> Result<u32, WorkerError> {
        Ok(u32::from_le_bytes(self.take(4, field)?.try_into().expect("4 bytes")))
    }

    pub(crate) fn u64(&mut self, field: &str) -> Result<u64, WorkerError> {
        Ok(u64::from_le_bytes(self.take(8, field)?.try_into().expect("8 bytes")))
    }

    pub(crate) fn shape(&mut self) -> Result<Vec<usize>, WorkerError> {
        let ndim = self.u32("ndim")? as usize;
        if ndim > MAX_DIMS {
            return Err(WorkerError::malformed(self.what, format!("{ndim} dimensions (at most {MAX_DIMS})")));
        }
        let mut shape = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            let d = self.u64("dimension")?;
            shape.push(
                usize::try_from(d).map_err(|_| WorkerError::malformed(self.what, "dimension overflows"))?,
            );
        }
        // The data must be addressable in bytes: a corrupt header must fail here, not in an allocator.
        if shape.iter().try_fold(4usize, |acc, &d| acc.checked_mul(d)).is_none() {
            return Err(WorkerError::malformed(self.what, format!("shape {shape:?} overflows")));
        }
        Ok(shape)
    }

    pub(crate) fn f32s(&mut self, n: usize) -> Result<Vec<f32>, WorkerError> {
        let bytes = self.take(n.saturating_mul(4), "tensor data")?;
        Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn finish(&self) -> Result<(), WorkerError> {
        if self.pos != self.bytes.len() {
            return Err(WorkerError::malformed(
                self.what,
                format!("{} unexpected trailing bytes", self.bytes.len() - self.pos),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip_and_errors() {
        let t = Tensor::from_slice(&[1.0f32, -2.5, 3.25, 0.0, 5.0, 6.0]).reshape([2, 3]);
        let bytes = tensor_to_bytes(&t).unwrap();
        assert_eq!(bytes.len(), 4 + 2 * 8 + 6 * 4);
        let back = tensor_from_bytes(&bytes, Device::Cpu).unwrap();
        assert_eq!(back.size(), vec![2, 3]);
        assert_eq!(TensorData::from_tensor(&back).unwrap(), TensorData::from_tensor(&t).unwrap());

        let err = TensorData::decode(&bytes[..bytes.len() - 1]).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        let mut long = bytes.clone();
        long.push(0);
        assert!(TensorData::decode(&long).unwrap_err().to_string().contains("trailing"));
        let mut huge = vec![];
        TensorData { shape: vec![usize::MAX / 2, 4], data: vec![] }.encode_shape_into(&mut huge);
        assert!(TensorData::decode(&huge).unwrap_err().to_string().contains("overflows"));
    }
}
