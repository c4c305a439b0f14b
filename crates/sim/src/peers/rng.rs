//! A small seeded generator (SplitMix64, Steele et al., OOPSLA'14) so the
//! Monte Carlo draws are reproducible bit for bit without a dependency.

pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n >= 1`), by rejection so there is no modulo bias.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.next_u64();
            if x < zone {
                return (x % n) as usize;
            }
        }
    }

    /// `k` distinct indices of `0..n`, uniformly, in random order (partial
    /// Fisher-Yates); all of them when `k >= n`.
    pub(crate) fn choose(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut pool: Vec<usize> = (0..n).collect();
        let k = k.min(n);
        for i in 0..k {
            let j = i + self.below(n - i);
            pool.swap(i, j);
        }
        pool.truncate(k);
        pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_is_distinct_seeded_and_roughly_uniform() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        assert_eq!(a.choose(10, 4), b.choose(10, 4));
        let mut counts = [0u32; 5];
        let mut r = SplitMix64::new(1);
        for _ in 0..10_000 {
            let picked = r.choose(5, 2);
            assert_eq!(picked.len(), 2);
            assert_ne!(picked[0], picked[1]);
            for i in picked {
                counts[i] += 1;
            }
        }
        // Each index is picked with probability 2/5: 4000 expected.
        assert!(counts.iter().all(|&c| (3700..4300).contains(&c)), "{counts:?}");
        assert_eq!(r.choose(3, 9).len(), 3);
    }
}
