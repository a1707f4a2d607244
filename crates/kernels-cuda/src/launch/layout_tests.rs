//! The host side of the layout launches, checked without a GPU: random views are planned
//! (merging, splitting, tiled-transpose choice, widening, pad merging) and every planned
//! launch is emulated on host memory exactly as its kernel indexes (same geometry structs,
//! same arithmetic), then compared with a naive strided copy. The emulator also checks that
//! every access is aligned to its width and stays inside its buffer.

use super::*;

/// xorshift64*: deterministic test data without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A 16-byte aligned byte buffer standing in for device memory.
struct Mem {
    words: Vec<u128>,
    len: usize,
}
impl Mem {
    fn new(len: usize, rng: &mut Rng) -> Mem {
        let words = (0..len.div_ceil(16).max(1)).map(|_| (rng.next() as u128) << 64 | rng.next() as u128).collect();
        Mem { words, len }
    }
    fn base(&self) -> u64 {
        self.words.as_ptr() as u64
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: the words hold at least len bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }
}

/// The buffers an emulated launch may touch: (base, len) pairs.
struct Bounds(Vec<(u64, usize)>);
impl Bounds {
    fn check(&self, addr: u64, width: usize) {
        assert_eq!(addr % width as u64, 0, "access of {width} bytes at a misaligned address");
        let ok = self.0.iter().any(|&(b, l)| addr >= b && addr + width as u64 <= b + l as u64);
        assert!(ok, "access of {width} bytes outside every buffer");
    }
}

fn move_elem(b: &Bounds, from: u64, to: u64, width: usize) {
    b.check(from, width);
    b.check(to, width);
    // SAFETY: both ranges were checked to lie inside live test buffers.
    unsafe { std::ptr::copy(from as *const u8, to as *mut u8, width) };
}

fn at(base: u64, off: i64, width: usize) -> u64 {
    (base as i128 + off as i128 * width as i128) as u64
}

/// Runs the plan the way the kernels index.
fn emulate(plan: &[Launch], b: &Bounds) {
    for l in plan {
        match *l {
            Launch::Copy { elem, src, dst, n, geo } => {
                assert!(geo.rank as usize <= MAX_RANK && [1, 2, 4, 8, 16].contains(&elem));
                for i in 0..n {
                    let (mut rest, mut so, mut dof) = (i, 0i64, 0i64);
                    for d in (0..geo.rank as usize).rev() {
                        let e = geo.shape[d] as u64;
                        let c = (rest % e) as i64;
                        rest /= e;
                        so += c * geo.src[d];
                        dof += c * geo.dst[d];
                    }
                    move_elem(b, at(src, so, elem), at(dst, dof, elem), elem);
                }
            }
            Launch::Transpose { elem, src, dst, geo } => {
                assert!(geo.brank as usize <= MAX_BATCH && geo.src_r.abs() == 1);
                for bt in 0..geo.nbatch {
                    let (mut rest, mut so, mut dof) = (bt, 0i64, 0i64);
                    for d in (0..geo.brank as usize).rev() {
                        let c = rest % geo.bshape[d];
                        rest /= geo.bshape[d];
                        so += c * geo.bsrc[d];
                        dof += c * geo.bdst[d];
                    }
                    for r in 0..geo.rows {
                        for c in 0..geo.cols {
                            let (s, t) = (so + r * geo.src_r + c * geo.src_c, dof + r * geo.dst_r + c * geo.dst_c);
                            move_elem(b, at(src, s, elem), at(dst, t, elem), elem);
                        }
                    }
                }
            }
            Launch::Pad { elem, src, value, dst, n, geo } => {
                assert!(geo.rank as usize <= MAX_RANK);
                for i in 0..n {
                    let (mut rest, mut so, mut inside) = (i, 0i64, true);
                    for d in (0..geo.rank as usize).rev() {
                        let e = geo.shape[d] as u64;
                        let k = (rest % e) as i64 - geo.lo[d];
                        rest /= e;
                        inside = inside && k >= 0 && k < geo.input[d];
                        so += k * geo.src[d];
                    }
                    let from = if inside { at(src, so, elem) } else { value };
                    move_elem(b, from, at(dst, i as i64, elem), elem);
                }
            }
        }
    }
}

/// The reference: element c of `shape` from src + sum(c * sa) to dst + sum(c * sb).
fn naive(src: u64, sa: &[isize], dst: u64, sb: &[isize], shape: &[usize], elem: usize, b: &Bounds) {
    let n: usize = shape.iter().product();
    for i in 0..n {
        let (mut rest, mut so, mut dof) = (i, 0i64, 0i64);
        for d in (0..shape.len()).rev() {
            let c = (rest % shape[d]) as i64;
            rest /= shape[d];
            so += c * sa[d] as i64;
            dof += c * sb[d] as i64;
        }
        move_elem(b, at(src, so, elem), at(dst, dof, elem), elem);
    }
}

/// A random source view: a contiguous base of random extents, permuted, with some dims
/// reversed, stepped or broadcast, at a random element offset. Returns (shape, strides,
/// offset of element 0, elements the buffer needs).
fn random_view(rng: &mut Rng, rank: usize, big: bool) -> (Vec<usize>, Vec<isize>, isize, usize) {
    let shape: Vec<usize> = loop {
        let s: Vec<usize> = (0..rank)
            .map(|_| match rng.below(6) {
                0 => 1,
                1 | 2 if big => 8 + rng.below(40),
                _ => 1 + rng.below(5),
            })
            .collect();
        // Small enough to emulate quickly (with room for steps of 2).
        if s.iter().product::<usize>() << rank.min(3) <= 1 << 16 {
            break s;
        }
    };
    let mut step = vec![1isize; rank];
    for s in step.iter_mut() {
        if rng.below(4) == 0 {
            *s = if rng.below(2) == 0 { -1 } else { 2 };
        }
    }
    // View dim d walks base dim perm[d], which is long enough for its steps.
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, rng.below(i + 1));
    }
    let mut base = vec![1usize; rank];
    for d in 0..rank {
        base[perm[d]] = shape[d] * step[d].unsigned_abs();
    }
    let contiguous = {
        let mut s = vec![0isize; rank];
        let mut acc = 1isize;
        for d in (0..rank).rev() {
            s[d] = acc;
            acc *= base[d] as isize;
        }
        s
    };
    let total: usize = base.iter().product::<usize>().max(1);
    let mut strides: Vec<isize> = (0..rank).map(|d| contiguous[perm[d]] * step[d]).collect();
    for d in 0..rank {
        if shape[d] > 1 && rng.below(8) == 0 {
            strides[d] = 0;
        }
    }
    let lo: isize = shape.iter().zip(&strides).map(|(&d, &s)| ((d as isize - 1) * s).min(0)).sum();
    let pad = rng.below(3) as isize;
    (shape, strides, pad - lo, total + 2 * pad as usize + 1)
}

fn contiguous(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for d in (0..shape.len()).rev() {
        s[d] = acc;
        acc *= shape[d].max(1) as isize;
    }
    s
}

#[test]
fn planned_copies_match_a_naive_strided_copy() {
    let mut rng = Rng(0x9E3779B97F4A7C15);
    let mut kinds = [0usize; 3];
    for case in 0..3000 {
        let rank = rng.below(11);
        let elem = [1, 2, 4, 8][rng.below(4)];
        let (shape, sa, off, need) = random_view(&mut rng, rank, case % 4 == 0);
        let n: usize = shape.iter().product();
        // The destination: contiguous, or a block of a bigger array (as concat places inputs).
        let (outer, dst_off) = if rng.below(2) == 0 {
            (shape.clone(), 0)
        } else {
            let grown: Vec<usize> = shape.iter().map(|d| d + rng.below(3)).collect();
            let st = contiguous(&grown);
            let o: usize = grown.iter().zip(&shape).zip(&st).map(|((g, d), s)| (g - d) * *s as usize).sum();
            (grown, o)
        };
        let sb = contiguous(&outer);
        let dst_len: usize = outer.iter().product::<usize>() + dst_off;
        let src = Mem::new(need * elem, &mut rng);
        let (got, want) = (Mem::new(dst_len * elem, &mut rng), Mem::new(dst_len * elem, &mut rng));
        let mut want_bytes = got.bytes().to_vec();
        let _ = &mut want_bytes;
        // SAFETY: same length buffers.
        unsafe { std::ptr::copy(got.base() as *const u8, want.base() as *mut u8, dst_len * elem) };
        let bounds = Bounds(vec![(src.base(), src.len), (got.base(), got.len), (want.base(), want.len)]);
        let s0 = at(src.base(), off as i64, elem);
        let mut plan = vec![];
        plan_copy(&mut plan, (s0, &sa), (at(got.base(), dst_off as i64, elem), &sb), &shape, elem).unwrap();
        for l in &plan {
            kinds[match l {
                Launch::Copy { elem: 16, .. } => 1,
                Launch::Transpose { .. } => 2,
                _ => 0,
            }] += 1;
        }
        emulate(&plan, &bounds);
        naive(s0, &sa, at(want.base(), dst_off as i64, elem), &sb, &shape, elem, &bounds);
        assert!(got.bytes() == want.bytes(), "case {case}: shape {shape:?} strides {sa:?} elem {elem} ({n} elements)");
    }
    assert!(kinds.iter().all(|k| *k > 20), "paths exercised: {kinds:?}");
}

#[test]
fn transposes_take_the_tiled_path_and_contiguous_copies_the_wide_one() {
    let t = |shape: &[usize], sa: &[isize], elem: usize| {
        let mut plan = vec![];
        plan_copy(&mut plan, (0, sa), (0, &contiguous(shape)), shape, elem).unwrap();
        plan
    };
    // [B, H, S, D] -> [B, H, D, S]: batch dims merged, one tiled launch.
    let p = t(&[2, 3, 64, 40], &[3 * 64 * 40, 64 * 40, 1, 40], 2);
    assert!(
        matches!(p[..], [Launch::Transpose { geo, .. }] if geo.brank == 1 && geo.nbatch == 6 && geo.rows == 64 && geo.cols == 40)
    );
    // [B, S, H, D] -> [B, H, S, D] with D * 2 bytes a multiple of 16: 16-byte elements.
    let p = t(&[2, 4, 33, 64], &[33 * 4 * 64, 64, 4 * 64, 1], 2);
    assert!(matches!(p[..], [Launch::Copy { elem: 16, geo, .. }] if geo.rank == 4 && geo.shape[3] == 8));
    // A plain contiguous copy is one dim of 16-byte elements; an odd size stays at its width.
    assert!(matches!(t(&[5, 8], &[8, 1], 4)[..], [Launch::Copy { elem: 16, n: 10, .. }]));
    assert!(matches!(t(&[5, 3], &[3, 1], 4)[..], [Launch::Copy { elem: 4, n: 15, .. }]));
    // Misaligned bases do not widen.
    let mut plan = vec![];
    plan_copy(&mut plan, (4, &[1]), (0, &[1]), &[64], 4).unwrap();
    assert!(matches!(plan[..], [Launch::Copy { elem: 4, .. }]));
    // More than 8 dims that cannot merge: split along the leading one.
    let shape = [2usize; 10];
    let sa: Vec<isize> = (0..10).map(|d| if d % 2 == 0 { 1 << (9 - d) } else { -(1 << (9 - d)) }).collect();
    assert_eq!(t(&shape, &sa, 1).len(), 4);
}

#[test]
fn planned_pads_match_numpy_style_padding() {
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    for case in 0..1500 {
        let rank = 1 + rng.below(10);
        let elem = [1, 2, 4, 8][rng.below(4)];
        let (in_shape, sa, off, need) = random_view(&mut rng, rank, false);
        let in_shape: Vec<usize> = in_shape.iter().map(|d| if rng.below(10) == 0 { 0 } else { *d }).collect();
        let lo: Vec<usize> = (0..rank).map(|_| if rng.below(2) == 0 { 0 } else { rng.below(3) }).collect();
        let hi: Vec<usize> = (0..rank).map(|_| if rng.below(2) == 0 { 0 } else { rng.below(3) }).collect();
        let out_shape: Vec<usize> = (0..rank).map(|d| in_shape[d] + lo[d] + hi[d]).collect();
        let n: usize = out_shape.iter().product();
        let src = Mem::new(need * elem, &mut rng);
        let value = Mem::new(elem, &mut rng);
        let got = Mem::new(n * elem, &mut rng);
        let bounds = Bounds(vec![(src.base(), src.len), (value.base(), value.len), (got.base(), got.len)]);
        let s0 = at(src.base(), off as i64, elem);
        let plan = plan_pad((s0, &sa, &in_shape), value.base(), (got.base(), &out_shape), &lo, elem).unwrap();
        emulate(&plan, &bounds);
        // The reference, element by element.
        let mut want = vec![0u8; n * elem];
        let ost = contiguous(&out_shape);
        for i in 0..n {
            let mut inside = true;
            let mut so = 0i64;
            for d in 0..rank {
                let c = (i / ost[d] as usize) % out_shape[d];
                let k = c as i64 - lo[d] as i64;
                inside &= k >= 0 && k < in_shape[d] as i64;
                so += k * sa[d] as i64;
            }
            let from = if inside { at(s0, so, elem) } else { value.base() };
            // SAFETY: inside the source view or the value buffer.
            let bytes = unsafe { std::slice::from_raw_parts(from as *const u8, elem) };
            want[i * elem..(i + 1) * elem].copy_from_slice(bytes);
        }
        assert!(got.bytes() == &want[..], "case {case}: in {in_shape:?} lo {lo:?} hi {hi:?} strides {sa:?}");
    }
}
