//! Buffer ops: create a mutable buffer, load it into a tensor, store a tensor into it (whole or
//! a slice). Loads and stores take the graph's chain as their first input and return a new
//! chain last, so that they keep their order.
//!
//! buffer_store_slice receives its Python indices (after the source) as these attributes, one
//! entry per index in order:
//! - `index_kinds` (ints): 0 an integer index (its value is the entry's start), 1 a slice,
//!   2 a tensor index (the next `indices[j]` tensor input), 3 an ellipsis.
//! - `index_bounds` (dims): three per entry, start, stop and step (0 where unused).
//! - `index_flags` (ints): per entry, bits for the bounds that were None (1 start, 2 stop,
//!   4 step) and 8 when `index_out_dims` holds an explicit output length (`(slice, out_dim)`).
//! - `index_out_dims` (dims): one per entry, the explicit output length (0 where unused).

use super::control::expect_chain;
use super::{Ctx, OpKind};
use crate::dim::Dim;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::BufferCreate => {
            ctx.expect_inputs(0)?;
            match ctx.types("type")? {
                [Type::Buffer(t)] => Ok(vec![Type::Buffer(t.clone())]),
                [other] => Err(ctx.type_err("type", format!("expected a buffer type, got {other}"))),
                other => Err(ctx.value_err("type", format!("expected one buffer type, got {} types", other.len()))),
            }
        }
        OpKind::BufferLoad => {
            ctx.expect_inputs(2)?;
            expect_chain(ctx, 0)?;
            let x = ctx.buffer(1)?;
            Ok(vec![Type::Tensor(x.clone()), Type::Chain])
        }
        OpKind::BufferStore => {
            ctx.expect_inputs(3)?;
            let (dest, source) = store_operands(ctx)?;
            if source.shape != dest.shape {
                return Err(ctx.value_err(
                    "source",
                    format!("expected source to have the destination's shape {}, got {} (insert a rebind if they are equal at run time)", shape_str(&dest.shape), shape_str(&source.shape)),
                ));
            }
            Ok(vec![Type::Chain])
        }
        OpKind::BufferStoreSlice => store_slice(ctx),
        _ => Err(ctx.value_err("op", "not a buffer op")),
    }
}

/// `[chain, destination, source, ...]` with one dtype and device.
fn store_operands<'a>(ctx: &Ctx<'a>) -> Result<(&'a TensorType, &'a TensorType)> {
    expect_chain(ctx, 0)?;
    let dest = ctx.buffer(1)?;
    let source = ctx.tensor(2)?;
    if source.dtype != dest.dtype {
        return Err(
            ctx.value_err("source", format!("has dtype {} but the destination holds {}", source.dtype, dest.dtype))
        );
    }
    ctx.same_device(&[1, 2])?;
    Ok((dest, source))
}

enum Index {
    At(Dim),
    Slice { start: Option<Dim>, stop: Option<Dim>, step: i64, out: Option<Dim> },
    Tensor(usize),
    Ellipsis,
}

fn list<'a>(ctx: &Ctx<'a>, key: &str) -> Result<&'a [Dim]> {
    match ctx.attr(key) {
        None => Ok(&[]),
        Some(_) => ctx.dims(key),
    }
}

fn ints<'a>(ctx: &Ctx<'a>, key: &str) -> Result<&'a [i64]> {
    match ctx.attr(key) {
        None => Ok(&[]),
        Some(_) => ctx.ints(key),
    }
}

/// Decodes the index attributes (see the module comment).
fn decode(ctx: &Ctx) -> Result<Vec<Index>> {
    let kinds = ints(ctx, "index_kinds")?;
    let bounds = list(ctx, "index_bounds")?;
    let flags = ints(ctx, "index_flags")?;
    let outs = list(ctx, "index_out_dims")?;
    let n = kinds.len();
    if bounds.len() != 3 * n || flags.len() != n || outs.len() != n {
        return Err(ctx.value_err(
            "indices",
            "malformed index encoding: index_bounds, index_flags and index_out_dims must match index_kinds",
        ));
    }
    let mut tensors = 3..ctx.inputs.len();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let b = &bounds[3 * i..3 * i + 3];
        let f = flags[i];
        out.push(match kinds[i] {
            0 => Index::At(b[0].clone()),
            1 => {
                let step = if f & 4 != 0 {
                    1
                } else {
                    b[2].as_static()
                        .ok_or_else(|| ctx.value_err("indices", format!("slice steps must be static, got {}", b[2])))?
                };
                if step == 0 {
                    return Err(ctx.value_err("indices", "slice step cannot be zero"));
                }
                Index::Slice {
                    start: (f & 1 == 0).then(|| b[0].clone()),
                    stop: (f & 2 == 0).then(|| b[1].clone()),
                    step,
                    out: (f & 8 != 0).then(|| outs[i].clone()),
                }
            }
            2 => Index::Tensor(
                tensors.next().ok_or_else(|| ctx.value_err("indices", "fewer index tensors than tensor indices"))?,
            ),
            3 => Index::Ellipsis,
            k => return Err(ctx.value_err("indices", format!("unknown index kind {k}"))),
        });
    }
    if tensors.next().is_some() {
        return Err(ctx.value_err("indices", "more index tensors than tensor indices"));
    }
    Ok(out)
}

/// A bound as a position in `[0, dim]`: negative static bounds count from the end.
fn from_end(dim: &Dim, b: &Dim) -> Result<Dim> {
    match b.as_static() {
        Some(v) if v < 0 => dim.add(b),
        _ => Ok(b.clone()),
    }
}

/// Python's `slice.indices` length for a static dim and bounds.
fn static_len(n: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> i64 {
    let (lower, upper) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let clamp = |v: Option<i64>, default: i64| match v {
        None => default,
        Some(v) if v < 0 => (v + n).max(lower),
        Some(v) => v.min(upper),
    };
    let (a, b) =
        if step > 0 { (clamp(start, lower), clamp(stop, upper)) } else { (clamp(start, upper), clamp(stop, lower)) };
    if step > 0 {
        if b > a { (b - a - 1) / step + 1 } else { 0 }
    } else if a > b {
        (a - b - 1) / (-step) + 1
    } else {
        0
    }
}

/// The length of `dim[start:stop:step]`. Static dims and bounds follow numpy; otherwise the
/// bounds are taken to lie inside the dimension (MAX checks that at run time).
fn slice_len(
    ctx: &Ctx,
    axis: usize,
    dim: &Dim,
    start: &Option<Dim>,
    stop: &Option<Dim>,
    step: i64,
    out: &Option<Dim>,
) -> Result<Dim> {
    let stat = |b: &Option<Dim>| b.as_ref().map(|d| d.as_static().ok_or(())).transpose();
    let computed = match (dim.as_static(), stat(start), stat(stop)) {
        (Some(n), Ok(a), Ok(b)) => Some(Dim::stat(static_len(n, a, b, step))),
        _ if step > 0 => {
            let a = match start {
                None => Dim::stat(0),
                Some(s) => from_end(dim, s)?,
            };
            let b = match stop {
                None => dim.clone(),
                Some(s) => from_end(dim, s)?,
            };
            Some(b.sub(&a)?.add(&Dim::stat(step - 1))?.floordiv(&Dim::stat(step))?)
        }
        _ if start.is_none() && stop.is_none() => Some(dim.add(&Dim::stat(-step - 1))?.floordiv(&Dim::stat(-step))?),
        _ => None,
    };
    match (computed, out) {
        (Some(c), Some(o)) => match (c.as_static(), o.as_static()) {
            (Some(x), Some(y)) if x != y => Err(ctx.value_err("indices", format!("the slice on axis {axis} has {x} elements, not the given out_dim {y}"))),
            _ => Ok(o.clone()),
        },
        (_, Some(o)) => Ok(o.clone()),
        (Some(c), None) => Ok(c),
        (None, None) => Err(ctx.value_err(
            "indices",
            format!("cannot work out the length of a negative-step slice of dimension {dim} on axis {axis}; give it as (slice, out_dim)"),
        )),
    }
}

/// The shape of `destination[indices]`, which `source` must have.
fn store_slice(ctx: &Ctx) -> Result<Vec<Type>> {
    let (dest, source) = store_operands(ctx)?;
    let indices = decode(ctx)?;
    let ellipses = indices.iter().filter(|i| matches!(i, Index::Ellipsis)).count();
    if ellipses > 1 {
        return Err(ctx.value_err("indices", "an index can only have a single ellipsis ('...')"));
    }
    let used = indices.len() - ellipses;
    if used > dest.rank() {
        return Err(ctx.value_err(
            "indices",
            format!("too many indices ({used}) for the destination's shape {}", shape_str(&dest.shape)),
        ));
    }
    let mut shape = Vec::with_capacity(dest.rank());
    let mut axis = 0;
    for index in &indices {
        if let Index::Ellipsis = index {
            let n = dest.rank() - used;
            shape.extend(dest.shape[axis..axis + n].iter().cloned());
            axis += n;
            continue;
        }
        let dim = &dest.shape[axis];
        match index {
            Index::At(i) => {
                if let (Some(n), Some(v)) = (dim.as_static(), i.as_static())
                    && (v < -n || v >= n)
                {
                    return Err(
                        ctx.index_err("indices", format!("index {v} is out of range for axis {axis} of size {n}"))
                    );
                }
            }
            Index::Tensor(j) => {
                let t = ctx.tensor(*j)?;
                if t.rank() != 0 || !t.dtype.is_integral() {
                    return Err(
                        ctx.value_err(&ctx.arg(*j), format!("a tensor index must be an integer scalar, got {t}"))
                    );
                }
            }
            Index::Slice { start, stop, step, out } => shape.push(slice_len(ctx, axis, dim, start, stop, *step, out)?),
            Index::Ellipsis => {}
        }
        axis += 1;
    }
    shape.extend(dest.shape[axis..].iter().cloned());
    if source.shape != shape {
        return Err(ctx.value_err(
            "source",
            format!(
                "expected source to have shape {} (the destination slice), got {}",
                shape_str(&shape),
                shape_str(&source.shape)
            ),
        ));
    }
    Ok(vec![Type::Chain])
}

#[cfg(test)]
mod tests {
    use super::super::{Op, infer as infer_op};
    use super::*;
    use crate::attrs::{Attr, Attrs};
    use crate::dtype::DType;
    use crate::error::GraphError;
    use crate::types::DeviceRef;

    fn dim(d: &str) -> Dim {
        d.parse::<i64>().map(Dim::stat).unwrap_or_else(|_| Dim::sym(d).unwrap())
    }

    fn tt(dims: &[&str]) -> TensorType {
        TensorType::new(DType::Float32, dims.iter().map(|d| dim(d)).collect(), DeviceRef::CPU)
    }

    fn run(kind: OpKind, attrs: Attrs, inputs: &[Type]) -> Result<Vec<Type>> {
        infer_op(&Op { kind, attrs }, inputs)
    }

    /// Encodes Python-like indices: ("i", v), ("s", start, stop, step) with "" for None, ("t"), ("...").
    fn enc(items: &[&[&str]]) -> Attrs {
        let (mut kinds, mut bounds, mut flags, mut outs) = (vec![], vec![], vec![], vec![]);
        for it in items {
            let mut f = 0;
            let mut b = vec![Dim::stat(0); 3];
            let kind = match it[0] {
                "i" => {
                    b[0] = dim(it[1]);
                    0
                }
                "s" => {
                    for k in 0..3 {
                        if it[k + 1].is_empty() { f |= 1 << k } else { b[k] = dim(it[k + 1]) }
                    }
                    1
                }
                "t" => 2,
                _ => 3,
            };
            kinds.push(kind);
            bounds.extend(b);
            flags.push(f);
            outs.push(Dim::stat(0));
        }
        Attrs::new()
            .with("index_kinds", Attr::Ints(kinds))
            .with("index_bounds", Attr::Dims(bounds))
            .with("index_flags", Attr::Ints(flags))
            .with("index_out_dims", Attr::Dims(outs))
    }

    fn store(dest: &[&str], source: &[&str], idx: &[&[&str]], extra: &[Type]) -> Result<Vec<Type>> {
        let mut inputs = vec![Type::Chain, Type::Buffer(tt(dest)), Type::Tensor(tt(source))];
        inputs.extend_from_slice(extra);
        run(OpKind::BufferStoreSlice, enc(idx), &inputs)
    }

    #[test]
    fn load_store_and_create_thread_the_chain() {
        let b = Type::Buffer(tt(&["n", "3"]));
        assert_eq!(
            run(OpKind::BufferLoad, Attrs::new(), &[Type::Chain, b.clone()]).unwrap(),
            vec![Type::Tensor(tt(&["n", "3"])), Type::Chain]
        );
        let ok =
            run(OpKind::BufferStore, Attrs::new(), &[Type::Chain, b.clone(), Type::Tensor(tt(&["n", "3"]))]).unwrap();
        assert_eq!(ok, vec![Type::Chain]);
        let err = run(OpKind::BufferStore, Attrs::new(), &[Type::Chain, b.clone(), Type::Tensor(tt(&["m", "3"]))])
            .unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("buffer_store: source:")), "{err}");
        let create = Attrs::new().with("type", Attr::Types(vec![b.clone()]));
        assert_eq!(run(OpKind::BufferCreate, create, &[]).unwrap(), vec![b]);
        let bad = Attrs::new().with("type", Attr::Types(vec![Type::Tensor(tt(&["2"]))]));
        assert!(matches!(run(OpKind::BufferCreate, bad, &[]), Err(GraphError::Type(_))));
    }

    #[test]
    fn store_slice_shapes() {
        assert!(store(&["4", "3"], &["3"], &[&["i", "0"]], &[]).is_ok());
        assert!(store(&["4", "3"], &["2", "3"], &[&["s", "1", "3", ""]], &[]).is_ok());
        assert!(store(&["4", "3"], &["4"], &[&["..."], &["i", "-1"]], &[]).is_ok());
        assert!(store(&["4", "3"], &["2", "3"], &[&["s", "", "", "2"]], &[]).is_ok());
        assert!(store(&["4", "3"], &["4", "3"], &[&["s", "", "", "-1"]], &[]).is_ok());
        assert!(
            store(
                &["n", "3"],
                &["3"],
                &[&["t"]],
                &[Type::Tensor(TensorType::new(DType::Int64, vec![], DeviceRef::CPU))]
            )
            .is_ok()
        );
        let err = store(&["4", "3"], &["3", "3"], &[&["s", "1", "3", ""]], &[]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.contains("expected source to have shape [2, 3]")), "{err}");
        assert!(matches!(store(&["4", "3"], &["3"], &[&["i", "4"]], &[]), Err(GraphError::Index(_))));
        assert!(matches!(
            store(&["4", "3"], &[], &[&["i", "0"], &["i", "0"], &["i", "0"]], &[]),
            Err(GraphError::Value(_))
        ));
    }

    #[test]
    fn store_slice_symbolic_lengths() {
        assert!(store(&["n", "3"], &["n", "3"], &[], &[]).is_ok());
        assert!(store(&["n", "3"], &["m", "3"], &[&["..."]], &[]).is_err());
        let n = dim("n");
        let minus_one = n.sub(&Dim::stat(1)).unwrap();
        let inputs = vec![
            Type::Chain,
            Type::Buffer(tt(&["n", "3"])),
            Type::Tensor(TensorType::new(DType::Float32, vec![minus_one, Dim::stat(3)], DeviceRef::CPU)),
        ];
        assert!(run(OpKind::BufferStoreSlice, enc(&[&["s", "1", "", ""]]), &inputs).is_ok());
        assert!(store(&["n", "3"], &["k", "3"], &[&["s", "0", "k", ""]], &[]).is_ok());
        let half = n.add(&Dim::stat(1)).unwrap().floordiv(&Dim::stat(2)).unwrap();
        let inputs = vec![
            Type::Chain,
            Type::Buffer(tt(&["n"])),
            Type::Tensor(TensorType::new(DType::Float32, vec![half], DeviceRef::CPU)),
        ];
        assert!(run(OpKind::BufferStoreSlice, enc(&[&["s", "", "", "2"]]), &inputs).is_ok());
    }
}
