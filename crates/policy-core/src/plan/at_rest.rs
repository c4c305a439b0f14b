//! What one scenario of a transition trains when nothing is carried into it,
//! remembered between the programs that price it again.
//!
//! Most pairs of a front carry no migration (a transition whose migrations
//! finish within the interval leaves nothing), and the online policy plans
//! without the work-at-risk rule, so the pricing of such a pair depends on the
//! distribution, the layout's speed, the scale of the lost work and the
//! interval alone. The shadows, the proving shadow and the deferred plan price
//! the same distributions at the same speeds call after call, each walking
//! the distribution's outcomes again. A fixed table of slots, indexed by a
//! hash of those inputs and checked against all of them bit for bit, keeps
//! the sums: a hit returns the very bits the loop would (it was the loop that
//! computed them), a miss or a collision just computes them again. The table
//! never grows (a guest's memory is bounded; the sums kept beside every
//! distribution instead asked a minute fleet for 304 MiB, past the sandbox's
//! 256), and it is emptied whenever the store's outcomes are dropped or moved,
//! since it names them by their place.

/// Slots in the table, a power of two: 2^16 of 56 bytes, 3.5 MiB.
const SLOT_BITS: u32 = 16;

/// What one pricing is computed from, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    /// First outcome in the store's outcomes; `u64::MAX` for an empty slot.
    start: u64,
    /// Outcomes.
    len: u64,
    /// The layout's speed, samples/s.
    thr: u64,
    /// The scale of the lost work.
    lost_scale: u64,
    /// The interval, ms.
    interval_ms: u64,
}

/// One remembered pricing: its key, and the samples trained less those
/// rolled back and the expected migration time left over past the interval.
#[derive(Debug, Clone, Copy)]
struct Slot {
    key: Key,
    sums: (f64, f64),
}

const EMPTY: Slot =
    Slot { key: Key { start: u64::MAX, len: 0, thr: 0, lost_scale: 0, interval_ms: 0 }, sums: (0.0, 0.0) };

/// The table of [`AtRest`] sums (allocated on first use).
#[derive(Debug, Clone, Default)]
pub(super) struct AtRest {
    slots: Vec<Slot>,
}

impl AtRest {
    /// Forget every sum: the outcomes they name are dropped or moved.
    pub(super) fn clear(&mut self) {
        self.slots.clear();
    }

    /// The sums of the outcomes `start..start + len` at speed `thr`, lost
    /// work scaled by `lost_scale`, over `interval_ms`: remembered, or
    /// `compute`d and kept.
    #[inline]
    pub(super) fn sums(
        &mut self,
        (start, len): (usize, usize),
        thr: f64,
        lost_scale: f64,
        interval_ms: f64,
        compute: impl FnOnce() -> (f64, f64),
    ) -> (f64, f64) {
        if self.slots.is_empty() {
            self.slots = vec![EMPTY; 1 << SLOT_BITS];
        }
        let key = Key {
            start: start as u64,
            len: len as u64,
            thr: thr.to_bits(),
            lost_scale: lost_scale.to_bits(),
            interval_ms: interval_ms.to_bits(),
        };
        let hash = (key.start.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ key.thr.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            ^ key.lost_scale.rotate_left(23)
            ^ key.interval_ms.rotate_left(41))
        .wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        let slot = &mut self.slots[(hash >> (64 - SLOT_BITS)) as usize];
        if slot.key != key {
            *slot = Slot { key, sums: compute() };
        }
        slot.sums
    }
}

#[cfg(test)]
mod tests {
    use super::AtRest;

    /// A repeat is answered with the kept bits, without computing; any
    /// input that differs by a bit computes again; a cleared table forgets.
    #[test]
    fn sums_are_kept_by_every_input_bit_for_bit() {
        let mut memo = AtRest::default();
        let key = ((40, 3), 12.5, 1.0, 60_000.0);
        let ask = |memo: &mut AtRest,
                   ((start, len), thr, scale, interval): ((usize, usize), f64, f64, f64),
                   v: f64| {
            let mut computed = false;
            let sums = memo.sums((start, len), thr, scale, interval, || {
                computed = true;
                (v, v + 1.0)
            });
            (sums, computed)
        };
        assert_eq!(ask(&mut memo, key, 7.0), ((7.0, 8.0), true));
        assert_eq!(ask(&mut memo, key, 9.0), ((7.0, 8.0), false));
        let (place, thr, scale, interval) = key;
        for other in [
            ((41, 3), thr, scale, interval),
            ((40, 4), thr, scale, interval),
            (place, f64::from_bits(thr.to_bits() + 1), scale, interval),
            (place, thr, -0.0, interval),
            (place, thr, scale, 30_000.0),
        ] {
            assert_eq!(ask(&mut memo, other, 2.0), ((2.0, 3.0), true), "{other:?}");
        }
        memo.clear();
        assert_eq!(ask(&mut memo, key, 5.0), ((5.0, 6.0), true));
    }
}
