//! The writing indexing ops (scatter, scatter_nd, masked_scatter: a copy of the input with
//! elements replaced, later writes to the same place winning) and nonzero.

use max_graph::attrs::Attr;
use max_graph::ops::Op;
use max_graph::{DType, Dim};

use super::{axis_of, bytes, bytes_mut, read_indices, resolve};
use crate::cpu::cast::{Canon, Elem};
use crate::shared::Dynamic;
use crate::{Buffer, Device, Error, Result, with_cast_type};

fn same_dtype(op: &Op, input: &Buffer, updates: &Buffer) -> Result<()> {
    if input.dtype() != updates.dtype() {
        return Err(Error::Value(format!(
            "{}: updates have dtype {} but the input has {}",
            op.kind.name(),
            updates.dtype(),
            input.dtype()
        )));
    }
    Ok(())
}

/// Copies the input into the output (which has the input's type) and returns the output bytes.
///
/// # Safety
/// `out` must be this step's own output buffer, not aliased by any input.
#[allow(clippy::mut_from_ref)]
unsafe fn start_from_input<'a>(op: &Op, input: &Buffer, out: &'a Buffer) -> Result<&'a mut [u8]> {
    if out.nbytes() != input.nbytes() {
        return Err(Error::Value(format!(
            "{}: the result has {} bytes but the input {}",
            op.kind.name(),
            out.nbytes(),
            input.nbytes()
        )));
    }
    // SAFETY: see the function's contract.
    let dst = unsafe { bytes_mut(out) };
    dst.copy_from_slice(bytes(input));
    Ok(dst)
}

/// Row-major element strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Advances the row-major coordinate `c` within `shape`.
fn step(c: &mut [usize], shape: &[usize]) {
    for d in (0..c.len()).rev() {
        c[d] += 1;
        if c[d] < shape[d] {
            return;
        }
        c[d] = 0;
    }
}

/// `out = input` except `out[c with c[axis] = indices[c]] = updates[c]` for every coordinate
/// `c` of `updates` (which is no larger than the input off the axis), in row-major order.
pub(super) fn scatter(op: &Op, input: &Buffer, updates: &Buffer, indices: &Buffer, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    same_dtype(op, input, updates)?;
    let (shape, ushape) = (input.shape(), updates.shape());
    let axis = axis_of(op, input.rank())?;
    if ushape != indices.shape() || ushape.len() != shape.len() {
        return Err(Error::Value(format!(
            "{name}: updates {ushape:?} and indices {:?} must have one shape, of the input's rank {}",
            indices.shape(),
            shape.len()
        )));
    }
    for (d, (&u, &n)) in ushape.iter().zip(shape).enumerate() {
        if d != axis && u > n {
            return Err(Error::Value(format!(
                "{name}: dimension {d} of updates is {u}, larger than the input's {n} (shape {shape:?})"
            )));
        }
    }
    let size = shape[axis];
    let targets: Vec<usize> = read_indices(op, indices)?
        .into_iter()
        .map(|i| resolve(op, i, size, &|| format!("axis {axis}")))
        .collect::<Result<_>>()?;
    let esize = input.dtype().size_in_bytes();
    // SAFETY: out is this step's own output buffer.
    let dst = unsafe { start_from_input(op, input, out) }?;
    let src = bytes(updates);
    let st = strides(shape);
    let mut c = vec![0usize; shape.len()];
    for (u, &t) in targets.iter().enumerate() {
        let off: usize = c.iter().zip(&st).enumerate().map(|(d, (&i, &s))| if d == axis { t * s } else { i * s }).sum();
        dst[off * esize..(off + 1) * esize].copy_from_slice(&src[u * esize..(u + 1) * esize]);
        step(&mut c, ushape);
    }
    Ok(())
}

/// `out = input` except the slice `out[indices[u, :]]` (the first k dims) becomes `updates[u]`,
/// for each index vector `u` in order.
pub(super) fn scatter_nd(op: &Op, input: &Buffer, updates: &Buffer, indices: &Buffer, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    same_dtype(op, input, updates)?;
    let shape = input.shape();
    let Some((&k, udims)) = indices.shape().split_last() else {
        return Err(Error::Value(format!("{name}: indices must have at least one dimension")));
    };
    if k < 1 || k > shape.len() {
        return Err(Error::Value(format!(
            "{name}: index vectors of length {k} cannot address an input of rank {}",
            shape.len()
        )));
    }
    let want: Vec<usize> = udims.iter().chain(&shape[k..]).copied().collect();
    if updates.shape() != want.as_slice() {
        return Err(Error::Value(format!(
            "{name}: updates must have shape indices.shape[:-1] + input.shape[{k}:] = {want:?}, got {:?}",
            updates.shape()
        )));
    }
    let row = shape[k..].iter().product::<usize>() * input.dtype().size_in_bytes();
    let raw = read_indices(op, indices)?;
    let mut starts = Vec::with_capacity(raw.len() / k);
    for vector in raw.chunks_exact(k) {
        let mut lin = 0usize;
        for (t, (&i, &d)) in vector.iter().zip(shape).enumerate() {
            lin = lin * d + resolve(op, i, d, &|| format!("dimension {t} of the input"))?;
        }
        starts.push(lin * row);
    }
    // SAFETY: out is this step's own output buffer.
    let dst = unsafe { start_from_input(op, input, out) }?;
    let src = bytes(updates);
    for (u, &at) in starts.iter().enumerate() {
        dst[at..at + row].copy_from_slice(&src[u * row..(u + 1) * row]);
    }
    Ok(())
}

/// Calls `f(position, mask_offset)` for every position of `shape` in row-major order, with the
/// element offset of that position in `mask` broadcast to `shape`.
fn walk_broadcast(shape: &[usize], mask: &[usize], mut f: impl FnMut(usize, usize)) -> Result<()> {
    let pad = shape.len().checked_sub(mask.len()).ok_or_else(|| Error::Value("mask has a higher rank".into()))?;
    let mst = strides(mask);
    let mut bst = vec![0usize; shape.len()];
    for (i, (&m, &s)) in mask.iter().zip(&mst).enumerate() {
        if m != 1 {
            if m != shape[pad + i] {
                return Err(Error::Value(format!("the mask's shape {mask:?} does not broadcast to {shape:?}")));
            }
            bst[pad + i] = s;
        }
    }
    let n: usize = shape.iter().product();
    let mut c = vec![0usize; shape.len()];
    for p in 0..n {
        f(p, c.iter().zip(&bst).map(|(i, s)| i * s).sum());
        step(&mut c, shape);
    }
    Ok(())
}

/// `out = input` with the elements of `updates`, in row-major order, written where `mask`
/// (broadcast to the input) is true. `updates` must hold at least as many elements as there
/// are true positions; a static `out_dim` must equal their number.
pub(super) fn masked_scatter(op: &Op, input: &Buffer, mask: &Buffer, updates: &Buffer, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    same_dtype(op, input, updates)?;
    if mask.dtype() != DType::Bool {
        return Err(Error::Value(format!("{name}: the mask must be bool, got {}", mask.dtype())));
    }
    let m = bytes(mask);
    let mut positions = Vec::new();
    walk_broadcast(input.shape(), mask.shape(), |p, at| {
        if m[at] != 0 {
            positions.push(p);
        }
    })
    .map_err(|e| Error::Value(format!("{name}: {e}")))?;
    let count = positions.len();
    if let Some(n) = out_dim(op)?.as_static()
        && n != count as i64
    {
        return Err(Error::Value(format!("{name}: the mask has {count} true elements but out_dim is {n}")));
    }
    if updates.num_elements() < count {
        return Err(Error::Value(format!(
            "{name}: the mask has {count} true elements but updates (shape {:?}) has only {}",
            updates.shape(),
            updates.num_elements()
        )));
    }
    let esize = input.dtype().size_in_bytes();
    // SAFETY: out is this step's own output buffer.
    let dst = unsafe { start_from_input(op, input, out) }?;
    let src = bytes(updates);
    for (u, p) in positions.into_iter().enumerate() {
        dst[p * esize..(p + 1) * esize].copy_from_slice(&src[u * esize..(u + 1) * esize]);
    }
    Ok(())
}

fn out_dim(op: &Op) -> Result<&Dim> {
    match op.attrs.get("out_dim") {
        Some(Attr::Dims(d)) if d.len() == 1 => Ok(&d[0]),
        _ => Err(Error::Value(format!("{}: attribute out_dim must be a single dim", op.kind.name()))),
    }
}

/// Row-major linear positions of the non-zero elements of `x` (NaN counts as non-zero, -0.0
/// as zero).
fn nonzero_positions(op: &Op, x: &Buffer) -> Result<Vec<usize>> {
    let n = x.num_elements();
    let dtype = x.dtype();
    with_cast_type!(
        dtype,
        T,
        {
            let p = x.addr() as *const T;
            Ok((0..n)
                .filter(|&i| {
                    // SAFETY: x is a contiguous host buffer of n elements of T.
                    match unsafe { std::ptr::read_unaligned(p.add(i)) }.canon() {
                        Canon::F(v) => v != 0.0,
                        Canon::I(v) => v != 0,
                        Canon::U(v) => v != 0,
                    }
                })
                .collect())
        },
        Err(Error::Value(format!("{}: unsupported dtype {dtype}", op.kind.name())))
    )
}

/// Writes the coordinates of `positions` (within `shape`) as int64 rows into `out`.
fn write_coords(positions: &[usize], shape: &[usize], out: &Buffer) {
    let rank = shape.len();
    let p = out.addr() as *mut i64;
    for (r, &lin) in positions.iter().enumerate() {
        let mut rest = lin;
        for d in (0..rank).rev() {
            // SAFETY: out holds positions.len() * rank int64 elements (checked by the callers).
            unsafe { std::ptr::write_unaligned(p.add(r * rank + d), (rest % shape[d]) as i64) };
            rest /= shape[d];
        }
    }
}

/// nonzero into a result whose shape was known before running (out_dim static or bound).
pub(super) fn nonzero_into(op: &Op, x: &Buffer, out: &Buffer) -> Result<()> {
    let positions = nonzero_positions(op, x)?;
    let want = [positions.len(), x.rank()];
    if out.dtype() != DType::Int64 || out.shape() != want {
        return Err(Error::Value(format!(
            "{}: the input has {} non-zero elements, so the result is int64 {want:?}, but out_dim {} makes it {} {:?}",
            op.kind.name(),
            positions.len(),
            out_dim(op)?,
            out.dtype(),
            out.shape()
        )));
    }
    write_coords(&positions, x.shape(), out);
    Ok(())
}

/// nonzero allocating its own result, `[count, rank]`; binds out_dim's symbol to the count (a
/// static out_dim must equal it).
pub fn nonzero_dynamic(op: &Op, inputs: &[Buffer]) -> Result<Dynamic> {
    let name = op.kind.name();
    let [x] = inputs else {
        return Err(Error::Value(format!("{name}: expected 1 input, got {}", inputs.len())));
    };
    let positions = nonzero_positions(op, x)?;
    let count = positions.len() as i64;
    let d = out_dim(op)?;
    let bound = if let Some(s) = d.as_symbol() {
        vec![(s.to_string(), count)]
    } else if let Some(n) = d.as_static() {
        if n != count {
            return Err(Error::Value(format!("{name}: the input has {count} non-zero elements but out_dim is {n}")));
        }
        vec![]
    } else {
        return Err(Error::Value(format!(
            "{name}: out_dim {d} must be a plain symbol (or a static size) to be bound to the number of non-zero elements"
        )));
    };
    let out = Buffer::empty(DType::Int64, &[count, x.rank() as i64], &Device::Cpu)?;
    write_coords(&positions, x.shape(), &out);
    Ok((vec![out], bound))
}
