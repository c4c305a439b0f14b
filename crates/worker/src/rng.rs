//! A tiny deterministic random number generator (SplitMix64).
//!
//! The worker never uses libtorch's RNG: initial weights and training data must be the same
//! on every worker, device and libtorch build, whatever the (D, P) configuration, so they come
//! from this generator, seeded by explicit stream coordinates (seed, purpose, indices).

/// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state, good statistical quality for our
/// needs, and trivially reproducible from its seed.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

/// Stream purposes, so parameter init and data never share a stream.
pub(crate) const STREAM_INIT: u64 = 0x1A17;
pub(crate) const STREAM_DATA: u64 = 0xDA7A;
pub(crate) const STREAM_GRAMMAR: u64 = 0x6EA3;
pub(crate) const STREAM_SAMPLE: u64 = 0x5A4E;

impl SplitMix64 {
    /// A generator starting from `seed` as is.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator for the stream named by `coords` (e.g. `[seed, STREAM_DATA, step, micro_batch]`):
    /// each coordinate is folded in through the mixer, so nearby coordinates give unrelated streams.
    pub fn for_stream(coords: &[u64]) -> Self {
        let mut h = 0x243F_6A88_85A3_08D3_u64; // pi's fraction, any odd constant works
        for &c in coords {
            h = mix(h ^ mix(c.wrapping_add(0x9E37_79B9_7F4A_7C15)));
        }
        SplitMix64 { state: h }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is below 2^-50 for the small n used here.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.next_u64() % n
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal sample (Box-Muller; one of the pair is discarded to keep it stateless).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]: ln is finite
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of SplitMix64 seeded with 1234567 (from the reference C implementation).
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }

    #[test]
    fn streams_differ_and_repeat() {
        let a: Vec<u64> = (0..4).map(|_| SplitMix64::for_stream(&[7, 1, 2]).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            SplitMix64::for_stream(&[7, 1, 2]).next_u64(),
            SplitMix64::for_stream(&[7, 2, 1]).next_u64()
        );
        let mut r = SplitMix64::new(3);
        let xs: Vec<f64> = (0..20_000).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "mean {mean} var {var}");
    }
}
