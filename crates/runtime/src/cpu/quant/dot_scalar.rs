//! Portable integer dot products of GGUF weight rows with 8-bit activation rows (see
//! q8act.rs): the exact integer sum of each block (or sub-block) scaled in f32, one block after
//! the other. Every platform runs these; the SIMD tiles compute the same integers and differ
//! only in the order of the f32 sums (the tests use these as their oracle).

use super::blocks::Encoding;
use super::dot::{TileFn, k_scale_mins};
use super::q8act::QAct;

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// `sum_j lo(b[j]) * a[j] + hi(b[j]) * a[j + 16]` over 16 bytes of nibbles and 32 activations.
fn nibble_dot(qs: &[u8], a: &[i8]) -> i32 {
    qs.iter()
        .zip(&a[..16])
        .zip(&a[16..32])
        .map(|((&q, &x), &y)| (q & 0xF) as i32 * x as i32 + (q >> 4) as i32 * y as i32)
        .sum()
}

/// Dot product of one weight row (`k` values of `enc`) with activation row `r` of `a`.
pub fn row_dot(enc: Encoding, w: &[u8], a: &QAct, r: usize) -> f32 {
    let (qs, d, s) = (a.qs_row(r), a.d_row(r), a.sums_row(r));
    let (elems, bytes) = enc.block();
    let blocks = w.chunks_exact(bytes).zip(qs.chunks_exact(elems)).enumerate();
    match enc {
        Encoding::Q4_0 => blocks.fold(0.0, |acc, (i, (b, x))| {
            let idot = nibble_dot(&b[2..18], x) - 8 * s[i];
            acc + (f16_at(b, 0) * d[i]) * idot as f32
        }),
        Encoding::Q4_1 => blocks.fold(0.0, |acc, (i, (b, x))| {
            let idot = nibble_dot(&b[4..20], x);
            acc + (f16_at(b, 0) * d[i]) * idot as f32 + f16_at(b, 2) * (d[i] * s[i] as f32)
        }),
        Encoding::Q8_0 => blocks.fold(0.0, |acc, (i, (b, x))| {
            let idot: i32 = b[2..34].iter().zip(x).map(|(&q, &v)| q as i8 as i32 * v as i32).sum();
            acc + (f16_at(b, 0) * d[i]) * idot as f32
        }),
        Encoding::Q4K | Encoding::Q5K => blocks.fold(0.0, |acc, (i, (b, x))| {
            let (sc, mn) = k_scale_mins(b[4..16].try_into().unwrap_or([0; 12]));
            let five = enc == Encoding::Q5K;
            let (qh, ql) = if five { (&b[16..48], &b[48..176]) } else { (&b[..0], &b[16..144]) };
            let (mut isum, mut imin) = (0i32, 0i32);
            for j in 0..8 {
                let (c, shift) = (j / 2, 4 * (j % 2));
                let idot: i32 = (0..32)
                    .map(|l| {
                        let mut q = (ql[32 * c + l] >> shift) & 0xF;
                        if five {
                            q |= ((qh[l] >> j) & 1) << 4;
                        }
                        q as i32 * x[32 * j + l] as i32
                    })
                    .sum();
                isum += sc[j] as i32 * idot;
                imin += mn[j] as i32 * s[8 * i + j];
            }
            acc + (f16_at(b, 0) * d[i]) * isum as f32 - (f16_at(b, 2) * d[i]) * imin as f32
        }),
        Encoding::Q6K => blocks.fold(0.0, |acc, (i, (b, x))| {
            let mut isum = 0i32;
            for h in 0..2 {
                let (ql, qh) = (&b[64 * h..64 * h + 64], &b[128 + 32 * h..160 + 32 * h]);
                for p in 0..4 {
                    // Quarter p of this half: 32 values, two groups of 16 with their own scales.
                    for g in 0..2 {
                        let idot: i32 = (16 * g..16 * g + 16)
                            .map(|l| {
                                let lo = (ql[l + 32 * (p % 2)] >> (4 * (p / 2))) & 0xF;
                                let q = lo | (((qh[l] >> (2 * p)) & 3) << 4);
                                q as i32 * x[128 * h + 32 * p + l] as i32
                            })
                            .sum();
                        let grp = 8 * h + 2 * p + g;
                        isum += b[192 + grp] as i8 as i32 * (idot - 32 * s[16 * i + grp]);
                    }
                }
            }
            acc + (f16_at(b, 208) * d[i]) * isum as f32
        }),
    }
}

/// `out[x * 4 + i]`: row_dot of weight row `i` (of `W`, `row_bytes` apart in `w`) with
/// activation row `r0 + x` (of `R`).
fn tile<const E: u8, const W: usize, const R: usize>(
    w: &[u8],
    row_bytes: usize,
    a: &QAct,
    r0: usize,
    out: &mut [f32; 16],
) {
    let enc = ENCODINGS[E as usize];
    for x in 0..R {
        for i in 0..W {
            out[x * 4 + i] = row_dot(enc, &w[i * row_bytes..(i + 1) * row_bytes], a, r0 + x);
        }
    }
}

const ENCODINGS: [Encoding; 6] =
    [Encoding::Q4_0, Encoding::Q4_1, Encoding::Q8_0, Encoding::Q4K, Encoding::Q5K, Encoding::Q6K];

/// The scalar tiles of `enc`: `[W = 4, W = 1][R - 1]`.
pub fn tiles(enc: Encoding) -> [[TileFn; 4]; 2] {
    macro_rules! table {
        ($e:literal) => {
            [
                [tile::<$e, 4, 1>, tile::<$e, 4, 2>, tile::<$e, 4, 3>, tile::<$e, 4, 4>],
                [tile::<$e, 1, 1>, tile::<$e, 1, 2>, tile::<$e, 1, 3>, tile::<$e, 1, 4>],
            ]
        };
    }
    match enc {
        Encoding::Q4_0 => table!(0),
        Encoding::Q4_1 => table!(1),
        Encoding::Q8_0 => table!(2),
        Encoding::Q4K => table!(3),
        Encoding::Q5K => table!(4),
        Encoding::Q6K => table!(5),
    }
}
