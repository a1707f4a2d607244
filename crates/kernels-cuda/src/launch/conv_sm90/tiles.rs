//! The Hopper conv2d's tile shapes: the column-tile width, 128- or 256-row tiles, and whether the
//! consumer warpgroups share each tile or take turns (ping-pong), from simple cost models fitted
//! on ResNet-50 layers.

use super::BM;

/// The cost of a conv of `m` rows, `k` columns and `ktiles` k-steps in tiles of `bm` x `bn` over
/// `sms` persistent blocks: its waves of tiles times a tile's cost, about ktiles * (bm + bn)
/// (each step's A and B tiles) plus 12 per 128 x 1 outputs for its epilogue, 24 with a residual
/// to read.
fn cost(m: usize, k: usize, ktiles: usize, (bm, bn): (usize, usize), residual: bool, sms: usize) -> usize {
    let epilogue = if residual { 24 } else { 12 };
    let waves = m.div_ceil(bm).saturating_mul(k.div_ceil(bn)).div_ceil(sms.max(1));
    waves.saturating_mul(ktiles.saturating_mul(bm + bn).saturating_add(epilogue * bn * bm / BM))
}

/// The column-tile width: the one of least `cost` with its better row count (128, or 256 where
/// [`wide_tiles`] may take them). On an H200 (ResNet-50 batch 32, every width forced on each
/// layer) this picks the fastest width of all 22 layers and 3 fused blocks; the former model
/// (waves x (BN + 48)) lost 0.4-0.9 us on the 28x28 3x3 layers (64 wide: 18.5 / 18.9 us, 128
/// wide: 18.1 / 18.1). Weighing each width at 128 rows only kept the 28x28 3x3 block with a
/// residual on 128 x 64 tiles (three per block), where 256 x 128 (one per block) measured
/// faster on an H100: 21.5 against 24.6 us (the conv alone 17.2).
pub fn tile_width(m: usize, k: usize, ktiles: usize, residual: bool, sms: usize) -> usize {
    let best = |bn: usize| {
        let narrow = cost(m, k, ktiles, (BM, bn), residual, sms);
        if wide_allowed(bn, ktiles) { narrow.min(cost(m, k, ktiles, (2 * BM, bn), residual, sms)) } else { narrow }
    };
    [256, 128, 64].into_iter().min_by_key(|&bn| best(bn)).unwrap_or(128)
}

/// Tiles of 256 rows exist for 64- and 128-wide tiles (a consumer thread holds two halves of
/// BN / 2 accumulators); 128-wide ones only paid with 9 k-steps or more (see [`wide_tiles`]).
fn wide_allowed(bn: usize, ktiles: usize) -> bool {
    bn == 64 || bn == 128 && ktiles >= 9
}

/// Whether tiles of 256 rows (each consumer warpgroup two m64 halves) should replace tiles of
/// 128 for a tile width `bn`: where they `cost` less, for 64-wide tiles, or 128-wide ones
/// with 9 k-steps or more. Measured on an H200 (ResNet-50 batch 32, 256 / 128 rows, us):
/// 56x56 64 -> 64 7.4 / 9.1, 3x3 64 -> 64 20.4 / 22.3, 28x28 3x3 128 -> 128 15.9 / 18.1 (s2:
/// 16.1 / 18.2), the stem 137.3 / 140.6; slower where tiles become too few (14x14 3x3 256 -> 256
/// 24.7 / 16.7) and on 128-wide 56x56 256 -> 128 (4 k-steps: 24.9 / 22.9), which the rule
/// leaves out.
pub fn wide_tiles(m: usize, k: usize, ktiles: usize, bn: usize, residual: bool, sms: usize) -> bool {
    wide_allowed(bn, ktiles)
        && cost(m, k, ktiles, (2 * BM, bn), residual, sms) < cost(m, k, ktiles, (BM, bn), residual, sms)
}

/// Rows per tile for `bn`-wide tiles when the 192-row form is not taken ([`trio_tiles`]): 256
/// where [`wide_tiles`] says so, else 128.
pub fn tile_rows(m: usize, k: usize, ktiles: usize, bn: usize, residual: bool, sms: usize) -> usize {
    if wide_tiles(m, k, ktiles, bn, residual, sms) { 2 * BM } else { BM }
}

/// Whether 192 x 128 tiles over three consumer warpgroups should replace the tiles of
/// `current` units (the choice of [`tile_width`] and [`tile_rows`]): where they fill the
/// persistent grid's last wave (95% or more), the reduction has 4 k-steps or more (8 with a
/// residual: those threads have 128 registers, too few to load the residual before the
/// mainloop), and either it has 8 or more or the 192-row tiles take fewer waves.
/// Measured on an H100 (ResNet-50 batch 32, 192 rows forced against the default, us): 28x28
/// 3x3 128 -> 128 14.3 / 17.2 (131 tiles against 98 of 256 x 128), its stride-2 form 14.6 /
/// 17.4, 512 -> 128 9.7 / 11.6, 512 -> 256 18.1 / 19.0, 14x14 1024 -> 512 12.2 / 14.3 (132
/// tiles against 98 of 128 x 256), 256 -> 1024 10.9 / 11.3, 28x28 512 -> 1024 s2 14.8 / 15.8,
/// the 3x3 block with a residual 18.1 / 22.1; slower with half a wave (14x14 3x3 256 -> 256
/// 20.8 / 16.8, 66 tiles), 64-wide layers, one k-step (56x56 64 -> 256 25.9 / 25.2), 4 k-steps
/// in more waves (56x56 256 -> 512 s2 19.4 / 17.7) and with a residual and 4 k-steps (14x14
/// 256 -> 1024 17.6 / 15.6).
pub fn trio_tiles(m: usize, k: usize, ktiles: usize, residual: bool, sms: usize, current: usize) -> bool {
    let sms = sms.max(1);
    let tiles = m.div_ceil(3 * BM / 2).saturating_mul(k.div_ceil(128));
    let waves = tiles.div_ceil(sms);
    let full = tiles.saturating_mul(100) >= waves.saturating_mul(sms).saturating_mul(95);
    let deep = ktiles >= if residual { 8 } else { 4 };
    k >= 128 && deep && full && (ktiles >= 8 || waves < current.div_ceil(sms))
}

/// Whether the consumer warpgroups should take alternate work units (ping-pong) rather than
/// share each one, for units of `bn`-wide tiles with `steps` k-steps each: when every block of
/// the persistent grid has at least four, so that one warpgroup's epilogue overlaps the other's
/// mainloop. Measured on an H200 (ResNet-50 batch 32, ping-pong against cooperative, us): with
/// 784 tiles (about 6 per block) 56x56 64 -> 64 9.0 / 9.2, 3x3 64 -> 64 22.2 / 22.8, 256 -> 64
/// 19.4 / 19.9, 256 -> 128 22.8 / 22.9; with 392 (about 3) slower, 28x28 512 -> 256 16.7 / 15.8,
/// 512 -> 1024 s2 15.7 / 15.0, 14x14 256 -> 1024 11.2 / 11.0 (the last warpgroup's epilogue runs
/// alone, on half the warps).
/// Also where every block has one 64-wide unit with a long reduction (64 k-steps or more), although
/// a warpgroup then idles: one warpgroup issuing both m64 halves of each k16 step kept the tensor
/// cores busier than two issuing one each. Measured on an H100 (batch 32, 104 tiles of 128 x 64,
/// 72 k-steps): 7x7 3x3 512 -> 512 20.3 / 22.3 us, its stride-2 form from 14x14 21.4 / 22.1.
pub fn pingpong(units: usize, grid: usize, bn: usize, steps: usize) -> bool {
    let grid = grid.max(1);
    units >= 4 * grid || bn == 64 && units <= grid && steps >= 64
}

/// Rows per tile (a multiple of 16 from 96 up, below 128) for plain 128 x 64 ping-pong tiles where
/// every block has one unit: the fewest that keep the `m` rows of `n_tiles` column tiles within one
/// wave of `sms` blocks, so that more blocks share the work and each moves fewer bytes per k-step
/// (the A tile's rows past it are neither loaded nor stored; the MMAs still run 128 rows). None
/// where 128 rows already take every block a wave can hold, or it would take fewer than 96.
/// Measured on an H200 (batch 32, 72 k-steps, against 104 tiles of 128 rows): 7x7 3x3
/// 512 -> 512 in 112 tiles of 112 rows 18.7 against 19.6 us, its stride-2 form 18.6 against 19.3
/// (cuDNN 17.5 / 17.7; one of its kernels for these layers also runs 112 blocks).
pub fn short_rows(m: usize, n_tiles: usize, sms: usize) -> Option<usize> {
    let per_wave = sms / n_tiles.max(1);
    if per_wave == 0 {
        return None;
    }
    let tm = m.div_ceil(per_wave).div_ceil(16) * 16;
    (96..BM).contains(&tm).then_some(tm)
}

/// Whether the kernel for tiles of `bm` x `bn` (ping-pong or not) can load a fused residual into
/// the ring: not where a consumer holds 128 accumulators in two halves (ping-pong or 256-row
/// tiles, 128 wide), whose epilogue spilled with it (the kernel's RING_OK).
pub fn ring_fits(bm: usize, bn: usize, pp: bool) -> bool {
    !((pp || bm == 256) && bn == 128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpong_with_four_units_per_block_or_one_long_narrow_one() {
        assert!(pingpong(784, 132, 128, 4));
        assert!(pingpong(528, 132, 64, 1));
        assert!(!pingpong(527, 132, 128, 4));
        assert!(!pingpong(392, 132, 128, 8));
        assert!(!pingpong(1, 0, 128, 1));
        // one 64-wide unit per block with a long reduction (7x7 3x3 512 -> 512 at batch 32)
        assert!(pingpong(104, 132, 64, 72));
        assert!(!pingpong(104, 132, 64, 32));
        assert!(!pingpong(104, 132, 128, 72));
        assert!(!pingpong(133, 132, 64, 72));
    }

    #[test]
    fn short_rows_fill_one_wave() {
        // 7x7 3x3 512 -> 512 at batch 32: 104 tiles of 128 rows -> 112 of 112
        assert_eq!(short_rows(1568, 8, 132), Some(112));
        assert_eq!(1568usize.div_ceil(112) * 8, 112);
        // already a full wave at 128 rows, or a wave would need fewer than 96
        assert_eq!(short_rows(2048, 8, 128), None);
        assert_eq!(short_rows(784, 8, 132), None);
        assert_eq!(short_rows(1568, 8, 0), None);
        assert_eq!(short_rows(1568, 200, 132), None);
        // never more than one wave
        for m in [1000, 1400, 1568, 1600, 1700] {
            if let Some(tm) = short_rows(m, 8, 132) {
                assert!(m.div_ceil(tm) * 8 <= 132 && tm % 16 == 0, "{m}: {tm}");
            }
        }
    }

    #[test]
    fn wide_tiles_where_they_measured_faster() {
        // 56x56 64 -> 64 (1 k-step), 3x3 64 -> 64, 28x28 3x3 128 -> 128
        assert!(wide_tiles(100352, 64, 1, 64, false, 132));
        assert!(wide_tiles(100352, 64, 9, 64, false, 132));
        assert!(wide_tiles(25088, 128, 18, 128, false, 132));
        // too few tiles left (14x14 3x3 256 -> 256, 7x7 3x3 512), 128 wide and 4 k-steps, 256 wide
        assert!(!wide_tiles(6272, 256, 36, 128, false, 132));
        assert!(!wide_tiles(1568, 512, 72, 64, false, 132));
        assert!(!wide_tiles(100352, 128, 4, 128, false, 132));
        assert!(!wide_tiles(100352, 256, 1, 256, false, 132));
        // 28x28 3x3 128 -> 128 with a residual: 256 x 128 (see tile_width), never 256 x 64
        assert!(wide_tiles(25088, 128, 18, 128, true, 132));
        assert!(!wide_tiles(25088, 128, 18, 64, true, 132));
    }

    #[test]
    fn trio_tiles_where_they_measured_faster() {
        // (m, k, k-steps, residual, the current choice's units)
        let trio = |m, k, kt, res, cur| trio_tiles(m, k, kt, res, 132, cur);
        // 28x28 3x3 128 -> 128 (98 tiles of 256 x 128), with and without a residual
        assert!(trio(25088, 128, 18, false, 98));
        assert!(trio(25088, 128, 18, true, 98));
        // 28x28 512 -> 128 and 512 -> 256, 14x14 1024 -> 512, 14x14 256 -> 1024 (3 waves -> 2)
        assert!(trio(25088, 128, 8, false, 196));
        assert!(trio(25088, 256, 8, false, 392));
        assert!(trio(6272, 512, 16, false, 98));
        assert!(trio(6272, 1024, 4, false, 392));
        // the same with a residual (4 k-steps), 56x56 256 -> 512 s2 (3 waves -> 4), one k-step
        assert!(!trio(6272, 1024, 4, true, 392));
        assert!(!trio(25088, 512, 4, false, 392));
        assert!(!trio(100352, 256, 1, false, 784));
        // half a wave (14x14 3x3 256 -> 256), 64 wide, the 7x7 layers
        assert!(!trio(6272, 256, 36, false, 196));
        assert!(!trio(100352, 64, 9, false, 392));
        assert!(!trio(1568, 2048, 8, false, 208));
        assert!(!trio(1568, 512, 72, false, 104));
        assert!(!trio(0, 0, 0, false, 0));
    }

    #[test]
    fn tile_width_fills_the_machine() {
        // K = 64: one 64-wide column tile, nothing wasted
        assert_eq!(tile_width(100352, 64, 1, false, 132), 64);
        // many rows and K = 256: full-width tiles
        assert_eq!(tile_width(100352, 256, 1, false, 132), 256);
        // few rows: narrow tiles put more SMs to work
        assert_eq!(tile_width(1568, 512, 72, false, 132), 64);
        // 196 tiles 128 wide (two waves) against 392 64 wide (three): long reductions take the
        // wider tiles, short ones the narrower; with a residual, 98 tiles of 256 x 128 (one wave)
        assert_eq!(tile_width(25088, 128, 18, false, 132), 128);
        assert_eq!(tile_width(25088, 128, 8, false, 132), 64);
        assert_eq!(tile_width(25088, 128, 18, true, 132), 128);
        // 14x14 256 -> 1024 with a residual: 128 wide
        assert_eq!(tile_width(6272, 1024, 4, true, 132), 128);
    }

    #[test]
    fn the_ring_takes_the_residual_except_in_two_halves_of_128() {
        for (bm, bn, pp, fits) in [
            (128, 64, false, true),
            (128, 128, false, true),
            (128, 256, false, true),
            (128, 64, true, true),
            (128, 128, true, false),
            (256, 64, false, true),
            (256, 128, false, false),
            (192, 128, false, true),
        ] {
            assert_eq!(ring_fits(bm, bn, pp), fits, "{bm} x {bn}, ping-pong {pp}");
        }
    }
}
