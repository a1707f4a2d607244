//! apply_penalties on the host: each row copies its logits and then changes the entry of every
//! distinct token id of its history once (rows in parallel). The order of operations is the
//! GPU kernel's, so both give the same bits.

use rayon::prelude::*;

/// One row's history and penalties.
#[derive(Clone, Copy, Debug)]
pub struct RowPenalties<'a> {
    /// The prompt's tokens, then the generated ones.
    pub history: &'a [i64],
    /// How many of `history` are the prompt's.
    pub prompt: usize,
    pub frequency: f32,
    pub presence: f32,
    pub repetition: f32,
}

/// The logit of a token id of the history, penalized: repetition, then, for an id generated
/// `generated` times, frequency and presence.
#[inline]
pub fn penalize(x: f32, generated: u32, r: &RowPenalties) -> f32 {
    let mut v = if x > 0.0 { x / r.repetition } else { x * r.repetition };
    if generated > 0 {
        v -= r.frequency * generated as f32 + r.presence;
    }
    v
}

/// `out` = `logits` ([rows.len(), vocab]) with the penalties of `rows`. Every token id must be
/// in 0..vocab (the caller checks).
pub fn apply(logits: &[f32], vocab: usize, rows: &[RowPenalties], out: &mut [f32]) {
    out.copy_from_slice(logits);
    let row = |(b, o): (usize, &mut [f32])| {
        let r = &rows[b];
        // (id, generated) of every history token, grouped by id.
        let mut ids: Vec<(i64, bool)> = r.history.iter().enumerate().map(|(j, &t)| (t, j >= r.prompt)).collect();
        ids.sort_unstable();
        for group in ids.chunk_by(|a, b| a.0 == b.0) {
            let t = group[0].0 as usize;
            let generated = group.iter().filter(|e| e.1).count() as u32;
            o[t] = penalize(o[t], generated, r);
        }
    };
    if rows.len() > 1 && out.len() >= 1 << 15 {
        out.par_chunks_mut(vocab.max(1)).enumerate().for_each(row);
    } else {
        out.chunks_mut(vocab.max(1)).enumerate().for_each(row);
    }
}
