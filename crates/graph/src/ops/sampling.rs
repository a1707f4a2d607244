//! The ops that turn a batch of logits into next tokens: sampling with temperature, top-k,
//! top-p and min-p, and the repetition, frequency and presence penalties. Every parameter is
//! per row (a tensor of one value per sequence), so one graph serves a batch of requests with
//! different settings; there are no attributes.
//!
//! - `sample_tokens(logits [B, V] float32, temperature [B] float32, top_k [B] int64,
//!   top_p [B] float32, min_p [B] float32, seed [B] uint64) -> [B] int64`. Row `b` is greedy
//!   (the index of its largest logit, the lowest on ties, NaN counting as -inf) when
//!   `temperature[b] <= 0` (or NaN) or `top_k[b] == 1`, or when no `z` (below) is finite (a
//!   temperature so small that the quotients overflow). Otherwise `z = logits[b] /
//!   temperature[b]` and the row keeps the `z_i >= thr`, where `thr` is the largest of: the
//!   k-th largest `z` when `1 < k < V` (ties kept), `max(z) + ln(min_p)` when `min_p > 0`, and,
//!   when `top_p < 1`, the top-p threshold over what those two keep (the smallest set of the
//!   largest `z` whose `exp(z - max z)` mass reaches `top_p` of the kept mass); the largest `z`
//!   is always kept. The token is the Gumbel-max pick `argmax(z_i + g_i)` over the kept set,
//!   with `g_i` drawn from `seed[b]` and `i` by a counter-based hash: the same inputs give the
//!   same tokens on every device. crates/runtime/src/cpu/sampling says how, to the bit.
//! - `apply_penalties(logits [B, V] float32, tokens [N] int64, offsets [B+1] uint32,
//!   prompt_lengths [B] uint32, frequency [B] float32, presence [B] float32, repetition [B]
//!   float32) -> [B, V] float32`: row `b`'s history is `tokens[offsets[b]:offsets[b+1]]`, its
//!   prompt (the first `prompt_lengths[b]`) then its generated tokens. Every token id in the
//!   history has its logit divided by `repetition[b]` when positive, multiplied when not; then
//!   each id generated `c > 0` times loses `frequency[b] * c + presence[b]`.

use super::{Ctx, OpKind};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::Result;
use crate::types::{TensorType, Type};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::SampleTokens => sample_tokens(ctx),
        OpKind::ApplyPenalties => apply_penalties(ctx),
        _ => Err(ctx.value_err("op", "not a sampling op")),
    }
}

/// Input `i`: a tensor of `dtype` and rank `rank`, else a TypeError or ValueError naming it.
fn input<'a>(ctx: &Ctx<'a>, i: usize, dtype: DType, rank: usize, what: &str) -> Result<&'a TensorType> {
    ctx.tensor_with(i, |d| d == dtype, &dtype.to_string(), rank, what)
}

/// One value per row of `logits`: input `i` of `dtype` and shape `[batch]`.
fn per_row(ctx: &Ctx, i: usize, dtype: DType, batch: &Dim) -> Result<()> {
    let t = input(ctx, i, dtype, 1, "[batch], one value per row of logits")?;
    ctx.same_dim(&ctx.arg(i), "one value per row of logits", &t.shape[0], batch)
}

fn sample_tokens(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(6)?;
    let logits = input(ctx, 0, DType::Float32, 2, "[batch, vocab]")?;
    let batch = &logits.shape[0];
    per_row(ctx, 1, DType::Float32, batch)?;
    per_row(ctx, 2, DType::Int64, batch)?;
    per_row(ctx, 3, DType::Float32, batch)?;
    per_row(ctx, 4, DType::Float32, batch)?;
    per_row(ctx, 5, DType::UInt64, batch)?;
    let device = ctx.same_device(&[0, 1, 2, 3, 4, 5])?;
    Ok(vec![Type::Tensor(TensorType::new(DType::Int64, vec![batch.clone()], device))])
}

fn apply_penalties(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(7)?;
    let logits = input(ctx, 0, DType::Float32, 2, "[batch, vocab]")?;
    let batch = &logits.shape[0];
    input(ctx, 1, DType::Int64, 1, "[tokens], every row's history one after another")?;
    let offsets = input(ctx, 2, DType::UInt32, 1, "[batch + 1]")?;
    if let Some(n) = offsets.shape[0].as_static()
        && n == 0
    {
        return Err(ctx.value_err("offsets", "must hold batch + 1 values, got none"));
    }
    let rows = offsets.shape[0].sub(&Dim::stat(1)).map_err(|e| ctx.value_err("offsets", e.to_string()))?;
    ctx.same_dim("offsets", "batch + 1 offsets for the rows of logits", &rows, batch)?;
    per_row(ctx, 3, DType::UInt32, batch)?;
    for i in 4..7 {
        per_row(ctx, i, DType::Float32, batch)?;
    }
    ctx.same_device(&[0, 1, 2, 3, 4, 5, 6])?;
    Ok(vec![Type::Tensor(logits.clone())])
}

/// sample_tokens takes rows of fewer values than this: the top-p weights of a row (up to 2^40
/// each, in fixed point) must sum exactly in a u64.
pub const MAX_VOCAB: usize = 1 << 24;

/// The row geometry of a sampling op's run-time tensors, checked once for both backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub batch: usize,
    pub vocab: usize,
}

impl Rows {
    /// `logits [batch, vocab]`, and a length per named per-row tensor that must be `batch`.
    pub fn check(logits: &[usize], per_row: &[(&str, usize)]) -> std::result::Result<Rows, String> {
        let &[batch, vocab] = logits else {
            return Err(format!("logits: must be [batch, vocab], got {logits:?}"));
        };
        for &(name, n) in per_row {
            if n != batch {
                return Err(format!("{name}: holds {n} values for {batch} rows of logits"));
            }
        }
        Ok(Rows { batch, vocab })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::GraphError;
    use crate::ops::testing::{infer_plain as run, tt as t};

    fn sample_inputs(b: &str) -> Vec<Type> {
        vec![
            t(DType::Float32, &[b, "32000"]),
            t(DType::Float32, &[b]),
            t(DType::Int64, &[b]),
            t(DType::Float32, &[b]),
            t(DType::Float32, &[b]),
            t(DType::UInt64, &[b]),
        ]
    }

    #[test]
    fn sample_tokens_gives_one_int64_per_row() {
        for b in ["B", "4"] {
            assert_eq!(run(OpKind::SampleTokens, &sample_inputs(b)).unwrap(), vec![t(DType::Int64, &[b])]);
        }
    }

    #[test]
    fn sample_tokens_names_the_bad_argument() {
        let mut bad = sample_inputs("4");
        bad[2] = t(DType::Int32, &["4"]);
        let e = run(OpKind::SampleTokens, &bad).unwrap_err();
        assert!(matches!(e, GraphError::Type(_)), "{e:?}");
        assert!(e.to_string().starts_with("sample_tokens: top_k: must be int64, got int32"), "{e}");

        let mut bad = sample_inputs("4");
        bad[4] = t(DType::Float32, &["3"]);
        let e = run(OpKind::SampleTokens, &bad).unwrap_err();
        assert!(matches!(e, GraphError::Value(_)), "{e:?}");
        assert!(
            e.to_string().starts_with("sample_tokens: min_p: one value per row of logits: 3 differs from 4"),
            "{e}"
        );

        let mut bad = sample_inputs("4");
        bad[0] = t(DType::Float32, &["4", "2", "8"]);
        let e = run(OpKind::SampleTokens, &bad).unwrap_err().to_string();
        assert!(e.starts_with("sample_tokens: logits: must be [batch, vocab]"), "{e}");

        let mut bad = sample_inputs("4");
        bad[5] = t(DType::Int64, &["4"]);
        let e = run(OpKind::SampleTokens, &bad).unwrap_err().to_string();
        assert!(e.starts_with("sample_tokens: seed: must be uint64"), "{e}");

        // A symbolic batch agrees with anything.
        let mut sym = sample_inputs("4");
        sym[1] = t(DType::Float32, &["B"]);
        assert!(run(OpKind::SampleTokens, &sym).is_ok());
        let e = run(OpKind::SampleTokens, &sample_inputs("4")[..5]).unwrap_err().to_string();
        assert!(e.contains("expected 6 inputs"), "{e}");
    }

    fn penalty_inputs(b: &str, b1: &str) -> Vec<Type> {
        vec![
            t(DType::Float32, &[b, "100"]),
            t(DType::Int64, &["N"]),
            t(DType::UInt32, &[b1]),
            t(DType::UInt32, &[b]),
            t(DType::Float32, &[b]),
            t(DType::Float32, &[b]),
            t(DType::Float32, &[b]),
        ]
    }

    #[test]
    fn apply_penalties_keeps_the_logits_type() {
        let out = run(OpKind::ApplyPenalties, &penalty_inputs("3", "4")).unwrap();
        assert_eq!(out, vec![t(DType::Float32, &["3", "100"])]);
        assert!(run(OpKind::ApplyPenalties, &penalty_inputs("B", "B1")).is_ok());
    }

    #[test]
    fn apply_penalties_names_the_bad_argument() {
        let e = run(OpKind::ApplyPenalties, &penalty_inputs("3", "3")).unwrap_err().to_string();
        assert!(
            e.starts_with("apply_penalties: offsets: batch + 1 offsets for the rows of logits: 2 differs from 3"),
            "{e}"
        );
        let mut bad = penalty_inputs("3", "4");
        bad[1] = t(DType::UInt32, &["N"]);
        let e = run(OpKind::ApplyPenalties, &bad).unwrap_err();
        assert!(matches!(e, GraphError::Type(_)));
        assert!(e.to_string().starts_with("apply_penalties: tokens: must be int64, got uint32"), "{e}");
        let mut bad = penalty_inputs("3", "4");
        bad[6] = t(DType::Float16, &["3"]);
        let e = run(OpKind::ApplyPenalties, &bad).unwrap_err().to_string();
        assert!(e.starts_with("apply_penalties: repetition: must be float32"), "{e}");
        let mut bad = penalty_inputs("3", "4");
        bad[3] = t(DType::UInt32, &["2"]);
        let e = run(OpKind::ApplyPenalties, &bad).unwrap_err().to_string();
        assert!(e.starts_with("apply_penalties: prompt_lengths: one value per row of logits: 2 differs from 3"), "{e}");
        let mut bad = penalty_inputs("3", "4");
        bad[0] = t(DType::BFloat16, &["3", "100"]);
        let e = run(OpKind::ApplyPenalties, &bad).unwrap_err().to_string();
        assert!(e.starts_with("apply_penalties: logits: must be float32, got bfloat16"), "{e}");
    }

    #[test]
    fn rows_check_run_time_shapes() {
        assert_eq!(Rows::check(&[2, 7], &[("seed", 2)]), Ok(Rows { batch: 2, vocab: 7 }));
        assert_eq!(Rows::check(&[2, 7], &[("seed", 3)]), Err("seed: holds 3 values for 2 rows of logits".into()));
        assert!(Rows::check(&[2], &[]).is_err());
    }
}
