//! Where replicas sit (GPU by GPU) and how many weight bytes a GPU lacks for
//! its new position: the two pieces of geometry the reconfiguration costs
//! need, kept apart from the event loop so they can be tested alone.

/// One GPU: the instance (its id) and the GPU's index inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gpu {
    pub instance: usize,
    pub index: u32,
}

/// A position inside a replica of shape `(tp, pp)`: pipeline stage and tensor
/// slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Position {
    pub stage: u32,
    pub slice: u32,
}

/// Position of GPU `j` of a replica (tensor parallelism innermost).
pub(crate) fn position(j: usize, tp: u32) -> Position {
    let tp = tp.max(1) as usize;
    Position { stage: (j / tp) as u32, slice: (j % tp) as u32 }
}

/// Forms up to `count` replicas of `tp x pp` GPUs from free tensor-parallel
/// chunks (`tp` GPUs aligned inside one instance), taking instances in
/// `order`. `used[instance]` is a bit mask of busy GPUs; the chosen GPUs are
/// marked busy. Each replica's GPUs come in position order.
pub(crate) fn place(
    order: &[usize],
    used: &mut [u64],
    gpus_per_instance: u32,
    tp: u32,
    pp: u32,
    count: u32,
) -> Vec<Vec<Gpu>> {
    let tp = tp.max(1);
    let pp = pp.max(1) as usize;
    let chunks_per_instance = gpus_per_instance / tp;
    let wanted = count as usize * pp;
    let mut chunks: Vec<Gpu> = Vec::with_capacity(wanted);
    'outer: for &instance in order {
        for c in 0..chunks_per_instance {
            if chunks.len() >= wanted {
                break 'outer;
            }
            let mask = chunk_mask(c * tp, tp);
            if used.get(instance).is_some_and(|u| u & mask == 0) {
                chunks.push(Gpu { instance, index: c * tp });
            }
        }
    }
    let whole = chunks.len() / pp;
    let mut replicas = Vec::with_capacity(whole);
    for group in chunks.chunks_exact(pp).take(whole) {
        let mut gpus = Vec::with_capacity(pp * tp as usize);
        for chunk in group {
            if let Some(u) = used.get_mut(chunk.instance) {
                *u |= chunk_mask(chunk.index, tp);
            }
            gpus.extend((0..tp).map(|t| Gpu { instance: chunk.instance, index: chunk.index + t }));
        }
        replicas.push(gpus);
    }
    replicas
}

fn chunk_mask(first: u32, width: u32) -> u64 {
    let ones = if width >= 64 { u64::MAX } else { (1u64 << width) - 1 };
    ones.checked_shl(first).unwrap_or(0)
}

/// The old positions one instance holds, of shape `(tp, pp)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Held {
    pub positions: Vec<Position>,
}

impl Held {
    /// Adds a position (once: positions of one shape are disjoint slices).
    pub fn add(&mut self, p: Position) {
        if !self.positions.contains(&p) {
            self.positions.push(p);
        }
    }
}

/// Shapes in play: the model's layers and bytes, the old shape the held
/// positions belong to, the new shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slicing {
    pub layers: u32,
    pub weight_bytes: f64,
    pub old: Option<(u32, u32)>,
    pub new: (u32, u32),
}

fn stage_layers(layers: u32, pp: u32, stage: u32) -> (u32, u32) {
    let per = layers.div_ceil(pp.max(1));
    let start = (stage * per).min(layers);
    (start, ((stage + 1) * per).min(layers))
}

impl Slicing {
    /// Weight bytes the GPU at `new` lacks given what its instance `held`:
    /// per layer of its stage, the share of its tensor slice no held position
    /// covers, times the slice's bytes (`weight_bytes / layers / tp`).
    pub fn missing_bytes(&self, new: Position, held: Option<&Held>) -> f64 {
        let (tp_n, pp_n) = self.new;
        let (first, end) = stage_layers(self.layers, pp_n, new.stage);
        let per_layer = self.weight_bytes / f64::from(self.layers.max(1)) / f64::from(tp_n.max(1));
        let lo = f64::from(new.slice) / f64::from(tp_n.max(1));
        let hi = f64::from(new.slice + 1) / f64::from(tp_n.max(1));
        let mut missing = 0.0;
        for layer in first..end {
            let mut covered = 0.0;
            if let (Some(held), Some((tp_o, pp_o))) = (held, self.old) {
                for p in &held.positions {
                    let (a, b) = stage_layers(self.layers, pp_o, p.stage);
                    if layer < a || layer >= b {
                        continue;
                    }
                    let o_lo = f64::from(p.slice) / f64::from(tp_o.max(1));
                    let o_hi = f64::from(p.slice + 1) / f64::from(tp_o.max(1));
                    covered += (hi.min(o_hi) - lo.max(o_lo)).max(0.0) / (hi - lo);
                }
            }
            missing += per_layer * (1.0 - covered.min(1.0));
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_stay_inside_instances_and_stages_may_span_them() {
        // 6-GPU replicas (tp 2, pp 3) on 4-GPU instances: 3 instances hold 2.
        let mut used = vec![0u64; 3];
        let replicas = place(&[0, 1, 2], &mut used, 4, 2, 3, 5);
        assert_eq!(replicas.len(), 2);
        assert_eq!(used, vec![0b1111; 3]);
        let first: Vec<(usize, u32)> = replicas[0].iter().map(|g| (g.instance, g.index)).collect();
        assert_eq!(first, vec![(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]);
        // A busy chunk is skipped; tp wider than an instance places nothing.
        let mut used = vec![0b0011u64, 0];
        let replicas = place(&[0, 1], &mut used, 4, 2, 1, 3);
        assert_eq!(replicas.len(), 3);
        assert_eq!(replicas[0][0], Gpu { instance: 0, index: 2 });
        assert!(place(&[0], &mut [0], 4, 8, 1, 1).is_empty());
    }

    #[test]
    fn missing_bytes_follow_layer_and_slice_overlap() {
        let s = Slicing { layers: 12, weight_bytes: 1200.0, old: Some((2, 3)), new: (2, 2) };
        // New stage 0 = layers 0..6, slice 0 of 2: 6 layers x 50 bytes.
        assert_eq!(s.missing_bytes(Position { stage: 0, slice: 0 }, None), 300.0);
        // Old stage 0 (layers 0..4), same slice: 4 layers covered.
        let mut held = Held::default();
        held.add(Position { stage: 0, slice: 0 });
        held.add(Position { stage: 0, slice: 0 });
        assert_eq!(s.missing_bytes(Position { stage: 0, slice: 0 }, Some(&held)), 100.0);
        // Plus old stage 1 (layers 4..8), the other slice: nothing more.
        held.add(Position { stage: 1, slice: 1 });
        assert_eq!(s.missing_bytes(Position { stage: 0, slice: 0 }, Some(&held)), 100.0);
        // Wider old tp (4): slices 0 and 1 of 4 make up slice 0 of 2.
        let s = Slicing { layers: 12, weight_bytes: 1200.0, old: Some((4, 1)), new: (2, 1) };
        let mut held = Held::default();
        held.add(Position { stage: 0, slice: 0 });
        assert_eq!(s.missing_bytes(Position { stage: 0, slice: 0 }, Some(&held)), 300.0);
        held.add(Position { stage: 0, slice: 1 });
        assert!(s.missing_bytes(Position { stage: 0, slice: 0 }, Some(&held)).abs() < 1e-9);
        assert_eq!(position(5, 2), Position { stage: 2, slice: 1 });
    }
}
