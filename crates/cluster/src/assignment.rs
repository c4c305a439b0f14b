//! Maximum-weight assignment (Kuhn-Munkres / Hungarian algorithm, O(n²m)).
//!
//! SpotServe maps surviving instances onto the slots of a new configuration as a
//! maximum-weight bipartite matching; this is that solver, written for the
//! rectangular case (fewer slots than workers: the extra workers stay idle).

/// Assigns each of `rows` (slots) to a distinct column (worker) maximising the
/// summed weight. `weights[r][c]` is the value of giving row `r` column `c`.
/// Needs `rows <= columns`; returns the column of each row.
pub fn max_weight_assignment(weights: &[Vec<u64>]) -> Vec<usize> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let m = weights[0].len();
    assert!(n <= m, "assignment needs at least as many columns ({m}) as rows ({n})");
    assert!(weights.iter().all(|row| row.len() == m), "ragged weight matrix");
    // Minimise cost = max - weight with the classic potentials formulation
    // (1-based arrays, column 0 is a sentinel).
    let max = weights.iter().flatten().copied().max().unwrap_or(0) as i128;
    let cost = |r: usize, c: usize| max - weights[r][c] as i128;
    let inf = i128::MAX / 4;
    let mut u = vec![0i128; n + 1];
    let mut v = vec![0i128; m + 1];
    let mut row_of_col = vec![0usize; m + 1];
    let mut way = vec![0usize; m + 1];
    for row in 1..=n {
        row_of_col[0] = row;
        let mut col0 = 0usize;
        let mut min_to = vec![inf; m + 1];
        let mut used = vec![false; m + 1];
        loop {
            used[col0] = true;
            let r0 = row_of_col[col0];
            let mut delta = inf;
            let mut col1 = 0usize;
            for col in 1..=m {
                if used[col] {
                    continue;
                }
                let reduced = cost(r0 - 1, col - 1) - u[r0] - v[col];
                if reduced < min_to[col] {
                    min_to[col] = reduced;
                    way[col] = col0;
                }
                if min_to[col] < delta {
                    delta = min_to[col];
                    col1 = col;
                }
            }
            for col in 0..=m {
                if used[col] {
                    u[row_of_col[col]] += delta;
                    v[col] -= delta;
                } else {
                    min_to[col] -= delta;
                }
            }
            col0 = col1;
            if row_of_col[col0] == 0 {
                break;
            }
        }
        loop {
            let prev = way[col0];
            row_of_col[col0] = row_of_col[prev];
            col0 = prev;
            if col0 == 0 {
                break;
            }
        }
    }
    let mut col_of_row = vec![0usize; n];
    for col in 1..=m {
        if row_of_col[col] != 0 {
            col_of_row[row_of_col[col] - 1] = col - 1;
        }
    }
    col_of_row
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(weights: &[Vec<u64>], cols: &[usize]) -> u64 {
        cols.iter().enumerate().map(|(r, &c)| weights[r][c]).sum()
    }

    /// Best total by trying every injective map (small cases only).
    fn brute_force(weights: &[Vec<u64>]) -> u64 {
        fn go(weights: &[Vec<u64>], row: usize, used: &mut Vec<bool>) -> u64 {
            if row == weights.len() {
                return 0;
            }
            let mut best = 0;
            for c in 0..used.len() {
                if !used[c] {
                    used[c] = true;
                    best = best.max(weights[row][c] + go(weights, row + 1, used));
                    used[c] = false;
                }
            }
            best
        }
        go(weights, 0, &mut vec![false; weights[0].len()])
    }

    #[test]
    fn matches_brute_force_on_random_rectangular_matrices() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..300 {
            let rows = 1 + (next() % 6) as usize;
            let cols = rows + (next() % 3) as usize;
            let sparse = case % 2 == 0;
            let weights: Vec<Vec<u64>> = (0..rows)
                .map(|_| {
                    (0..cols).map(|_| if sparse && next() % 3 == 0 { 0 } else { next() % 1000 }).collect()
                })
                .collect();
            let cols_of = max_weight_assignment(&weights);
            let mut seen = cols_of.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), rows, "columns must be distinct");
            assert_eq!(total(&weights, &cols_of), brute_force(&weights), "case {case}: {weights:?}");
        }
    }

    #[test]
    fn empty_and_trivial() {
        assert!(max_weight_assignment(&[]).is_empty());
        assert_eq!(max_weight_assignment(&[vec![0, 5, 3]]), vec![1]);
    }
}
