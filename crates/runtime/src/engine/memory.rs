//! Static memory planning: each intermediate tensor gets an offset in one arena per device,
//! so that tensors alive at the same time never overlap.
//!
//! A tensor is alive from the step that writes it to the last step that reads it. Offsets are
//! assigned greedily: tensors in some order, each into the smallest gap (best fit) left by the
//! already-placed tensors whose lifetimes overlap its own. No single order is best for every
//! graph, so three are tried — largest first, longest-lived first, earliest first — and the
//! smallest arena wins. The lower bound is the largest total size of tensors alive at one
//! step; the plan report prints both.

/// One tensor to place: its size and the steps [first, last] it is alive (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub size: usize,
    pub first: usize,
    pub last: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Byte offset of each interval, in input order.
    pub offsets: Vec<usize>,
    /// Arena size in bytes.
    pub arena: usize,
    /// Largest total size alive at one step: no plan can use less.
    pub lower_bound: usize,
}

/// Alignment of every offset (and so of every tensor in the arena).
pub const ALIGN: usize = 64;

fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// The largest total (aligned) size alive at one step.
pub fn max_live(intervals: &[Interval]) -> usize {
    let mut events: Vec<(usize, i64)> = Vec::with_capacity(intervals.len() * 2);
    for iv in intervals {
        events.push((iv.first, aligned(iv.size) as i64));
        events.push((iv.last + 1, -(aligned(iv.size) as i64)));
    }
    // At equal steps, frees (negative) come first: a tensor read for the last time at step s
    // and one first written at s + 1 never coexist.
    events.sort_by_key(|&(step, delta)| (step, delta));
    let (mut live, mut peak) = (0i64, 0i64);
    for (_, delta) in events {
        live += delta;
        peak = peak.max(live);
    }
    peak as usize
}

/// Places every interval; see the module comment.
pub fn plan(intervals: &[Interval]) -> MemoryPlan {
    let n = intervals.len();
    let by = |key: &dyn Fn(&Interval) -> (usize, usize)| {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (key(&intervals[i]), i));
        order
    };
    let orders = [
        by(&|iv| (usize::MAX - aligned(iv.size), iv.first)),
        by(&|iv| (usize::MAX - aligned(iv.size).saturating_mul(iv.last - iv.first + 1), iv.first)),
        by(&|iv| (iv.first, usize::MAX - aligned(iv.size))),
    ];
    let (offsets, arena) =
        orders.iter().map(|order| place(intervals, order)).min_by_key(|(_, arena)| *arena).unwrap_or_default();
    MemoryPlan { offsets, arena, lower_bound: max_live(intervals) }
}

fn place(intervals: &[Interval], order: &[usize]) -> (Vec<usize>, usize) {
    let mut offsets = vec![0usize; intervals.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(intervals.len());
    let mut arena = 0usize;
    for &i in order {
        let iv = intervals[i];
        let size = aligned(iv.size);
        if size == 0 {
            continue;
        }
        // Occupied ranges of placed tensors alive at the same time, sorted by offset.
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| intervals[j].first <= iv.last && iv.first <= intervals[j].last)
            .map(|&j| (offsets[j], offsets[j] + aligned(intervals[j].size)))
            .collect();
        busy.sort_unstable();
        // Best fit: the smallest gap that holds the tensor; else the end.
        let mut best: Option<(usize, usize)> = None; // (gap size, offset)
        let mut cursor = 0usize;
        for &(start, end) in &busy {
            if start > cursor {
                let gap = start - cursor;
                if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        let offset = best.map_or(cursor, |(_, o)| o);
        offsets[i] = offset;
        arena = arena.max(offset + size);
        placed.push(i);
    }
    (offsets, arena)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlap(a: &Interval, oa: usize, b: &Interval, ob: usize) -> bool {
        let time = a.first <= b.last && b.first <= a.last;
        let space = oa < ob + aligned(b.size) && ob < oa + aligned(a.size);
        time && space && a.size > 0 && b.size > 0
    }

    fn check(intervals: &[Interval]) -> MemoryPlan {
        let p = plan(intervals);
        for i in 0..intervals.len() {
            for j in i + 1..intervals.len() {
                assert!(!overlap(&intervals[i], p.offsets[i], &intervals[j], p.offsets[j]), "{i} and {j} overlap");
            }
            assert!(p.offsets[i] % ALIGN == 0);
        }
        assert!(p.arena >= p.lower_bound);
        p
    }

    #[test]
    fn a_chain_reuses_two_slots() {
        // x0 -> x1 -> x2 -> ... each read only by the next step
        let ivs: Vec<Interval> = (0..50).map(|s| Interval { size: 4096, first: s, last: s + 1 }).collect();
        let p = check(&ivs);
        assert_eq!(p.lower_bound, 2 * 4096);
        assert_eq!(p.arena, 2 * 4096);
    }

    #[test]
    fn a_residual_network_stays_near_the_bound() {
        // 50 blocks: a skip tensor alive across three inner layers of varying width.
        let mut ivs = Vec::new();
        let mut step = 0;
        for b in 0..50 {
            let width = 1000 * (1 + b % 4);
            ivs.push(Interval { size: width * 4, first: step, last: step + 4 });
            ivs.push(Interval { size: width * 8, first: step + 1, last: step + 2 });
            ivs.push(Interval { size: width * 2, first: step + 2, last: step + 3 });
            ivs.push(Interval { size: width * 4, first: step + 3, last: step + 4 });
            step += 4;
        }
        let p = check(&ivs);
        assert!(p.arena as f64 <= 1.05 * p.lower_bound as f64, "arena {} vs bound {}", p.arena, p.lower_bound);
    }

    #[test]
    fn zero_sized_and_single() {
        let p = check(&[Interval { size: 0, first: 0, last: 3 }, Interval { size: 10, first: 1, last: 1 }]);
        assert_eq!(p.arena, 64);
        assert_eq!(plan(&[]).arena, 0);
    }
}
