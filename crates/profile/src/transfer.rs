//! Point-to-point transfer time from a measured curve.
//!
//! Interpolation is **linear in bytes and time**, not log-log. A transfer costs
//! about `latency + bytes / bandwidth`, an affine function: linear
//! interpolation between two measured points of an affine segment is exact,
//! whereas log-log interpolation bends every segment (it assumes a power law)
//! and overestimates mid-segment times where latency and bandwidth terms are
//! comparable (64 KiB - 1 MiB on the p3 cluster). Linear interpolation is also
//! what the Parcae artifact's `p2p_cost` does, so our migration costs reproduce
//! its reference figures.

use parcae_policy_core::TransferPoint;

/// Why a list of points is not a usable transfer curve.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CurveError {
    /// No points at all.
    #[error("the transfer curve has no points")]
    Empty,
    /// A size of zero bytes (nothing to interpolate from).
    #[error("point {index}: size must be >= 1 byte")]
    ZeroBytes {
        /// Index of the point.
        index: usize,
    },
    /// A time that is not a positive finite number.
    #[error("point {index}: time must be a finite number > 0, got {micros}")]
    BadTime {
        /// Index of the point.
        index: usize,
        /// The time given.
        micros: f64,
    },
    /// Sizes not strictly increasing.
    #[error("point {index}: sizes must increase strictly ({bytes} bytes after {previous})")]
    NotSorted {
        /// Index of the point.
        index: usize,
        /// Its size.
        bytes: u64,
        /// The size of the point before it.
        previous: u64,
    },
}

/// A validated transfer curve: sizes strictly increasing, times positive.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferCurve {
    points: Vec<TransferPoint>,
}

impl TransferCurve {
    /// Validate `points` (sorted by size, as measured). Times need not be
    /// monotone: measured curves are noisy at the latency floor (the p3 curve
    /// takes 142.9 us for 4 bytes and 139.7 us for 8).
    pub fn new(points: Vec<TransferPoint>) -> Result<Self, CurveError> {
        if points.is_empty() {
            return Err(CurveError::Empty);
        }
        for (index, p) in points.iter().enumerate() {
            if p.bytes == 0 {
                return Err(CurveError::ZeroBytes { index });
            }
            if !(p.micros.is_finite() && p.micros > 0.0) {
                return Err(CurveError::BadTime { index, micros: p.micros });
            }
            if index > 0 && points[index - 1].bytes >= p.bytes {
                return Err(CurveError::NotSorted {
                    index,
                    bytes: p.bytes,
                    previous: points[index - 1].bytes,
                });
            }
        }
        Ok(Self { points })
    }

    /// The measured points, sorted by size (what `ModelProfile.transfer_curve` carries).
    pub fn points(&self) -> &[TransferPoint] {
        &self.points
    }

    /// Time to move `bytes` from one instance to another, in milliseconds.
    pub fn transfer_ms(&self, bytes: u64) -> f64 {
        transfer_us(&self.points, bytes) / 1000.0
    }

    /// Time to move `bytes` from one instance to another, in microseconds.
    pub fn transfer_us(&self, bytes: u64) -> f64 {
        transfer_us(&self.points, bytes)
    }
}

/// Transfer time in milliseconds on a curve sorted by size, such as
/// `ModelProfile.transfer_curve`; for callers that hold only the policy-level
/// record. See [`transfer_us`] for the rule.
pub fn transfer_ms(curve: &[TransferPoint], bytes: u64) -> f64 {
    transfer_us(curve, bytes) / 1000.0
}

/// Transfer time in microseconds on a curve sorted by size.
///
/// - 0 bytes: 0 (nothing is sent);
/// - up to the smallest point: that point's time (the latency floor);
/// - between points: linear interpolation;
/// - beyond the largest point: linear extrapolation at the largest point's
///   bandwidth (`bytes x micros / bytes` of that point), as the artifact does.
///
/// An empty curve gives 0: with nothing measured there is nothing to charge.
pub fn transfer_us(curve: &[TransferPoint], bytes: u64) -> f64 {
    let (Some(first), Some(last)) = (curve.first(), curve.last()) else {
        return 0.0;
    };
    if bytes == 0 {
        return 0.0;
    }
    if bytes <= first.bytes {
        return first.micros;
    }
    if bytes >= last.bytes {
        return bytes as f64 * (last.micros / last.bytes as f64);
    }
    // First point at or above `bytes`; it exists and is not the first.
    let hi = curve.partition_point(|p| p.bytes < bytes);
    let (a, b) = (curve[hi - 1], curve[hi]);
    let t = (bytes - a.bytes) as f64 / (b.bytes - a.bytes) as f64;
    a.micros + (b.micros - a.micros) * t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(bytes: u64, micros: f64) -> TransferPoint {
        TransferPoint { bytes, micros }
    }

    #[test]
    fn interpolates_between_points() {
        let c = TransferCurve::new(vec![pt(100, 10.0), pt(200, 30.0), pt(400, 50.0)]).unwrap();
        assert_eq!(c.transfer_us(0), 0.0);
        assert_eq!(c.transfer_us(1), 10.0);
        assert_eq!(c.transfer_us(100), 10.0);
        assert_eq!(c.transfer_us(150), 20.0);
        assert_eq!(c.transfer_us(200), 30.0);
        assert_eq!(c.transfer_us(300), 40.0);
        assert_eq!(c.transfer_us(400), 50.0);
        // Beyond: 50 us per 400 bytes.
        assert_eq!(c.transfer_us(800), 100.0);
        assert_eq!(c.transfer_ms(8000), 1.0);
    }

    #[test]
    fn single_point_curve_works() {
        let c = TransferCurve::new(vec![pt(1000, 2.0)]).unwrap();
        assert_eq!(c.transfer_us(10), 2.0);
        assert_eq!(c.transfer_us(3000), 6.0);
    }

    #[test]
    fn rejects_bad_curves() {
        assert_eq!(TransferCurve::new(vec![]), Err(CurveError::Empty));
        assert!(matches!(TransferCurve::new(vec![pt(0, 1.0)]), Err(CurveError::ZeroBytes { index: 0 })));
        assert!(matches!(
            TransferCurve::new(vec![pt(1, 1.0), pt(2, f64::NAN)]),
            Err(CurveError::BadTime { index: 1, .. })
        ));
        assert!(matches!(
            TransferCurve::new(vec![pt(2, 1.0), pt(2, 1.0)]),
            Err(CurveError::NotSorted { index: 1, .. })
        ));
    }

    #[test]
    fn empty_slice_costs_nothing() {
        assert_eq!(transfer_ms(&[], 1 << 20), 0.0);
    }
}
