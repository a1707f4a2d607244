//! The direct loops of lanes/fast.rs against the `Canon` paths of lanes.rs, which define the
//! results: loading, storing, rounding and converting every dtype with a direct path.

use max_graph::DType;

use super::{Arg, Lane, fast, load, store};

const FAST: [DType; 7] =
    [DType::Float32, DType::Float64, DType::BFloat16, DType::Float16, DType::Int32, DType::Int64, DType::Bool];

/// Bits that cover the awkward values: NaNs with payloads and signs, infinities, zeros,
/// subnormals, extremes, and whatever an xorshift gives.
fn raw_bytes(n: usize, size: usize, dtype: DType) -> Vec<u8> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut out = Vec::with_capacity(n * size);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let special: u64 = match (dtype, i % 7) {
            (DType::Float32, 0) => [0x7FC0_1234, 0xFF80_0001, 0x7F80_0000, 0x8000_0000, 0x0000_0001][i % 5],
            (DType::Float64, 0) => [0x7FF8_0000_0000_1234, 0xFFF0_0000_0000_0001, 0x8000_0000_0000_0000][i % 3],
            (DType::BFloat16, 0) => [0x7FC1, 0xFF81, 0x7F80, 0x8000, 0x0001][i % 5],
            (DType::Float16, 0) => [0x7E01, 0xFC01, 0x7C00, 0x8000, 0x0001, 0x7BFF][i % 6],
            // 0 and 1 only: `Canon` reads a bool, for which other bytes are undefined (the direct
            // loops read any nonzero byte as true).
            (DType::Bool, _) => x & 1,
            _ => x,
        };
        out.extend_from_slice(&special.to_le_bytes()[..size]);
    }
    out
}

/// Lanes equal value for value, NaNs equal to each other.
fn same_lane(a: &Lane, b: &Lane) -> bool {
    match (a, b) {
        (Lane::F(x), Lane::F(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        }
        _ => a == b,
    }
}

/// Lanes of every kind with the values that test conversions.
fn sources() -> Vec<Lane> {
    let f = vec![
        0.0,
        -0.0,
        1.5,
        -2.75,
        1e-40,
        3.4e38,
        3.5e38,
        -1e300,
        65519.0,
        65520.0,
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        2.5e9,
        -3.0e19,
        0.4999999,
    ];
    let i = vec![0, 1, -1, i64::MIN, i64::MAX, 1 << 40, -(1 << 31) - 1, 255, 70000];
    let u = vec![0, 1, u64::MAX, 1 << 63, (1 << 32) + 5, 65535];
    vec![Lane::F(f), Lane::I(i), Lane::U(u), Lane::B(vec![true, false, true])]
}

#[test]
fn loads_match_canon() {
    for d in FAST {
        let size = d.size_in_bytes();
        let bytes = raw_bytes(64, size, d);
        // Aligned copies of the bytes.
        let mut words = vec![0u64; 64];
        // SAFETY: 64 u64 hold 64 elements of at most 8 bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len()) };
        let ptr = words.as_ptr().cast::<u8>();
        for (off, stride, n) in [(0isize, 1isize, 64usize), (5, 0, 9), (3, 3, 20), (63, -1, 64), (10, -4, 3)] {
            let offsets: Vec<isize> = (0..n as isize).map(|i| off + i * stride).collect();
            let want = load(d, ptr, &offsets).unwrap();
            let mut got = Lane::empty(super::kind_of(d));
            // SAFETY: every offset is inside the 64 elements, and `words` is aligned.
            unsafe { fast::load_run(d, ptr, off, stride, n, &mut got) };
            assert!(same_lane(&got, &want), "{d} load {off} {stride}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn stores_rounds_and_converts_match_canon() {
    for d in FAST {
        for src in sources() {
            let arg = src.arg(src.len());
            let n = arg.len();
            let mut want = vec![0u64; n + 1];
            let mut got = vec![0u64; n + 1];
            store(d, arg, want.as_mut_ptr().cast(), 1).unwrap();
            // SAFETY: `got` holds n + 1 aligned elements of d.
            assert!(unsafe { fast::store(d, arg, got.as_mut_ptr().cast(), 1) });
            assert_eq!(got, want, "{d} store of {src:?}");
            let want = arg.convert(d).unwrap();
            let mut out = Lane::F(Vec::new());
            assert!(fast::convert(d, arg, &mut out));
            assert!(same_lane(&out, &want), "{d} convert of {src:?}: {out:?} vs {want:?}");
            if super::kind_of(d) == src.kind() {
                let mut rounded = src.clone();
                assert!(fast::round(d, &mut rounded));
                assert!(same_lane(&rounded, &want), "{d} round of {src:?}");
            }
        }
        // NaNs keep their sign and lose their payload.
        let nan = Lane::F(vec![f64::from_bits(0xFFF8_0000_0000_1234)]);
        let mut out = Lane::F(Vec::new());
        if d.is_float() && fast::convert(d, nan.arg(1), &mut out) {
            let Lane::F(v) = &out else { panic!("{d}: not a float lane") };
            assert!(v[0].is_nan() && v[0].is_sign_negative(), "{d}");
            let _: Arg = out.arg(1);
        }
    }
}
