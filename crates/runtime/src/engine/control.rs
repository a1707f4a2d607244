//! Steps the executor runs itself rather than through a kernel: control flow (cond,
//! while_loop), ordering and side effects (print, the buffer ops), and the creation ops that
//! read run-time facts (range, shape_to_tensor, rebind).

use max_graph::attrs::Attr;
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, Dim, Type};

use super::exec::{State, output, run_body, shape_of};
use super::program::Step;
use crate::cpu::cast::Canon;
use crate::{Buffer, Device, Error, IndexItem, Result, Scalar};

fn truth(op: &str, b: &Buffer) -> Result<bool> {
    match b.item()? {
        Scalar::Bool(v) => Ok(v),
        other => Err(Error::Value(format!("{op}: the predicate must be a bool scalar, got {other:?}"))),
    }
}

fn chain() -> Result<Buffer> {
    Buffer::empty(DType::Bool, &[0], &Device::Cpu)
}

/// Runs `step` when it is one of the ops handled here; None otherwise.
pub(crate) fn run(state: &mut State, step: &Step, op: &Op, inputs: &[Buffer]) -> Result<Option<Vec<Buffer>>> {
    let name = op.kind.name();
    Ok(Some(match op.kind {
        OpKind::Cond => {
            let branch = if truth(name, &inputs[0])? { 0 } else { 1 };
            let body = &step.bodies[branch];
            run_body(state, body)?;
            results(state, &body.results)?
        }
        OpKind::WhileLoop => {
            let (pred, body) = (&step.bodies[0], &step.bodies[1]);
            let mut values: Vec<Buffer> = inputs.to_vec();
            loop {
                for (a, v) in pred.args.iter().zip(&values) {
                    state.env.insert(*a, v.clone());
                }
                run_body(state, pred)?;
                let p = state
                    .env
                    .get(&pred.results[0])
                    .cloned()
                    .ok_or_else(|| Error::Value("while_loop: no predicate".into()))?;
                if !truth(name, &p)? {
                    break;
                }
                for (a, v) in body.args.iter().zip(&values) {
                    state.env.insert(*a, v.clone());
                }
                run_body(state, body)?;
                values = results(state, &body.results)?;
            }
            values
        }
        OpKind::Print => {
            let label = match op.attrs.get("label") {
                Some(Attr::Str(s)) => s.clone(),
                _ => "debug_tensor".into(),
            };
            match (op.attrs.get("text"), inputs.get(1)) {
                (Some(Attr::Str(text)), _) => println!("{label}: {text}"),
                (_, Some(t)) => println!("{label}: {}", render(t)?),
                _ => println!("{label}"),
            }
            vec![chain()?]
        }
        OpKind::BufferCreate => {
            let shape = shape_of(state, step.outputs[0])?;
            vec![output(state, step.outputs[0], &shape)?]
        }
        OpKind::BufferLoad => vec![inputs[1].contiguous()?, chain()?],
        OpKind::BufferStore => {
            inputs[1].inplace_copy_from(&inputs[2])?;
            vec![chain()?]
        }
        OpKind::BufferStoreSlice => {
            let view = inputs[1].index(&store_slice_items(state, op, &inputs[3..])?)?;
            write_into(&view, &inputs[2])?;
            vec![chain()?]
        }
        OpKind::Range => vec![range(state, step, op, inputs)?],
        OpKind::ShapeToTensor => {
            let Some(Attr::Dims(dims)) = op.attrs.get("shape") else {
                return Err(Error::Value("shape_to_tensor: missing shape".into()));
            };
            let values =
                state.bindings.eval(dims)?.ok_or_else(|| Error::Value("shape_to_tensor: a dim is not bound".into()))?;
            let host = Buffer::empty(DType::Int64, &[values.len() as i64], &Device::Cpu)?;
            for (i, v) in values.iter().enumerate() {
                host.index(&[IndexItem::At(i as i64)])?.fill(Scalar::Int(*v as i64))?;
            }
            let out = output(state, step.outputs[0], &[values.len()])?;
            out.inplace_copy_from(&host)?;
            vec![out]
        }
        OpKind::Rebind => {
            let want = shape_of(state, step.outputs[0])?;
            if inputs[0].shape() != want.as_slice() {
                let msg = match op.attrs.get("message") {
                    Some(Attr::Str(m)) if !m.is_empty() => format!(": {m}"),
                    _ => String::new(),
                };
                return Err(Error::Value(format!(
                    "rebind: the tensor has shape {:?}, not {:?}{msg}",
                    inputs[0].shape(),
                    want
                )));
            }
            vec![inputs[0].clone()]
        }
        _ => return Ok(None),
    }))
}

fn results(state: &State, ids: &[usize]) -> Result<Vec<Buffer>> {
    ids.iter()
        .map(|v| state.env.get(v).cloned().ok_or_else(|| Error::Value(format!("block result %{v} was not computed"))))
        .collect()
}

/// A compact text form of a tensor for print: shape, dtype and (up to 64) values.
fn render(t: &Buffer) -> Result<String> {
    let host = t.to(&Device::Cpu)?;
    let flat = host.reshaped(vec![host.num_elements()])?;
    let n = host.num_elements().min(64);
    let mut vals = Vec::with_capacity(n);
    for i in 0..n {
        vals.push(match flat.index(&[IndexItem::At(i as i64)])?.item()? {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(v) => v.to_string(),
            Scalar::UInt(v) => v.to_string(),
            Scalar::Float(v) => format!("{v}"),
        });
    }
    let more = if host.num_elements() > n { ", ..." } else { "" };
    Ok(format!("Tensor({} {:?}: [{}{more}])", host.dtype(), host.shape(), vals.join(", ")))
}

/// Copies `src` into a (possibly strided) view of a buffer.
fn write_into(view: &Buffer, src: &Buffer) -> Result<()> {
    if view.shape() != src.shape() {
        return Err(Error::Value(format!(
            "buffer_store_slice: the slice has shape {:?} but the source {:?}",
            view.shape(),
            src.shape()
        )));
    }
    if view.is_contiguous() {
        return view.inplace_copy_from(src);
    }
    if !view.device().is_host() {
        return Err(Error::Value("buffer_store_slice: a strided slice of a GPU buffer is not supported yet".into()));
    }
    let src = src.to(&Device::Cpu)?.contiguous()?;
    let n = src.num_elements();
    let (shape, strides) = (view.shape().to_vec(), view.strides().to_vec());
    let width = view.dtype().size_in_bytes();
    let mut idx = vec![0usize; shape.len()];
    for i in 0..n {
        let off: isize = idx.iter().zip(&strides).map(|(k, s)| *k as isize * s).sum();
        // SAFETY: `off` addresses an element of the view (idx < shape); i < n elements of src.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (src.addr() as *const u8).add(i * width),
                (view.addr() as *mut u8).offset(off * width as isize),
                width,
            )
        };
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

/// The index items of buffer_store_slice (encoding documented in crates/graph/src/ops/buffer.rs).
fn store_slice_items(state: &State, op: &Op, tensors: &[Buffer]) -> Result<Vec<IndexItem>> {
    let ints = |k: &str| match op.attrs.get(k) {
        Some(Attr::Ints(v)) => Ok(v.clone()),
        _ => Err(Error::Value(format!("buffer_store_slice: missing {k}"))),
    };
    let dims = |k: &str| match op.attrs.get(k) {
        Some(Attr::Dims(v)) => Ok(v.clone()),
        _ => Err(Error::Value(format!("buffer_store_slice: missing {k}"))),
    };
    let (kinds, bounds, flags) = (ints("index_kinds")?, dims("index_bounds")?, ints("index_flags")?);
    let value = |d: &Dim| -> Result<i64> {
        d.evaluate(&|s| state.bindings.get(s))
            .map_err(|e| Error::Value(e.to_string()))?
            .ok_or_else(|| Error::Value(format!("buffer_store_slice: {d} is not bound")))
    };
    let mut next_tensor = 0;
    let mut items = Vec::with_capacity(kinds.len());
    for (e, kind) in kinds.iter().enumerate() {
        let f = flags.get(e).copied().unwrap_or(0);
        let b = &bounds[3 * e..3 * e + 3];
        items.push(match kind {
            0 => IndexItem::At(value(&b[0])?),
            1 => IndexItem::Slice {
                start: if f & 1 != 0 { None } else { Some(value(&b[0])?) },
                stop: if f & 2 != 0 { None } else { Some(value(&b[1])?) },
                step: if f & 4 != 0 { None } else { Some(value(&b[2])?) },
            },
            2 => {
                let t = tensors
                    .get(next_tensor)
                    .ok_or_else(|| Error::Value("buffer_store_slice: missing index tensor".into()))?;
                next_tensor += 1;
                match t.item()? {
                    Scalar::Int(v) => IndexItem::At(v),
                    Scalar::UInt(v) => IndexItem::At(v as i64),
                    other => return Err(Error::Value(format!("buffer_store_slice: index tensor holds {other:?}"))),
                }
            }
            _ => IndexItem::Ellipsis,
        });
    }
    Ok(items)
}

/// range: start + i * step for i in 0..n, computed in f64 (floats) or i64 (integers). An
/// out_dim that is a symbol no input binds is bound here, to the count the values give.
fn range(state: &mut State, step: &Step, op: &Op, inputs: &[Buffer]) -> Result<Buffer> {
    let Type::Tensor(t) = &state.model.program.types[step.outputs[0]] else {
        return Err(Error::Value("range: result is not a tensor".into()));
    };
    let t = t.clone();
    let read = |b: &Buffer| -> Result<Canon> {
        Ok(match b.item()? {
            Scalar::Bool(v) => Canon::U(v as u64),
            Scalar::Int(v) => Canon::I(v),
            Scalar::UInt(v) => Canon::U(v),
            Scalar::Float(v) => Canon::F(v),
        })
    };
    let (start, stop, delta) = (read(&inputs[0])?, read(&inputs[1])?, read(&inputs[2])?);
    // out_dim is asserted here, as MAX asserts it at execution: the elements start, stop and
    // step give, ceil((stop - start) / step) and at least 0. Float bounds arrive rounded to the
    // result's dtype (0.1 in float32 is not the 0.1 the graph's builder counted with), so a float
    // range accepts every count within that rounding: `slack` is how far the quotient may move.
    let f = |c: Canon| match c {
        Canon::F(x) => x,
        Canon::I(x) => x as f64,
        Canon::U(x) => x as f64,
    };
    let quotient = (f(stop) - f(start)) / f(delta);
    let count = match (start, stop, delta) {
        (_, _, Canon::I(0) | Canon::U(0)) => None,
        (_, _, Canon::F(d)) if d == 0.0 => None,
        (Canon::I(a), Canon::I(b), Canon::I(d)) => {
            let (span, d) = (b as i128 - a as i128, d as i128);
            Some(if (span > 0) != (d > 0) || span == 0 { 0 } else { (span + d - d.signum()) / d })
        }
        (Canon::U(a), Canon::U(b), Canon::U(d)) => {
            Some(if b <= a { 0 } else { ((b - a) as i128 + d as i128 - 1) / d as i128 })
        }
        _ => Some(quotient.ceil().max(0.0) as i128),
    };
    let slack = match (start, stop, delta) {
        (Canon::F(_), _, _) | (_, Canon::F(_), _) | (_, _, Canon::F(_)) if f(delta) != 0.0 => {
            let eps = match t.dtype {
                DType::Float64 => f64::EPSILON,
                DType::Float32 => f32::EPSILON as f64,
                DType::Float16 => 1.0 / 1024.0,
                _ => 1.0 / 128.0, // bfloat16 and narrower
            };
            2.0 * eps * (f(start).abs() + f(stop).abs() + f(delta).abs()) / f(delta).abs()
        }
        _ => 0.0,
    };
    let within = |n: usize| {
        count.is_some_and(|c| {
            if slack == 0.0 {
                return c == n as i128;
            }
            let lo = (quotient - slack).ceil().max(0.0) as i128;
            let hi = (quotient + slack).ceil().max(0.0) as i128;
            (lo..=hi).contains(&(n as i128))
        })
    };
    let shape = match shape_of(state, step.outputs[0]) {
        Ok(shape) => shape,
        Err(e) => {
            let (Some(name), Some(c)) = (t.shape[0].as_symbol(), count) else { return Err(e) };
            let c = i64::try_from(c).map_err(|_| Error::Value(format!("range: {c} elements")))?;
            state.bindings.bind(name, c, &format!("the result of {}", op.kind.name()))?;
            shape_of(state, step.outputs[0])?
        }
    };
    let n = shape[0];
    match count {
        None => return Err(Error::Value("range: step must be non-zero".into())),
        Some(c) if !within(n) => {
            return Err(Error::Value(format!("range: out_dim is {n}, but start, stop and step give {c} elements")));
        }
        Some(_) => {}
    }
    let host = Buffer::empty(t.dtype, &[n as i64], &Device::Cpu)?;
    for i in 0..n {
        let v = match (start, delta) {
            (Canon::F(a), Canon::F(d)) => Scalar::Float(a + i as f64 * d),
            (Canon::I(a), Canon::I(d)) => Scalar::Int(a.wrapping_add((i as i64).wrapping_mul(d))),
            (Canon::U(a), Canon::U(d)) => Scalar::UInt(a.wrapping_add((i as u64).wrapping_mul(d))),
            (a, d) => Scalar::Float(f(a) + i as f64 * f(d)),
        };
        host.index(&[IndexItem::At(i as i64)])?.fill(v)?;
    }
    let out = output(state, step.outputs[0], &shape)?;
    out.inplace_copy_from(&host)?;
    Ok(out)
}
