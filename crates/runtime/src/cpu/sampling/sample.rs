//! sample_tokens on the host: each row on its own (rows in parallel), in the plainest form of
//! the definition in crates/graph/src/ops/sampling.rs: the kept set by sorting and selection,
//! then the Gumbel-max pick. The GPU kernel reaches the same thresholds by bisection (see
//! kernels/sampling.cu); both work on the integer keys and fixed-point weights of math.rs, so
//! they agree exactly.

use rayon::prelude::*;

use super::math::{GUMBEL_BOUND, canon, gumbel, key, ln, weight};

/// One row's sampling parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowParams {
    pub temperature: f32,
    pub top_k: i64,
    pub top_p: f32,
    pub min_p: f32,
    pub seed: u64,
}

/// The tokens of `batch` rows of `vocab` logits each, row `b` with `params[b]`.
pub fn sample(logits: &[f32], vocab: usize, params: &[RowParams], out: &mut [i64]) {
    let row = |(b, o): (usize, &mut i64)| *o = sample_row(&logits[b * vocab..][..vocab], &params[b]) as i64;
    if params.len() > 1 && params.len() * vocab >= 1 << 15 {
        out.par_iter_mut().enumerate().for_each(row);
    } else {
        out.iter_mut().enumerate().for_each(row);
    }
}

/// The index of the largest value, the lowest on ties; NaN never wins; 0 when nothing beats
/// -inf (and for an empty row).
fn argmax(x: &[f32]) -> (f32, usize) {
    let mut best = (f32::NEG_INFINITY, 0);
    for (i, &v) in x.iter().enumerate() {
        if v > best.0 {
            best = (v, i);
        }
    }
    best
}

/// The token of one row.
pub fn sample_row(x: &[f32], p: &RowParams) -> usize {
    if p.temperature.is_nan() || p.temperature <= 0.0 || p.top_k == 1 {
        return argmax(x).1;
    }
    let z: Vec<f32> = x.iter().map(|&v| canon(v / p.temperature)).collect();
    let (m, first) = argmax(&z);
    if !m.is_finite() {
        // A temperature so small that logits / temperature overflow to +inf (or -inf, all of
        // them negative), +inf logits, or nothing above -inf: the limit of sampling as the
        // temperature goes to 0, the greedy pick of the logits themselves (token 0 when nothing
        // beats -inf; the first overflowing index would be the lowest positive logit's).
        return argmax(x).1;
    }
    let top = key(m);
    // The keep threshold as a key: values with key >= thr are kept; 0 keeps everything.
    let mut thr = 0u32;
    let n = z.len();
    if p.top_k > 1 && (p.top_k as u64) < n as u64 {
        thr = kth_largest(&z, p.top_k as usize);
    }
    if p.min_p > 0.0 {
        thr = thr.max(key(canon(m + ln(p.min_p))));
    }
    // The largest value is always kept (min_p >= 1 keeps only it, and its ties).
    thr = thr.min(top);
    if p.top_p < 1.0 {
        thr = thr.max(top_p_threshold(&z, m, thr, p.top_p)).min(top);
    }
    // The largest value's draw bounds the winner's from below: values more than GUMBEL_BOUND
    // under it cannot win, and their noise is skipped (the same token, fewer draws).
    let floor = m + gumbel(p.seed, first as u64);
    let mut best: Option<(f32, usize)> = None;
    for (i, &zi) in z.iter().enumerate() {
        if key(zi) >= thr && zi + GUMBEL_BOUND >= floor {
            let s = zi + gumbel(p.seed, i as u64);
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, i));
            }
        }
    }
    best.map_or(first, |(_, i)| i)
}

/// The key of the k-th largest value (1-based, counting repeats).
fn kth_largest(z: &[f32], k: usize) -> u32 {
    let mut keys: Vec<u32> = z.iter().map(|&v| key(v)).collect();
    let (_, kth, _) = keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
    *kth
}

/// The top-p threshold among the values with key >= `thr`: the key of the value at which the
/// running sum of the weights, largest values first, reaches `top_p` times their total (the
/// largest t whose kept values >= t hold that much of the mass).
fn top_p_threshold(z: &[f32], m: f32, thr: u32, top_p: f32) -> u32 {
    let mut kept: Vec<(u32, u64)> =
        z.iter().filter(|&&v| key(v) >= thr).map(|&v| (key(v), weight(v - m))).filter(|e| e.1 > 0).collect();
    let total: u64 = kept.iter().map(|e| e.1).sum();
    let target = top_p as f64 * total as f64;
    kept.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
    let mut acc = 0u64;
    for (k, w) in kept {
        acc += w;
        if acc as f64 >= target {
            return k;
        }
    }
    thr
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: i64, top_p: f32, min_p: f32, seed: u64) -> RowParams {
        RowParams { temperature, top_k, top_p, min_p, seed }
    }

    #[test]
    fn greedy_rows_take_the_first_largest() {
        let x = [1.0, f32::NAN, 3.0, 3.0, -2.0];
        assert_eq!(sample_row(&x, &params(0.0, 0, 1.0, 0.0, 1)), 2);
        assert_eq!(sample_row(&x, &params(0.7, 1, 1.0, 0.0, 1)), 2);
        assert_eq!(sample_row(&x, &params(f32::NAN, 0, 1.0, 0.0, 1)), 2);
        let dead = [f32::NAN, f32::NEG_INFINITY, f32::NAN];
        assert_eq!(sample_row(&dead, &params(0.0, 0, 1.0, 0.0, 1)), 0);
        assert_eq!(sample_row(&dead, &params(1.0, 0, 1.0, 0.0, 1)), 0);
        assert_eq!(sample_row(&[], &params(1.0, 0, 1.0, 0.0, 1)), 0);
        let inf = [0.0, f32::INFINITY, 5.0, f32::INFINITY];
        assert_eq!(sample_row(&inf, &params(1.0, 0, 1.0, 0.0, 1)), 1);
    }

    #[test]
    fn filters_that_keep_one_value_pick_it() {
        let x = [0.5, 2.0, -1.0, 1.5, 1.9];
        for seed in 0..50 {
            assert_eq!(sample_row(&x, &params(1.0, 0, 0.0, 0.0, seed)), 1);
            assert_eq!(sample_row(&x, &params(1.0, 0, 1.0, 1.0, seed)), 1);
            assert_eq!(sample_row(&x, &params(1.0, 0, 1.0, 5.0, seed)), 1);
            let t = sample_row(&x, &params(1.0, 2, 1.0, 0.0, seed));
            assert!(t == 1 || t == 4, "{t}");
        }
    }

    #[test]
    fn top_k_keeps_ties_at_the_kth_value() {
        let x = [3.0, 1.0, 2.0, 2.0, 0.0];
        let keys: Vec<u32> = x.iter().map(|&v| key(v)).collect();
        assert_eq!(kth_largest(&x, 2), keys[2]);
        let mut seen = [false; 5];
        for seed in 0..400 {
            seen[sample_row(&x, &params(0.5, 2, 1.0, 0.0, seed))] = true;
        }
        assert_eq!(seen, [true, false, true, true, false]);
    }

    #[test]
    fn top_p_stops_where_the_mass_is_reached() {
        // Weights e^0, e^-1, e^-2, e^-3: cumulative 0.644, 0.881, 0.968, 1 of the total.
        let z = [-1.0, 0.0, -3.0, -2.0];
        let m = 0.0;
        assert_eq!(top_p_threshold(&z, m, 0, 0.5), key(0.0));
        assert_eq!(top_p_threshold(&z, m, 0, 0.7), key(-1.0));
        assert_eq!(top_p_threshold(&z, m, 0, 0.9), key(-2.0));
        assert_eq!(top_p_threshold(&z, m, 0, 0.99), key(-3.0));
        // Over what a threshold at -2 keeps: 0.665, 0.910, 1.
        assert_eq!(top_p_threshold(&z, m, key(-2.0), 0.9), key(-1.0));
    }
}

/// The device's way to the same thresholds (kernels/sampling.cu), sequentially: bisection over
/// the 32 bits of the keys with counts and with bracketed sums of the weights. Checked against
/// the sorting forms above on random rows.
#[cfg(test)]
mod bisection {
    use super::*;
    use crate::cpu::sampling::math::splitmix64;

    fn bisect_kth(z: &[f32], k: u64) -> u32 {
        let mut kk = 0u32;
        for bit in (0..32).rev() {
            let cand = kk | (1 << bit);
            if z.iter().filter(|&&v| key(v) >= cand).count() as u64 >= k {
                kk = cand;
            }
        }
        kk
    }

    fn bisect_top_p(z: &[f32], m: f32, thr: u32, top_p: f32) -> u32 {
        let total: u64 = z.iter().filter(|&&v| key(v) >= thr).map(|&v| weight(v - m)).sum();
        let target = top_p as f64 * total as f64;
        let (mut t, mut hi, mut above) = (0u32, 1u64 << 32, 0u64);
        for bit in (0..32).rev() {
            let cand = t | (1 << bit);
            let lo = cand.max(thr);
            let s: u64 = z.iter().filter(|&&v| key(v) >= lo && (key(v) as u64) < hi).map(|&v| weight(v - m)).sum();
            if (above + s) as f64 >= target {
                t = cand;
            } else {
                hi = cand as u64;
                above += s;
            }
        }
        t
    }

    #[test]
    fn bisection_finds_the_sorted_thresholds() {
        let mut state = 5u64;
        let mut next = || {
            state = splitmix64(state);
            state
        };
        for case in 0..300 {
            let n = 1 + (next() % 400) as usize;
            let spread = [0.5f32, 2.0, 8.0, 40.0][case % 4];
            // Values on a coarse grid, so that many repeat, and a few -inf.
            let z: Vec<f32> = (0..n)
                .map(|_| {
                    let r = next();
                    if r % 50 == 0 {
                        f32::NEG_INFINITY
                    } else {
                        canon(((r >> 40) % 64) as f32 / 64.0 * spread - spread / 2.0)
                    }
                })
                .collect();
            let m = argmax(&z).0;
            if !m.is_finite() {
                continue;
            }
            let k = 1 + (next() % n as u64) as usize;
            assert_eq!(bisect_kth(&z, k as u64), kth_largest(&z, k), "case {case}: k {k} of {n}");
            let thr = if next() % 2 == 0 { 0 } else { kth_largest(&z, k) };
            for top_p in [0.0f32, 0.05, 0.3, 0.5, 0.9, 0.999] {
                let want = top_p_threshold(&z, m, thr, top_p);
                assert_eq!(bisect_top_p(&z, m, thr, top_p).min(key(m)), want, "case {case}: top_p {top_p}");
            }
        }
    }
}
