//! The inverse real FFT, MAX's `ops.irfft`: `irfft(input_tensor)` turns the non-negative
//! frequencies of a Hermitian spectrum along one axis into the `n` real samples whose `rfft`
//! they are, as `numpy.fft.irfft` does.
//!
//! Attributes ([`IrfftParams`]): `axis` (int, may be negative; counted over the signal's dims,
//! which exclude the trailing pair of a complex input), `n` (int > 0, or absent for
//! `2 * (m - 1)` where `m` is the axis' size, which must then be static), `normalization`
//! ("backward": divide by n, "ortho": by sqrt(n), "forward": not at all) and
//! `input_is_complex` (bool, default false: the input holds real parts and the imaginary parts
//! are 0; true: its last dim is 2, the real and imaginary parts of each value side by side).
//!
//! The first `n / 2 + 1` values along the axis are used, zeros standing in for missing ones;
//! the imaginary parts of the zero frequency and (for even `n`) of frequency `n / 2` are
//! ignored. The result keeps the input's dtype (float16, bfloat16, float32 or float64) and its
//! shape, less the complex pair, with the axis replaced by `n`.

use super::{Ctx, OpKind, one};
use crate::attrs::{Attr, Attrs};
use crate::dim::Dim;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::Irfft => irfft(ctx),
        _ => Err(ctx.value_err("op", "not an FFT op")),
    }
}

/// How the inverse transform is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalization {
    /// Divided by n (numpy's default for inverse transforms).
    Backward,
    /// Divided by sqrt(n).
    Ortho,
    /// Not scaled.
    Forward,
}

impl Normalization {
    pub fn parse(s: &str) -> Option<Normalization> {
        match s {
            "backward" => Some(Normalization::Backward),
            "ortho" => Some(Normalization::Ortho),
            "forward" => Some(Normalization::Forward),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Normalization::Backward => "backward",
            Normalization::Ortho => "ortho",
            Normalization::Forward => "forward",
        }
    }

    /// The factor every output of a length-`n` transform is multiplied by.
    pub fn scale(self, n: usize) -> f64 {
        match self {
            Normalization::Backward => 1.0 / n as f64,
            Normalization::Ortho => 1.0 / (n as f64).sqrt(),
            Normalization::Forward => 1.0,
        }
    }
}

/// irfft's attributes, as given (the axis may count from the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrfftParams {
    pub axis: i64,
    pub n: Option<i64>,
    pub normalization: Normalization,
    pub input_is_complex: bool,
}

impl IrfftParams {
    /// Errors are `"<attribute>: <message>"`.
    pub fn from_attrs(attrs: &Attrs) -> std::result::Result<IrfftParams, String> {
        let axis = match attrs.get("axis") {
            None => -1,
            Some(Attr::Int(i)) => *i,
            Some(other) => return Err(format!("axis: expected an integer, got {other}")),
        };
        let n = match attrs.get("n") {
            None => None,
            Some(Attr::Int(i)) if *i > 0 => Some(*i),
            Some(Attr::Int(i)) => return Err(format!("n: the output length must be positive, got {i}")),
            Some(other) => return Err(format!("n: expected an integer or None, got {other}")),
        };
        let normalization = match attrs.get("normalization") {
            None => Normalization::Backward,
            Some(Attr::Str(s)) => Normalization::parse(s)
                .ok_or_else(|| format!("normalization: expected \"backward\", \"ortho\" or \"forward\", got {s:?}"))?,
            Some(other) => return Err(format!("normalization: expected a string, got {other}")),
        };
        let input_is_complex = match attrs.get("input_is_complex") {
            None => false,
            Some(Attr::Bool(b)) => *b,
            Some(other) => return Err(format!("input_is_complex: expected a bool, got {other}")),
        };
        Ok(IrfftParams { axis, n, normalization, input_is_complex })
    }

    /// The axis among `signal_rank` dims, None when out of range.
    pub fn axis_of(&self, signal_rank: usize) -> Option<usize> {
        let r = signal_rank as i64;
        (-r..r).contains(&self.axis).then(|| if self.axis < 0 { (self.axis + r) as usize } else { self.axis as usize })
    }
}

/// The inputs the op reads: frequencies `0..n / 2 + 1`.
pub fn used_frequencies(n: usize) -> usize {
    n / 2 + 1
}

/// One irfft call at run time, checked once for both backends: the input seen as
/// `[outer, m, inner]` (times 2 for a complex input) around the axis, the output as
/// `[outer, n, inner]`. A row is one (outer, inner) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrfftShape {
    pub outer: usize,
    pub m: usize,
    pub inner: usize,
    pub n: usize,
    pub complex: bool,
    pub normalization: Normalization,
}

impl IrfftShape {
    /// The geometry of `p` over an input of `shape`.
    pub fn of(p: &IrfftParams, shape: &[usize]) -> std::result::Result<IrfftShape, String> {
        let signal = if p.input_is_complex {
            match shape.split_last() {
                Some((2, rest)) if !rest.is_empty() => rest,
                _ => {
                    return Err(format!(
                        "input_tensor: a complex input must be [..., 2] with a signal dim, got {shape:?}"
                    ));
                }
            }
        } else {
            shape
        };
        let Some(axis) = p.axis_of(signal.len()) else {
            return Err(format!("axis: {} is out of range for a signal of shape {signal:?}", p.axis));
        };
        let m = signal[axis];
        let n = match p.n {
            Some(n) => n as usize,
            None if m >= 2 => 2 * (m - 1),
            None => return Err(format!("n: the default 2 * (m - 1) needs an axis of 2 or more values, got {m}")),
        };
        Ok(IrfftShape {
            outer: signal[..axis].iter().product(),
            m,
            inner: signal[axis + 1..].iter().product(),
            n,
            complex: p.input_is_complex,
            normalization: p.normalization,
        })
    }

    pub fn rows(&self) -> usize {
        self.outer * self.inner
    }

    /// Input values along the axis that the transform uses (the rest are zeros).
    pub fn used(&self) -> usize {
        self.m.min(used_frequencies(self.n))
    }

    pub fn input_len(&self) -> usize {
        self.rows() * self.m * if self.complex { 2 } else { 1 }
    }

    pub fn output_len(&self) -> usize {
        self.rows() * self.n
    }

    pub fn scale(&self) -> f64 {
        self.normalization.scale(self.n)
    }
}

fn irfft(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let p = IrfftParams::from_attrs(ctx.attrs).map_err(|m| match m.split_once(": ") {
        Some((key, msg)) => ctx.value_err(key, msg),
        None => ctx.value_err("attributes", m),
    })?;
    let x = ctx.tensor(0)?;
    if !x.dtype.is_float() || x.dtype.is_float8() {
        return Err(
            ctx.type_err("input_tensor", format!("must be float32, float64, float16 or bfloat16, got {}", x.dtype))
        );
    }
    let signal = if p.input_is_complex {
        match x.shape.split_last() {
            Some((last, rest)) if last.as_static() == Some(2) && !rest.is_empty() => rest,
            _ => {
                return Err(ctx.value_err(
                    "input_tensor",
                    format!(
                        "input_is_complex needs a last dimension of 2 (real and imaginary parts) after at least one signal dimension, got shape {}",
                        shape_str(&x.shape)
                    ),
                ));
            }
        }
    } else {
        &x.shape[..]
    };
    if signal.is_empty() {
        return Err(ctx.value_err("input_tensor", "must have at least one dimension to transform, got a scalar"));
    }
    let axis = ctx.axis("axis", p.axis, signal.len())?;
    let m = &signal[axis];
    let n = match (p.n, m.as_static()) {
        (Some(n), _) => n,
        (None, Some(m)) if m >= 2 => 2 * (m - 1),
        (None, Some(m)) => {
            return Err(ctx.value_err(
                "n",
                format!(
                    "the default output length 2 * (m - 1) needs at least 2 values along axis {axis}, got {m}; pass n"
                ),
            ));
        }
        (None, None) => {
            return Err(ctx.value_err(
                "n",
                format!("the default output length 2 * (m - 1) needs a static axis, but axis {axis} is {m}; pass n"),
            ));
        }
    };
    let mut shape = signal.to_vec();
    shape[axis] = Dim::stat(n);
    one(TensorType::new(x.dtype, shape, x.device))
}

#[cfg(test)]
mod tests {
    use super::super::{Op, infer as infer_op};
    use super::*;
    use crate::dtype::DType;
    use crate::error::GraphError;
    use crate::ops::testing::tt as t;

    fn attrs(axis: i64, n: Option<i64>, norm: &str, complex: bool) -> Attrs {
        Attrs::new()
            .with("axis", Attr::Int(axis))
            .with("n", n.map_or(Attr::None, Attr::Int))
            .with("normalization", Attr::Str(norm.into()))
            .with("input_is_complex", Attr::Bool(complex))
    }

    fn run(a: Attrs, input: Type) -> Result<Vec<Type>> {
        infer_op(&Op { kind: OpKind::Irfft, attrs: a }, &[input])
    }

    #[test]
    fn params_parse_with_defaults() {
        let p = IrfftParams::from_attrs(&Attrs::new()).unwrap();
        assert_eq!(
            p,
            IrfftParams { axis: -1, n: None, normalization: Normalization::Backward, input_is_complex: false }
        );
        let p = IrfftParams::from_attrs(&attrs(1, Some(7), "ortho", true)).unwrap();
        assert_eq!(p, IrfftParams { axis: 1, n: Some(7), normalization: Normalization::Ortho, input_is_complex: true });
        assert_eq!(IrfftParams::from_attrs(&attrs(0, None, "forward", false)).unwrap().n, None);
    }

    #[test]
    fn params_reject_bad_values() {
        let e = IrfftParams::from_attrs(&attrs(0, Some(0), "backward", false)).unwrap_err();
        assert_eq!(e, "n: the output length must be positive, got 0");
        let e = IrfftParams::from_attrs(&attrs(0, Some(-3), "backward", false)).unwrap_err();
        assert!(e.starts_with("n: "), "{e}");
        let e = IrfftParams::from_attrs(&attrs(0, None, "none", false)).unwrap_err();
        assert!(e.starts_with("normalization: expected \"backward\", \"ortho\" or \"forward\""), "{e}");
        let bad = Attrs::new().with("input_is_complex", Attr::Int(1));
        assert!(IrfftParams::from_attrs(&bad).unwrap_err().starts_with("input_is_complex: expected a bool"));
        let bad = Attrs::new().with("axis", Attr::Str("x".into()));
        assert!(IrfftParams::from_attrs(&bad).unwrap_err().starts_with("axis: expected an integer"));
    }

    #[test]
    fn normalization_scales() {
        assert_eq!(Normalization::Backward.scale(8), 0.125);
        assert_eq!(Normalization::Ortho.scale(16), 0.25);
        assert_eq!(Normalization::Forward.scale(3), 1.0);
        for s in ["backward", "ortho", "forward"] {
            assert_eq!(Normalization::parse(s).unwrap().name(), s);
        }
    }

    #[test]
    fn output_replaces_the_axis_by_n() {
        let out = run(attrs(-1, None, "backward", false), t(DType::Float32, &["B", "3", "9"])).unwrap();
        assert_eq!(out, vec![t(DType::Float32, &["B", "3", "16"])]);
        let out = run(attrs(1, Some(5), "ortho", false), t(DType::BFloat16, &["B", "3", "9"])).unwrap();
        assert_eq!(out, vec![t(DType::BFloat16, &["B", "5", "9"])]);
        // A complex input's pair is not a signal dim: axis -1 is the one before it.
        let out = run(attrs(-1, None, "forward", true), t(DType::Float64, &["4", "6", "2"])).unwrap();
        assert_eq!(out, vec![t(DType::Float64, &["4", "10"])]);
        let out = run(attrs(0, Some(3), "forward", true), t(DType::Float16, &["4", "6", "2"])).unwrap();
        assert_eq!(out, vec![t(DType::Float16, &["3", "6"])]);
        // With n given, the axis may be symbolic.
        let out = run(attrs(0, Some(12), "backward", false), t(DType::Float32, &["S", "2"])).unwrap();
        assert_eq!(out, vec![t(DType::Float32, &["12", "2"])]);
    }

    #[test]
    fn errors_name_the_argument() {
        let e = run(attrs(2, None, "backward", false), t(DType::Float32, &["3", "9"])).unwrap_err();
        assert!(matches!(e, GraphError::Index(_)), "{e:?}");
        assert!(e.to_string().starts_with("irfft: axis: axis 2 is out of range for rank 2"), "{e}");
        let e = run(attrs(1, None, "backward", true), t(DType::Float32, &["3", "2"])).unwrap_err();
        assert!(matches!(e, GraphError::Index(_)), "{e:?}");
        let e = run(attrs(-1, Some(0), "backward", false), t(DType::Float32, &["3", "9"])).unwrap_err();
        assert!(e.to_string().starts_with("irfft: n: the output length must be positive"), "{e}");
        let e = run(attrs(-1, None, "backward", true), t(DType::Float32, &["3", "9"])).unwrap_err();
        assert!(e.to_string().starts_with("irfft: input_tensor: input_is_complex needs a last dimension of 2"), "{e}");
        let e = run(attrs(-1, None, "backward", true), t(DType::Float32, &["2"])).unwrap_err();
        assert!(e.to_string().contains("input_is_complex needs"), "{e}");
        let e = run(attrs(-1, None, "backward", true), t(DType::Float32, &["3", "C"])).unwrap_err();
        assert!(e.to_string().contains("input_is_complex needs"), "{e}");
        let e = run(attrs(-1, None, "backward", false), t(DType::Int32, &["3", "9"])).unwrap_err();
        assert!(matches!(e, GraphError::Type(_)), "{e:?}");
        assert!(e.to_string().starts_with("irfft: input_tensor: must be float32"), "{e}");
        let e = run(attrs(-1, None, "backward", false), t(DType::Float8E4m3fn, &["9"])).unwrap_err();
        assert!(matches!(e, GraphError::Type(_)), "{e:?}");
        let e = run(attrs(-1, None, "backward", false), t(DType::Float32, &["3", "S"])).unwrap_err();
        assert!(
            e.to_string().starts_with("irfft: n: the default output length 2 * (m - 1) needs a static axis"),
            "{e}"
        );
        let e = run(attrs(-1, None, "backward", false), t(DType::Float32, &["3", "1"])).unwrap_err();
        assert!(e.to_string().contains("needs at least 2 values"), "{e}");
        let e = run(attrs(0, None, "backward", false), t(DType::Float32, &[])).unwrap_err();
        assert!(e.to_string().contains("got a scalar"), "{e}");
        let e = run(attrs(0, None, "sideways", false), t(DType::Float32, &["4"])).unwrap_err();
        assert!(e.to_string().starts_with("irfft: normalization: expected"), "{e}");
    }

    #[test]
    fn run_time_shapes() {
        let p = IrfftParams { axis: 1, n: None, normalization: Normalization::Ortho, input_is_complex: true };
        let s = IrfftShape::of(&p, &[2, 5, 3, 2]).unwrap();
        assert_eq!((s.outer, s.m, s.inner, s.n, s.complex), (2, 5, 3, 8, true));
        assert_eq!((s.rows(), s.used(), s.input_len(), s.output_len()), (6, 5, 60, 48));
        let p = IrfftParams { axis: -1, n: Some(5), normalization: Normalization::Backward, input_is_complex: false };
        let s = IrfftShape::of(&p, &[4, 9]).unwrap();
        assert_eq!((s.outer, s.m, s.inner, s.n, s.used()), (4, 9, 1, 5, 3));
        assert_eq!(s.scale(), 0.2);
        assert!(IrfftShape::of(&p, &[4, 9, 3]).is_ok());
        let c = IrfftParams { input_is_complex: true, ..p };
        assert!(IrfftShape::of(&c, &[4, 9, 3]).unwrap_err().starts_with("input_tensor:"));
        let d = IrfftParams { n: None, ..p };
        assert!(IrfftShape::of(&d, &[4, 1]).unwrap_err().starts_with("n:"));
        let far = IrfftParams { axis: 3, ..p };
        assert!(IrfftShape::of(&far, &[4, 1]).unwrap_err().starts_with("axis:"));
    }
}
