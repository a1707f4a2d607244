//! single.rs against the f64 lanes bit for bit (every op, the float types and bool, broadcasts,
//! strided inputs, special values), its conversions against cast.rs, and vmath against libm.
//! The numpy parity tests are in tests/test_elementwise.py.

use half::{bf16, f16};
use max_graph::attrs::{Attr, Attrs};
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, DeviceRef, Dim, TensorType, Type};

use super::conv::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, f64_to_f32_odd, round_bf16, round_f16};
use crate::cpu::cast::{self, Canon, Elem};
use crate::cpu::elementwise::{Reader, run, run_generic, vmath};
use crate::shared::{Fused, Operand};
use crate::{Buffer, Device};

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An f32 with a random sign, an exponent in `lo..=hi` and a mantissa with a random number
    /// of trailing zeros (so halfway cases of the narrow types come up).
    fn f32_near(&mut self, lo: i32, hi: i32) -> f32 {
        let e = lo + (self.next() % (hi - lo + 1) as u64) as i32;
        let zeros = self.next() % 24;
        let m = (self.next() as u32 & 0x7F_FFFF) >> zeros << zeros;
        let sign = (self.next() as u32 & 1) << 31;
        f32::from_bits(sign | (((e + 127).clamp(0, 254) as u32) << 23) | m)
    }
}

#[test]
fn narrow_roundings_match_cast_rs() {
    let mut rng = Rng(1);
    let check = |x: f32| {
        let want = bf16_to_f32(bf16::from_canon(Canon::F(x as f64)).to_bits());
        assert_eq!(round_bf16(x).to_bits(), want.to_bits(), "bf16 of {x:e} ({:#x})", x.to_bits());
        let want = f16_to_f32(f16::from_canon(Canon::F(x as f64)).to_bits());
        assert_eq!(round_f16(x).to_bits(), want.to_bits(), "f16 of {x:e} ({:#x})", x.to_bits());
    };
    for x in [0.0, -0.0, f32::INFINITY, -f32::INFINITY, f32::NAN, -f32::NAN, f32::MAX, f32::MIN_POSITIVE, 65504.0] {
        check(x);
    }
    for x in [65519.99, 65520.0, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-45, f32::from_bits(0x7FA0_0001)] {
        check(x);
        check(-x);
    }
    for _ in 0..2_000_000 {
        check(f32::from_bits(rng.next() as u32));
        check(rng.f32_near(-30, 17));
    }
}

#[test]
fn narrow_storage_round_trips() {
    for h in 0..=u16::MAX {
        let x = f16::from_bits(h);
        let w = f16_to_f32(h);
        if x.is_nan() {
            assert!(w.is_nan());
            assert_eq!(f32_to_f16(w), (h & 0x8000) | 0x7E00);
        } else {
            assert_eq!(w.to_bits(), x.to_f32().to_bits(), "f16 {h:#x}");
            assert_eq!(f32_to_f16(w), h, "f16 {h:#x}");
        }
        let w = bf16_to_f32(h);
        if w.is_nan() {
            assert_eq!(f32_to_bf16(w), (h & 0x8000) | 0x7FC0);
        } else {
            assert_eq!(w.to_bits(), bf16::from_bits(h).to_f32().to_bits(), "bf16 {h:#x}");
            assert_eq!(f32_to_bf16(w), h, "bf16 {h:#x}");
        }
    }
}

#[test]
fn round_to_odd_matches_cast_rs() {
    let mut rng = Rng(2);
    for _ in 0..2_000_000 {
        let bits = rng.next();
        let near = rng.f32_near(-150, 128) as f64 * (1.0 + rng.uniform(-1e-7, 1e-7));
        for v in [f64::from_bits(bits), near, f64::MAX, -1e39, 3.5e38, 1e-46, -0.0] {
            let (got, want) = (f64_to_f32_odd(v), cast::f64_to_f32_odd(v));
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{v:e}");
        }
    }
}

fn ulps(a: f64, b: f64) -> u64 {
    if a.is_nan() && b.is_nan() || a == b {
        return 0;
    }
    let key = |x: f64| if x.is_sign_negative() { -((x.to_bits() & !(1 << 63)) as i64) } else { x.to_bits() as i64 };
    key(a).abs_diff(key(b))
}

/// Largest difference from the reference in units in the last place, over `xs`.
fn worst(f: impl Fn(f64) -> f64, reference: impl Fn(f64) -> f64, xs: impl Iterator<Item = f64>) -> (u64, f64) {
    xs.map(|x| (ulps(f(x), reference(x)), x)).fold((0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
}

#[test]
fn vector_math_is_within_an_ulp_or_two_of_libm() {
    let mut rng = Rng(3);
    let mut xs = |lo: f64, hi: f64| (0..400_000).map(|_| rng.uniform(lo, hi)).collect::<Vec<_>>();
    let (wide, unit, tiny) = (xs(-746.0, 710.0), xs(-2.0, 2.0), xs(-1e-7, 1e-7));
    let all = || wide.iter().chain(&unit).chain(&tiny).copied();
    assert!(worst(vmath::exp, f64::exp, all()).0 <= 1, "exp {:?}", worst(vmath::exp, f64::exp, all()));
    let small = || unit.iter().chain(&tiny).map(|x| x * 10.0);
    assert!(worst(vmath::tanh, f64::tanh, small()).0 <= 2, "tanh {:?}", worst(vmath::tanh, f64::tanh, small()));
    assert!(worst(vmath::erf, libm::erf, small()).0 <= 2, "erf {:?}", worst(vmath::erf, libm::erf, small()));
    let sigmoid = |x: f64| if x >= 0.0 { 1.0 / (1.0 + (-x).exp()) } else { x.exp() / (1.0 + x.exp()) };
    assert!(worst(vmath::sigmoid, sigmoid, small()).0 <= 2, "sigmoid {:?}", worst(vmath::sigmoid, sigmoid, small()));
    for (x, want) in [
        (0.0, 1.0),
        (-0.0, 1.0),
        (f64::INFINITY, f64::INFINITY),
        (-f64::INFINITY, 0.0),
        (709.8, f64::INFINITY),
        (-745.2, 0.0),
    ] {
        assert_eq!(vmath::exp(x), want, "exp({x})");
    }
    assert!(vmath::exp(f64::NAN).is_nan() && vmath::tanh(f64::NAN).is_nan() && vmath::erf(f64::NAN).is_nan());
    assert!(ulps(vmath::exp(-744.0), (-744f64).exp()) <= 1 && vmath::exp(-744.0) > 0.0);
    for (x, t, e) in [(f64::INFINITY, 1.0, 1.0), (-f64::INFINITY, -1.0, -1.0), (30.0, 1.0, 1.0), (-30.0, -1.0, -1.0)] {
        assert_eq!((vmath::tanh(x), vmath::erf(x)), (t, e), "{x}");
    }
    assert!(vmath::tanh(-0.0).is_sign_negative() && vmath::erf(-0.0).is_sign_negative());
    // Rounded to float32 the results are libm's (a difference needs an f64 result within an ulp
    // of a float32 rounding boundary, about one in 2^28).
    let f32s: Vec<f64> = (0..1_000_000).map(|_| rng.uniform(-12.0, 12.0) as f32 as f64).collect();
    for (name, f, g) in [
        ("exp", vmath::exp as fn(f64) -> f64, f64::exp as fn(f64) -> f64),
        ("tanh", vmath::tanh, f64::tanh),
        ("erf", vmath::erf, libm::erf),
    ] {
        let diff = f32s.iter().filter(|&&x| f(x) as f32 != g(x) as f32).count();
        assert_eq!(diff, 0, "{name}: {diff} float32 results differ from libm's");
    }
}

fn tensor(d: DType, shape: &[usize]) -> Type {
    Type::Tensor(TensorType::new(d, shape.iter().map(|&n| Dim::stat(n as i64)).collect(), DeviceRef::CPU))
}

fn op(kind: OpKind) -> Op {
    Op { kind, attrs: Attrs::new() }
}

fn gelu(mode: &str) -> Op {
    Op { kind: OpKind::Gelu, attrs: Attrs::new().with("approximate", Attr::Str(mode.into())) }
}

/// Values with the awkward ones mixed in: NaNs with payloads, infinities, signed zeros, huge,
/// tiny and halfway values, and integers (for floor, round and mod).
fn value(rng: &mut Rng) -> f64 {
    match rng.next() % 16 {
        0 => [f64::NAN, -f64::NAN, f32::from_bits(0x7FA1_2345) as f64, f64::INFINITY, -f64::INFINITY]
            [rng.next() as usize % 5],
        1 => [0.0, -0.0, 1e30, -3e38, 1e-40, 2.5, -0.5, 65520.0][rng.next() as usize % 8],
        2 => (rng.next() % 9) as f64 - 4.0,
        3 => rng.f32_near(-30, 17) as f64,
        _ => rng.uniform(-4.0, 4.0),
    }
}

fn buffer(d: DType, shape: &[usize], rng: &mut Rng) -> Buffer {
    let dims: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
    let b = Buffer::empty(d, &dims, &Device::Cpu).unwrap();
    let n = b.num_elements();
    // SAFETY: the fresh host buffer holds n elements of d.
    unsafe {
        match d {
            DType::Float32 => (0..n).for_each(|i| *(b.addr() as *mut f32).add(i) = value(rng) as f32),
            DType::BFloat16 => {
                (0..n).for_each(|i| *(b.addr() as *mut bf16).add(i) = bf16::from_canon(Canon::F(value(rng))))
            }
            DType::Float16 => {
                (0..n).for_each(|i| *(b.addr() as *mut f16).add(i) = f16::from_canon(Canon::F(value(rng))))
            }
            // Any nonzero byte is true.
            DType::Bool => (0..n).for_each(|i| *(b.addr() as *mut u8).add(i) = [0, 1, 1, 2][rng.next() as usize % 4]),
            _ => unreachable!("test dtype"),
        }
    }
    b
}

/// A view of `b` (2-D) with its axes swapped.
fn transposed(b: &Buffer) -> Buffer {
    let (s, item) = (b.shape(), b.dtype().size_in_bytes() as isize);
    let strides = [item, s[1] as isize * item];
    // SAFETY: the view reaches exactly the elements of `b`, which it keeps alive.
    unsafe { Buffer::from_external(b.addr(), b.dtype(), &[s[1], s[0]], &strides, Device::Cpu, Box::new(b.clone())) }
        .unwrap()
}

/// The buffer's bytes, with the sign of every NaN cleared: IEEE 754 leaves the sign of a NaN
/// that arithmetic produces unspecified, and x86 gives the first operand's, an order the
/// compiler picks (x * NaN may be either sign in either path).
fn bytes(b: &Buffer) -> Vec<u8> {
    // SAFETY: b is a contiguous host buffer of nbytes bytes.
    let mut v = unsafe { std::slice::from_raw_parts(b.addr() as *const u8, b.nbytes()) }.to_vec();
    match b.dtype() {
        DType::Float32 => v.chunks_mut(4).for_each(|c| {
            if f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_nan() {
                c[3] &= 0x7F;
            }
        }),
        DType::BFloat16 | DType::Float16 => v.chunks_mut(2).for_each(|c| {
            let h = u16::from_le_bytes([c[0], c[1]]);
            let nan =
                if b.dtype() == DType::Float16 { f16::from_bits(h).is_nan() } else { bf16::from_bits(h).is_nan() };
            if nan {
                c[1] &= 0x7F;
            }
        }),
        _ => {}
    }
    v
}

/// Runs `group` through single.rs (which must take it) and through the f64 lanes; the results
/// must be the same bytes.
fn same(group: &Fused, inputs: &[Buffer], what: &str) {
    let t = group.nodes.last().unwrap().2.tensor().unwrap().clone();
    let shape: Vec<i64> = t.shape.iter().map(|d| d.as_static().unwrap()).collect();
    let (a, b) =
        (Buffer::empty(t.dtype, &shape, &Device::Cpu).unwrap(), Buffer::empty(t.dtype, &shape, &Device::Cpu).unwrap());
    let readers: Vec<Reader> = inputs.iter().map(|x| Reader::new(x, a.shape()).unwrap()).collect();
    assert!(super::Single::new(group, &readers, &a).is_some(), "{what}: not taken by single.rs");
    run(group, inputs, &a).unwrap();
    run_generic(group, inputs, &b).unwrap();
    let (x, y) = (bytes(&a), bytes(&b));
    if x != y {
        let k = t.dtype.size_in_bytes();
        let i = x.iter().zip(&y).position(|(p, q)| p != q).unwrap() / k;
        let first = |b: &[u8]| b[i * k..(i + 1) * k].to_vec();
        let input = inputs.iter().find(|b| b.num_elements() > i).map(|b| {
            // SAFETY: element i is inside b (contiguous or not, its address is computed).
            let at = b.addr() as usize + i * b.dtype().size_in_bytes();
            unsafe { std::slice::from_raw_parts(at as *const u8, b.dtype().size_in_bytes()) }.to_vec()
        });
        panic!("{what}: element {i} differs: {:x?} (single) vs {:x?}; input bytes {input:x?}", first(&x), first(&y));
    }
}

const FLOATS: [DType; 3] = [DType::Float32, DType::BFloat16, DType::Float16];

fn unary_ops() -> Vec<Op> {
    use OpKind::*;
    let mut ops: Vec<Op> = [
        Abs, Negate, Exp, Log, Log1p, Sqrt, Rsqrt, Sin, Cos, Tanh, Acos, Atanh, Erf, Floor, Round, Trunc, Relu,
        Sigmoid, Silu, Cast,
    ]
    .into_iter()
    .map(op)
    .collect();
    ops.extend(["none", "tanh", "quick"].map(gelu));
    ops
}

#[test]
fn every_unary_op_matches_the_f64_lanes() {
    let mut rng = Rng(4);
    for d in FLOATS {
        for n in [1, 1023, 1025, 5000] {
            let x = buffer(d, &[n], &mut rng);
            for o in unary_ops() {
                let g = Fused { nodes: vec![(o.clone(), vec![Operand::Input(0)], tensor(d, &[n]))] };
                same(&g, std::slice::from_ref(&x), &format!("{} {d} [{n}]", o.kind.name()));
            }
            for (k, to) in [(OpKind::IsNan, DType::Bool), (OpKind::IsInf, DType::Bool), (OpKind::Cast, DType::Bool)] {
                let g = Fused { nodes: vec![(op(k), vec![Operand::Input(0)], tensor(to, &[n]))] };
                same(&g, std::slice::from_ref(&x), &format!("{} {d} [{n}]", k.name()));
            }
            for to in FLOATS {
                let g = Fused { nodes: vec![(op(OpKind::Cast), vec![Operand::Input(0)], tensor(to, &[n]))] };
                same(&g, std::slice::from_ref(&x), &format!("cast {d} -> {to}"));
            }
        }
    }
}

#[test]
fn every_binary_op_matches_the_f64_lanes_with_broadcasts() {
    use OpKind::*;
    let mut rng = Rng(5);
    let shapes: [(&[usize], &[usize], &[usize]); 5] = [
        (&[37, 70], &[37, 70], &[37, 70]),
        (&[37, 70], &[70], &[37, 70]),
        (&[37, 1], &[1, 70], &[37, 70]),
        (&[1], &[3, 700], &[3, 700]),
        (&[5, 1, 9], &[4, 1], &[5, 4, 9]),
    ];
    for d in FLOATS {
        for (sa, sb, so) in shapes {
            let (a, b) = (buffer(d, sa, &mut rng), buffer(d, sb, &mut rng));
            for k in [Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Maximum, Minimum, Equal, NotEqual, Greater, GreaterEqual]
            {
                let to = if matches!(k, Equal | NotEqual | Greater | GreaterEqual) { DType::Bool } else { d };
                let g = Fused { nodes: vec![(op(k), vec![Operand::Input(0), Operand::Input(1)], tensor(to, so))] };
                same(&g, &[a.clone(), b.clone()], &format!("{} {d} {sa:?} {sb:?}", k.name()));
            }
        }
    }
    // Operands of another float type than the result compute through f64.
    let (a, b) = (buffer(DType::BFloat16, &[300], &mut rng), buffer(DType::Float32, &[300], &mut rng));
    for k in [Add, Sub, Mul, Div] {
        let g =
            Fused { nodes: vec![(op(k), vec![Operand::Input(0), Operand::Input(1)], tensor(DType::Float16, &[300]))] };
        same(&g, &[a.clone(), b.clone()], &format!("{} bf16 f32 -> f16", k.name()));
    }
}

#[test]
fn bool_ops_and_where_match_the_f64_lanes() {
    use OpKind::*;
    let mut rng = Rng(6);
    let (p, q) = (buffer(DType::Bool, &[40, 33], &mut rng), buffer(DType::Bool, &[33], &mut rng));
    for k in
        [LogicalAnd, LogicalOr, LogicalXor, Add, Sub, Mul, Maximum, Minimum, Equal, NotEqual, Greater, GreaterEqual]
    {
        let g =
            Fused { nodes: vec![(op(k), vec![Operand::Input(0), Operand::Input(1)], tensor(DType::Bool, &[40, 33]))] };
        same(&g, &[p.clone(), q.clone()], &format!("{} bool", k.name()));
    }
    for k in [LogicalNot, Abs, Relu, Cast] {
        let g = Fused { nodes: vec![(op(k), vec![Operand::Input(0)], tensor(DType::Bool, &[40, 33]))] };
        same(&g, std::slice::from_ref(&p), &format!("{} bool", k.name()));
    }
    for d in FLOATS {
        let g = Fused { nodes: vec![(op(Cast), vec![Operand::Input(0)], tensor(d, &[40, 33]))] };
        same(&g, std::slice::from_ref(&p), &format!("cast bool -> {d}"));
        let (x, y) = (buffer(d, &[33], &mut rng), buffer(d, &[1], &mut rng));
        let g = Fused { nodes: vec![(op(Where), (0..3).map(Operand::Input).collect(), tensor(d, &[40, 33]))] };
        same(&g, &[p.clone(), x.clone(), y.clone()], &format!("where {d}"));
        same(&g, &[q.clone(), transposed(&buffer(d, &[33, 40], &mut rng)), y], &format!("where {d} transposed"));
    }
    let g = Fused { nodes: vec![(op(Where), (0..3).map(Operand::Input).collect(), tensor(DType::Bool, &[40, 33]))] };
    same(&g, &[p.clone(), q.clone(), p], "where bool");
}

/// A fused chain: relu(gelu(x * w + b) - x / c) > x ? ... with scalar nodes, strided inputs
/// and sizes around the chunk and task boundaries.
#[test]
fn fused_chains_match_the_f64_lanes() {
    use OpKind::*;
    use Operand::{Input as I, Node as N};
    let mut rng = Rng(7);
    for d in FLOATS {
        for (m, n) in [(1, 1), (1, 1023), (3, 1025), (129, 1025), (64, 1024)] {
            let t = tensor(d, &[m, n]);
            let g = Fused {
                nodes: vec![
                    (op(Mul), vec![I(0), I(1)], t.clone()),
                    (op(Add), vec![N(0), I(2)], t.clone()),
                    (gelu("tanh"), vec![N(1)], t.clone()),
                    (op(Mul), vec![I(3), I(3)], tensor(d, &[1])),
                    (op(Div), vec![I(0), N(3)], t.clone()),
                    (op(Sub), vec![N(2), N(4)], t.clone()),
                    (op(Relu), vec![N(5)], t.clone()),
                    (op(Greater), vec![N(6), I(0)], tensor(DType::Bool, &[m, n])),
                    (op(Exp), vec![I(0)], t.clone()),
                    (op(Where), vec![N(7), N(8), N(6)], t.clone()),
                    (op(Silu), vec![N(9)], t.clone()),
                ],
            };
            let x = buffer(d, &[m, n], &mut rng);
            let w = transposed(&buffer(d, &[n, m], &mut rng));
            let (b, c) = (buffer(d, &[n], &mut rng), buffer(d, &[1], &mut rng));
            same(&g, &[x, w, b, c], &format!("chain {d} [{m}, {n}]"));
        }
    }
    // One big enough for several tasks, with a float32 result from bfloat16 inputs.
    let n = (1 << 18) + 1;
    let g = Fused {
        nodes: vec![
            (op(Mul), vec![I(0), I(1)], tensor(DType::BFloat16, &[n])),
            (op(Cast), vec![N(0)], tensor(DType::Float32, &[n])),
            (op(Sigmoid), vec![N(1)], tensor(DType::Float32, &[n])),
        ],
    };
    let (x, y) = (buffer(DType::BFloat16, &[n], &mut rng), buffer(DType::BFloat16, &[n], &mut rng));
    same(&g, &[x, y], "big chain");
}

/// The baseline, AVX2 and AVX-512 versions of the chunk loops give the same bytes.
#[test]
fn every_instruction_set_gives_the_same_bits() {
    use Operand::{Input as I, Node as N};
    use std::sync::atomic::Ordering::Relaxed;
    let mut rng = Rng(9);
    let isa = &vmath::MAX_ISA;
    for d in FLOATS {
        let n = 3001;
        let (x, y) = (buffer(d, &[n], &mut rng), buffer(d, &[n], &mut rng));
        let mut ops = unary_ops();
        ops.push(op(OpKind::Div));
        ops.push(op(OpKind::Maximum));
        for o in ops {
            let arity = if matches!(o.kind, OpKind::Div | OpKind::Maximum) { 2 } else { 1 };
            let g = Fused {
                nodes: vec![
                    (o.clone(), (0..arity).map(I).collect(), tensor(d, &[n])),
                    (op(OpKind::Mul), vec![N(0), I(1)], tensor(d, &[n])),
                ],
            };
            let outs: Vec<Vec<u8>> = [2, 1, 0]
                .into_iter()
                .map(|level| {
                    isa.store(level, Relaxed);
                    let out = Buffer::empty(d, &[n as i64], &Device::Cpu).unwrap();
                    run(&g, &[x.clone(), y.clone()], &out).unwrap();
                    bytes(&out)
                })
                .collect();
            isa.store(2, Relaxed);
            assert!(outs[0] == outs[1] && outs[1] == outs[2], "{} {d}", o.kind.name());
        }
    }
}

#[test]
#[ignore = "timing, run with --ignored --nocapture"]
fn timing() {
    let n = 1 << 20;
    let mut rng = Rng(8);
    let x = Buffer::empty(DType::Float32, &[n as i64], &Device::Cpu).unwrap();
    // Roughly standard normal values, as activations.
    let normal = (0..n).map(|_| ((0..12).map(|_| rng.uniform(0.0, 1.0)).sum::<f64>() - 6.0) as f32);
    // SAFETY: x holds n float32 values.
    normal.enumerate().for_each(|(i, v)| unsafe { *(x.addr() as *mut f32).add(i) = v });
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let mut ops = unary_ops();
    ops.retain(|o| matches!(o.kind, OpKind::Exp | OpKind::Tanh | OpKind::Erf | OpKind::Relu | OpKind::Gelu));
    for o in ops {
        let g = Fused { nodes: vec![(o.clone(), vec![Operand::Input(0)], tensor(DType::Float32, &[n]))] };
        let out = Buffer::empty(DType::Float32, &[n as i64], &Device::Cpu).unwrap();
        let best = (0..20)
            .map(|_| {
                let t = std::time::Instant::now();
                pool.install(|| run(&g, std::slice::from_ref(&x), &out)).unwrap();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min);
        println!("{:>6} {:?}: {:.2} ns/element", o.kind.name(), o.attrs.get("approximate"), best * 1e9 / n as f64);
    }
}
