//! rope: rotary position embeddings of `x [T, H, D]` at `positions [T]`, from the `(cos, sin)`
//! pairs of `freqs_cis [S, R]` (float32 or x's dtype). The first R dims of each head rotate,
//! as adjacent pairs (interleaved) or as dim i with dim i + R/2 (half-split); the rest copy.

use max_graph::DType;
use max_graph::ops::Op;
use max_graph::ops::attention::RopeParams;
use rayon::prelude::*;

use super::{Act, indices, slice, slice_mut, with_act};
use crate::{Buffer, Error, Result};

pub(super) fn run(op: &Op, x: &Buffer, freqs: &Buffer, positions: &Buffer, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let p = RopeParams::from_attrs(&op.attrs).map_err(|m| Error::Value(format!("{name}: {m}")))?;
    let &[t, h, d] = x.shape() else {
        return Err(Error::Value(format!("{name}: x must be [tokens, heads, head_dim], got {:?}", x.shape())));
    };
    let &[s, r] = freqs.shape() else {
        return Err(Error::Value(format!(
            "{name}: freqs_cis must be [positions, rotary_dim], got {:?}",
            freqs.shape()
        )));
    };
    if r % 2 != 0 || r > d || r == 0 {
        return Err(Error::Value(format!("{name}: rotary dim {r} must be even, positive and at most {d}")));
    }
    let pos = indices(name, "positions", positions)?;
    if pos.len() != t {
        return Err(Error::Value(format!("{name}: {} positions for {t} rows", pos.len())));
    }
    if let Some(&bad) = pos.iter().find(|&&q| q as usize >= s) {
        return Err(Error::Value(format!("{name}: position {bad} is past the {s} rows of freqs_cis")));
    }
    // The angles of the rows used, as f32 (the table itself when it is f32).
    let converted: Vec<f32>;
    let table: &[f32] = if freqs.dtype() == DType::Float32 {
        slice::<f32>(name, freqs)?
    } else {
        converted = with_act!(
            name,
            freqs.dtype(),
            F,
            Ok(slice::<F>(name, freqs)?.iter().map(|v| v.load()).collect::<Vec<f32>>())
        )?;
        &converted
    };
    if t == 0 || h == 0 {
        return Ok(());
    }
    with_act!(name, x.dtype(), T, {
        let src = slice::<T>(name, x)?;
        let dst = slice_mut::<T>(name, out)?;
        let row = h * d;
        let work = |(i, o): (usize, &mut [T])| {
            let angles = &table[pos[i] as usize * r..][..r];
            let xi = &src[i * row..][..row];
            for head in 0..h {
                let (xs, os) = (&xi[head * d..][..d], &mut o[head * d..][..d]);
                for k in 0..r / 2 {
                    let (c, sn) = (angles[2 * k], angles[2 * k + 1]);
                    let (a, b) = if p.interleaved { (2 * k, 2 * k + 1) } else { (k, k + r / 2) };
                    let (xa, xb) = (xs[a].load(), xs[b].load());
                    os[a] = T::store(xa * c - xb * sn);
                    os[b] = T::store(xb * c + xa * sn);
                }
                os[r..].copy_from_slice(&xs[r..]);
            }
        };
        if t * row >= 1 << 15 {
            dst.par_chunks_mut(row).enumerate().for_each(work);
        } else {
            dst.chunks_mut(row).enumerate().for_each(work);
        }
        Ok(())
    })
}
