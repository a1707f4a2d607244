//! GPTQ weights as MAX stores them (the input of its GPTQ repack): a uint8 `[K_bytes, N]`
//! tensor whose first `N * K / 2` bytes are GPTQ's `qweight`, int32 `[K / 8, N]` (row k of the
//! weight is nibble `k % 8` of word `[k / 8, n]`), followed by `scales`, float16
//! `[K / group, N]`. 4 bits, symmetric: `w[k, n] = (q - 8) * scale[k / group, n]`.
//!
//! With `desc_act`, the int32 permutation `perm` of K reorders the weight rows (the scales stay
//! in order): row `c` of the weight is `(q[perm[c], n] - 8) * scale[c / group, n]`, and the
//! graph gathers `lhs`'s columns by the same permutation before the qmatmul.

use max_graph::ops::Op;

use crate::cpu::indexing::{bytes, read_indices, resolve};
use crate::{Buffer, Error, Result};

pub(super) struct Gptq<'a> {
    words: &'a [u8],
    scales: &'a [u8],
    perm: Option<Vec<usize>>,
    k: usize,
    n: usize,
    group: usize,
}

impl<'a> Gptq<'a> {
    /// Checks `rhs` (and `perm`) against `k` columns of lhs and groups of `group` rows.
    pub fn new(op: &Op, rhs: &'a Buffer, perm: Option<&Buffer>, k: usize, group: usize) -> Result<Gptq<'a>> {
        let name = op.kind.name();
        let &[rows, n] = rhs.shape() else {
            return Err(Error::Value(format!("{name}: GPTQ weights must be a matrix, got shape {:?}", rhs.shape())));
        };
        if group == 0 || !k.is_multiple_of(group) || !k.is_multiple_of(8) {
            return Err(Error::Value(format!("{name}: K = {k} is not a multiple of the group size {group}")));
        }
        let want = k / 2 + 2 * (k / group);
        if rows != want {
            return Err(Error::Value(format!(
                "{name}: GPTQ weights for K = {k} (groups of {group}) have K/2 + 2*K/{group} = {want} rows of bytes, got {rows}"
            )));
        }
        let perm = match perm {
            None => None,
            Some(p) => {
                let idx = read_indices(op, p)?;
                if idx.len() != k {
                    return Err(Error::Value(format!(
                        "{name}: the permutation has {} entries, expected {k}",
                        idx.len()
                    )));
                }
                let v = idx
                    .into_iter()
                    .map(|i| resolve(op, i, k, &|| "the GPTQ permutation (the K dimension)".to_string()))
                    .collect::<Result<Vec<usize>>>()?;
                Some(v)
            }
        };
        let all = bytes(rhs);
        let (words, scales) = all.split_at(n * k / 2);
        Ok(Gptq { words, scales, perm, k, n, group })
    }

    /// Writes column `j` of the dequantized weight (its K values) into `out`.
    pub fn column(&self, j: usize, out: &mut [f32]) {
        let n = self.n;
        for (c, o) in out.iter_mut().enumerate().take(self.k) {
            let s = self.perm.as_ref().map_or(c, |p| p[c]);
            let at = ((s / 8) * n + j) * 4;
            let word = u32::from_le_bytes([self.words[at], self.words[at + 1], self.words[at + 2], self.words[at + 3]]);
            let q = (word >> (4 * (s % 8))) & 0xF;
            let at = ((c / self.group) * n + j) * 2;
            let scale = half::f16::from_le_bytes([self.scales[at], self.scales[at + 1]]).to_f32();
            *o = (q as f32 - 8.0) * scale;
        }
    }
}
