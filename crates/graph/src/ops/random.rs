//! Random tensors, generated on the tensor's device from a seed tensor:
//!
//! - `random_uniform(seed)`: values uniform in `[low, high)` (the Python argument `range`);
//! - `random_normal(seed)`: values from N(`mean`, `std`^2).
//!
//! `seed` is a scalar int64 or uint64 tensor on any device (its 64 bits are the generator's
//! key), so a new seed runs the same compiled graph. Attributes: `dtype` (any float: float32,
//! float16, bfloat16, float64, float8_e4m3fn, float8_e5m2), `shape` (static or symbolic dims, bound when the graph runs), `device`,
//! `stream` (a non-negative integer that separates the draws of one graph sharing one seed;
//! default 0), and `low`/`high` or `mean`/`std`.
//!
//! Values depend only on (seed, stream, element index), never on the device or the thread
//! count: Philox4x32-10 keyed by the seed, one counter per block of 4 (2 for float64) elements.
//! crates/runtime/src/cpu/random says the recipe to the bit; uniform values are the same bits
//! on every device, normal values agree within a few ulps (the devices' transcendentals differ).
//! [`RandomParams`] is parsed and checked once here; its [`Recipe`] holds what both kernels
//! compute with.

use super::{Ctx, OpKind, one};
use crate::attrs::{Attr, Attrs};
use crate::dtype::DType;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let params = RandomParams::from_op(ctx.kind, ctx.attrs).map_err(|m| match m.split_once(": ") {
        Some(("dtype", msg)) => ctx.type_err("dtype", msg),
        Some((key, msg)) => ctx.value_err(key, msg),
        None => ctx.value_err("attributes", m),
    })?;
    let seed = ctx.tensor(0)?;
    if !matches!(seed.dtype, DType::Int64 | DType::UInt64) {
        return Err(ctx.type_err("seed", format!("must be int64 or uint64, got {}", seed.dtype)));
    }
    let one_value = match seed.shape.as_slice() {
        [] => true,
        [d] => d.as_static() == Some(1),
        _ => false,
    };
    if !one_value {
        return Err(ctx.value_err("seed", format!("must be a scalar, got shape {}", shape_str(&seed.shape))));
    }
    let shape = ctx.dims("shape")?;
    if let Some(d) = shape.iter().find(|d| d.as_static().is_some_and(|n| n < 0)) {
        return Err(ctx.value_err("shape", format!("dimensions must not be negative, got {d} in {}", shape_str(shape))));
    }
    one(TensorType::new(params.dtype, shape.to_vec(), ctx.device("device")?))
}

/// Which values a random op draws.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Uniform in `[low, high)`.
    Uniform { low: f64, high: f64 },
    /// Normal with mean `mean` and standard deviation `std`.
    Normal { mean: f64, std: f64 },
}

/// A random op's attributes, checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomParams {
    pub distribution: Distribution,
    pub dtype: DType,
    pub stream: u64,
}

fn number(attrs: &Attrs, key: &str, default: Option<f64>) -> std::result::Result<f64, String> {
    match (attrs.get(key), default) {
        (Some(Attr::Float(x)), _) => Ok(*x),
        (Some(Attr::Int(i)), _) => Ok(*i as f64),
        (Some(other), _) => Err(format!("{key}: expected a number, got {other}")),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(format!("{key}: missing number")),
    }
}

impl RandomParams {
    /// The parameters of a `kind` op (random_uniform or random_normal); errors read
    /// `"argument: what is wrong"`.
    pub fn from_op(kind: OpKind, attrs: &Attrs) -> std::result::Result<RandomParams, String> {
        let dtype = match attrs.get("dtype") {
            Some(Attr::DType(d)) => *d,
            Some(other) => return Err(format!("dtype: expected a dtype, got {other}")),
            None => return Err("dtype: missing dtype".into()),
        };
        if Format::of(dtype).is_none() {
            return Err(format!("dtype: must be a floating-point dtype, got {dtype}"));
        }
        let stream = match attrs.get("stream") {
            None => 0,
            Some(Attr::Int(i)) if *i >= 0 => *i as u64,
            Some(other) => return Err(format!("stream: expected a non-negative integer, got {other}")),
        };
        let distribution = match kind {
            OpKind::RandomUniform => {
                let (low, high) = (number(attrs, "low", Some(0.0))?, number(attrs, "high", Some(1.0))?);
                if !(low.is_finite() && high.is_finite()) {
                    return Err(format!("range: the bounds must be finite, got ({low}, {high})"));
                }
                if low >= high {
                    return Err(format!("range: min must be less than max, got ({low}, {high})"));
                }
                Distribution::Uniform { low, high }
            }
            OpKind::RandomNormal => {
                let (mean, std) = (number(attrs, "mean", Some(0.0))?, number(attrs, "std", Some(1.0))?);
                if !mean.is_finite() {
                    return Err(format!("mean: must be finite, got {mean}"));
                }
                if std.is_nan() || std <= 0.0 || std.is_infinite() {
                    return Err(format!("std: must be positive and finite, got {std}"));
                }
                Distribution::Normal { mean, std }
            }
            other => return Err(format!("op: {} is not a random op", other.name())),
        };
        let params = RandomParams { distribution, dtype, stream };
        params.recipe()?;
        Ok(params)
    }

    /// What the kernels compute with, or why the parameters do not fit the dtype.
    pub fn recipe(&self) -> std::result::Result<Recipe, String> {
        let out = Format::of(self.dtype).ok_or_else(|| format!("dtype: {} is not supported", self.dtype))?;
        let wide = self.dtype == DType::Float64;
        // The arithmetic's own format: float32 for every dtype but float64.
        let (calc, calc_name) = if wide { (Format::F64, "float64") } else { (Format::F32, "float32") };
        let dtype = self.dtype;
        match self.distribution {
            Distribution::Uniform { low, high } => {
                if low < -out.max || high > out.max {
                    return Err(format!(
                        "range: ({low}, {high}) reaches past the largest finite {dtype} value ({})",
                        out.max
                    ));
                }
                let (min, max) = (out.ceil(low), out.below(high));
                if min > max {
                    return Err(format!("range: [{low}, {high}) holds no {dtype} value"));
                }
                let (offset, scale) = (calc.round(low), calc.round(high - low));
                if scale.is_infinite() {
                    return Err(format!("range: max - min overflows {calc_name}, got ({low}, {high})"));
                }
                Ok(Recipe { normal: false, wide, offset, scale, min, max })
            }
            Distribution::Normal { mean, std } => {
                let (offset, scale) = (calc.round(mean), calc.round(std));
                if offset.is_infinite() {
                    return Err(format!("mean: {mean} overflows {calc_name}"));
                }
                if scale.is_infinite() || scale == 0.0 {
                    return Err(format!("std: {std} is not a positive finite {calc_name} value"));
                }
                Ok(Recipe { normal: true, wide, offset, scale, min: f64::NEG_INFINITY, max: f64::INFINITY })
            }
        }
    }
}

/// The numbers both kernels use: each value is `offset + scale * x` (x uniform in [0, 1) or
/// standard normal), computed in float64 when `wide` and float32 otherwise, then clamped to
/// `[min, max]` and rounded to the output dtype. `offset` and `scale` are exact in the
/// arithmetic's format; `min` and `max` are values of the output dtype (the smallest at or
/// above `low` and the largest below `high`; infinite for normal values).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recipe {
    pub normal: bool,
    pub wide: bool,
    pub offset: f64,
    pub scale: f64,
    pub min: f64,
    pub max: f64,
}

impl Recipe {
    /// Elements per Philox block (its four 32-bit words give 4 values of 24 bits or 2 of 53).
    pub fn per_block(&self) -> usize {
        if self.wide { 2 } else { 4 }
    }
}

/// The finite values of a binary float format: `digits` significand bits, smallest normal
/// exponent `emin`, largest finite value `max`. Exact in f64 for every format used here.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Format {
    digits: i32,
    emin: i32,
    max: f64,
}

/// 2^k for k in f64's range, subnormal powers included.
fn pow2(k: i32) -> f64 {
    if k >= -1022 { f64::from_bits(((k + 1023) as u64) << 52) } else { f64::from_bits(1u64 << (k + 1074)) }
}

/// floor(log2 |x|) for a normal f64, -1023 for zero and subnormals.
fn exponent(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

impl Format {
    const F32: Format = Format { digits: 24, emin: -126, max: f32::MAX as f64 };
    const F64: Format = Format { digits: 53, emin: -1022, max: f64::MAX };

    fn of(dtype: DType) -> Option<Format> {
        match dtype {
            DType::Float32 => Some(Format::F32),
            DType::Float64 => Some(Format::F64),
            DType::Float16 => Some(Format { digits: 11, emin: -14, max: 65504.0 }),
            DType::BFloat16 => Some(Format { digits: 8, emin: -126, max: (2.0 - pow2(-7)) * pow2(127) }),
            DType::Float8E4m3fn => Some(Format { digits: 4, emin: -6, max: 448.0 }),
            DType::Float8E5m2 => Some(Format { digits: 3, emin: -14, max: 57344.0 }),
            _ => None,
        }
    }

    /// The gap between neighbouring values in the binade of `x`.
    fn spacing(&self, x: f64) -> f64 {
        pow2(exponent(x).max(self.emin) - self.digits + 1)
    }

    /// The largest value of the format at or below `x` (unbounded above `max`).
    fn floor(&self, x: f64) -> f64 {
        let q = self.spacing(x);
        (x / q).floor() * q
    }

    fn ceil(&self, x: f64) -> f64 {
        -self.floor(-x)
    }

    /// The largest value of the format strictly below `x`.
    fn below(&self, x: f64) -> f64 {
        let f = self.floor(x);
        if f < x {
            return f;
        }
        let e = exponent(x);
        // Below a power of two the values are twice as dense.
        let step = if x > 0.0 && e > self.emin && x == pow2(e) { pow2(e - self.digits) } else { self.spacing(x) };
        x - step
    }

    /// `x` rounded to nearest-even in this format (f32 or f64), infinite past its range.
    fn round(&self, x: f64) -> f64 {
        if self.digits == 24 { x as f32 as f64 } else { x }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Op, infer as infer_op};
    use super::*;
    use crate::dim::Dim;
    use crate::error::GraphError;
    use crate::types::DeviceRef;

    fn attrs(dtype: DType) -> Attrs {
        Attrs::new()
            .with("dtype", Attr::DType(dtype))
            .with("shape", Attr::Dims(vec![Dim::sym("batch").unwrap(), Dim::stat(3)]))
            .with("device", Attr::Device(DeviceRef::gpu(0)))
    }

    fn seed(dtype: DType, dims: Vec<Dim>) -> Type {
        Type::Tensor(TensorType::new(dtype, dims, DeviceRef::CPU))
    }

    fn run(kind: OpKind, attrs: Attrs, inputs: &[Type]) -> Result<Vec<Type>> {
        infer_op(&Op { kind, attrs }, inputs)
    }

    #[test]
    fn the_result_has_the_attributes_type() {
        for kind in [OpKind::RandomUniform, OpKind::RandomNormal] {
            for dtype in [DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Float8E5m2] {
                for s in [DType::Int64, DType::UInt64] {
                    let out = run(kind, attrs(dtype), &[seed(s, vec![])]).unwrap();
                    let want =
                        TensorType::new(dtype, vec![Dim::sym("batch").unwrap(), Dim::stat(3)], DeviceRef::gpu(0));
                    assert_eq!(out, vec![Type::Tensor(want)]);
                }
            }
        }
        assert!(run(OpKind::RandomUniform, attrs(DType::Float32), &[seed(DType::Int64, vec![Dim::stat(1)])]).is_ok());
    }

    #[test]
    fn bad_inputs_and_attributes_are_named() {
        let s = [seed(DType::Int64, vec![])];
        let e = run(OpKind::RandomUniform, attrs(DType::Int32), &s).unwrap_err();
        assert!(matches!(e, GraphError::Type(_)));
        assert!(e.to_string().starts_with("random_uniform: dtype: must be a floating-point dtype, got int32"), "{e}");
        let e = run(OpKind::RandomNormal, attrs(DType::Float32).with("std", Attr::Float(0.0)), &s).unwrap_err();
        assert!(e.to_string().starts_with("random_normal: std: must be positive and finite, got 0"), "{e}");
        let e = run(OpKind::RandomNormal, attrs(DType::Float32).with("std", Attr::Float(-1.0)), &s).unwrap_err();
        assert!(e.to_string().contains("std: must be positive"), "{e}");
        let e = run(OpKind::RandomNormal, attrs(DType::Float32).with("mean", Attr::Float(f64::NAN)), &s).unwrap_err();
        assert!(e.to_string().contains("mean: must be finite"), "{e}");
        let bad = attrs(DType::Float32).with("low", Attr::Float(1.0)).with("high", Attr::Int(1));
        let e = run(OpKind::RandomUniform, bad, &s).unwrap_err();
        assert!(e.to_string().starts_with("random_uniform: range: min must be less than max, got (1, 1)"), "{e}");
        let e = run(OpKind::RandomUniform, attrs(DType::Float32), &[seed(DType::Float32, vec![])]).unwrap_err();
        assert!(matches!(e, GraphError::Type(_)));
        assert!(e.to_string().starts_with("random_uniform: seed: must be int64 or uint64, got float32"), "{e}");
        let e =
            run(OpKind::RandomUniform, attrs(DType::Float32), &[seed(DType::Int64, vec![Dim::stat(2)])]).unwrap_err();
        assert!(e.to_string().starts_with("random_uniform: seed: must be a scalar, got shape [2]"), "{e}");
        let e = run(OpKind::RandomUniform, attrs(DType::Float32), &[]).unwrap_err();
        assert!(e.to_string().contains("expected 1 inputs"), "{e}");
        let neg = attrs(DType::Float32).with("shape", Attr::Dims(vec![Dim::stat(-2)]));
        let e = run(OpKind::RandomUniform, neg, &s).unwrap_err();
        assert!(e.to_string().starts_with("random_uniform: shape: dimensions must not be negative"), "{e}");
        let e = run(OpKind::RandomUniform, attrs(DType::Float32).with("stream", Attr::Int(-1)), &s).unwrap_err();
        assert!(e.to_string().starts_with("random_uniform: stream: expected a non-negative integer"), "{e}");
        let e = run(OpKind::RandomNormal, attrs(DType::Float32).with("std", Attr::Str("1".into())), &s).unwrap_err();
        assert!(e.to_string().starts_with("random_normal: std: expected a number"), "{e}");
    }

    fn params(kind: OpKind, dtype: DType, a: (&str, f64), b: (&str, f64)) -> std::result::Result<RandomParams, String> {
        let attrs =
            Attrs::new().with("dtype", Attr::DType(dtype)).with(a.0, Attr::Float(a.1)).with(b.0, Attr::Float(b.1));
        RandomParams::from_op(kind, &attrs)
    }

    fn uniform(dtype: DType, low: f64, high: f64) -> std::result::Result<Recipe, String> {
        params(OpKind::RandomUniform, dtype, ("low", low), ("high", high)).and_then(|p| p.recipe())
    }

    #[test]
    fn uniform_bounds_are_values_of_the_dtype_inside_the_range() {
        // [0, 1): the largest value below 1 of each dtype.
        let below_one = |digits: i32| 1.0 - pow2(-digits);
        let all = [(DType::Float32, 24), (DType::Float16, 11), (DType::BFloat16, 8), (DType::Float64, 53)];
        for (dtype, digits) in all.into_iter().chain([(DType::Float8E4m3fn, 4), (DType::Float8E5m2, 3)]) {
            let r = uniform(dtype, 0.0, 1.0).unwrap();
            assert_eq!((r.min, r.max, r.offset, r.scale), (0.0, below_one(digits), 0.0, 1.0), "{dtype}");
            assert_eq!(r.per_block(), if dtype == DType::Float64 { 2 } else { 4 });
        }
        // Bounds that are not values: rounded inwards.
        let r = uniform(DType::Float16, 0.1, 0.2).unwrap();
        assert_eq!((r.min, r.max), (1639.0 * pow2(-14), 1638.0 * pow2(-13)));
        assert_eq!(r.offset, 0.1f32 as f64);
        assert_eq!(r.scale, (0.2f64 - 0.1) as f32 as f64);
        // Negative and subnormal ends.
        let r = uniform(DType::Float32, -2.0, 0.0).unwrap();
        assert_eq!((r.min, r.max), (-2.0, -(f32::from_bits(1) as f64)));
        let r = uniform(DType::BFloat16, -1.0, -0.5).unwrap();
        assert_eq!((r.min, r.max), (-1.0, -0.5 - pow2(-8)));
        let r = uniform(DType::Float64, 1.0, 2.0).unwrap();
        assert_eq!(r.max, 2f64.next_down());
        let r = uniform(DType::Float16, -65504.0, 65504.0).unwrap();
        assert_eq!((r.min, r.max), (-65504.0, 65472.0));
        let r = uniform(DType::Float8E4m3fn, -448.0, 0.3).unwrap();
        assert_eq!((r.min, r.max), (-448.0, 0.28125));
        let r = uniform(DType::Float8E5m2, 1e-6, 3.0).unwrap();
        assert_eq!((r.min, r.max), (pow2(-16), 2.5));
    }

    #[test]
    fn ranges_that_do_not_fit_the_dtype_are_rejected() {
        let e = uniform(DType::BFloat16, 1.001, 1.002).unwrap_err();
        assert_eq!(e, "range: [1.001, 1.002) holds no bfloat16 value");
        assert_eq!(uniform(DType::BFloat16, 1.0, 1.001).map(|r| (r.min, r.max)), Ok((1.0, 1.0)));
        let e = uniform(DType::Float16, 0.0, 70000.0).unwrap_err();
        assert!(e.starts_with("range: (0, 70000) reaches past the largest finite float16 value"), "{e}");
        let e = uniform(DType::Float32, -3e38, 3e38).unwrap_err();
        assert!(e.starts_with("range: max - min overflows float32"), "{e}");
        assert!(uniform(DType::Float64, -8e307, 8e307).is_ok());
        let e = uniform(DType::Float64, -1.7e308, 1.7e308).unwrap_err();
        assert!(e.starts_with("range: max - min overflows float64"), "{e}");
        let e = params(OpKind::RandomNormal, DType::Float32, ("mean", 0.0), ("std", 1e-50)).unwrap_err();
        assert!(e.starts_with("std: 0.00000"), "{e}");
        let e = params(OpKind::RandomNormal, DType::Float16, ("mean", 1e39), ("std", 1.0)).unwrap_err();
        assert_eq!(e, "mean: 1000000000000000000000000000000000000000 overflows float32");
        let r = params(OpKind::RandomNormal, DType::Float64, ("mean", 1e39), ("std", 1e-50)).unwrap().recipe().unwrap();
        assert_eq!((r.normal, r.offset, r.scale, r.min, r.max), (true, 1e39, 1e-50, f64::NEG_INFINITY, f64::INFINITY));
    }

    #[test]
    fn format_steps_match_the_hardware_types() {
        let f32f = Format::F32;
        let mut s = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x = f32::from_bits((s >> 32) as u32);
            if !x.is_finite() {
                continue;
            }
            let x = x as f64;
            assert_eq!(f32f.below(x), (x as f32).next_down() as f64, "{x}");
            let y = x * 1.000_000_01;
            if y.abs() > f32::MAX as f64 {
                continue;
            }
            let f = f32f.floor(y);
            assert!(f <= y && (f as f32) as f64 == f && ((f as f32).next_up() as f64) > y, "{y}");
        }
        let f64f = Format::F64;
        for x in [1.0, 0.0, -0.0, 1e-310, -5e-324, 3.0, f64::MAX, -1.0] {
            assert_eq!(f64f.below(x), x.next_down(), "{x}");
            assert_eq!(f64f.ceil(x), x, "{x}");
        }
    }
}
