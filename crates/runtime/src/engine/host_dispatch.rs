//! Host dispatch: which host kernel runs each op that is not elementwise (elementwise ops and
//! fused groups go to cpu::elementwise from exec.rs). One entry point per op family.

use max_graph::ops::{Family, Op, OpKind};

use crate::{Buffer, Error, Result, cpu};

/// Runs `op` on the host; `outputs` are allocated with their planned shapes.
pub fn run_cpu(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    match op.kind.family() {
        Family::Linalg => cpu::linalg::run(op, inputs, outputs),
        Family::Layout => cpu::layout::run(op, inputs, outputs),
        Family::Reduction => cpu::reduction::run(op, inputs, outputs),
        Family::Conv => cpu::conv::run(op, inputs, outputs),
        Family::Indexing => cpu::indexing::run(op, inputs, outputs),
        // A qmatmul with a folded rms_norm and/or gated pair (see engine/passes): the norm, the
        // product(s), the activation times up.
        Family::Quant
            if op.attrs.0.contains_key(super::passes::NORM) || op.attrs.0.contains_key(super::passes::GATED) =>
        {
            folded(op, inputs, outputs)
        }
        // A qmatmul with its residual add (see engine/passes): the product, then the add.
        Family::Quant if op.attrs.0.contains_key(super::passes::RESIDUAL) => {
            let ([lhs, w, res], [out]) = (inputs, outputs) else {
                return Err(Error::Value(format!(
                    "{}: expected lhs, weights, residual and one output",
                    op.kind.name()
                )));
            };
            cpu::quant::run(op, &[lhs.clone(), w.clone()], outputs)?;
            add_in_place(out, res)
        }
        // Sibling qmatmuls (one activation, several weights; see engine/passes): one at a time.
        Family::Quant if op.kind == OpKind::QMatmul && inputs.len() > 2 && inputs.len() == outputs.len() + 1 => {
            for (w, out) in inputs[1..].iter().zip(outputs) {
                cpu::quant::run(op, &[inputs[0].clone(), w.clone()], std::slice::from_ref(out))?;
            }
            Ok(())
        }
        Family::Quant => cpu::quant::run(op, inputs, outputs),
        Family::Attention => cpu::attention::run(op, inputs, outputs),
        Family::Sampling => cpu::sampling::run(op, inputs, outputs),
        Family::Collective => cpu::collective::run(op, inputs, outputs),
        Family::Fft => cpu::fft::run(op, inputs, outputs),
        Family::Random => cpu::random::run(op, inputs, outputs),
        _ => Err(Error::Value(format!("{}: no CPU kernel for this op", op.kind.name()))),
    }
}

/// out += res, both f32 host buffers of one shape (out contiguous).
fn add_in_place(out: &Buffer, res: &Buffer) -> Result<()> {
    if out.dtype() != max_graph::DType::Float32 || res.dtype() != out.dtype() || res.shape() != out.shape() {
        return Err(Error::Value(format!(
            "qmatmul: the residual is {} {:?}, the product {} {:?}",
            res.dtype(),
            res.shape(),
            out.dtype(),
            out.shape()
        )));
    }
    let res = if res.is_contiguous() { res.clone() } else { res.contiguous()? };
    let n = out.num_elements();
    // SAFETY: both are contiguous host buffers of n f32 values; out is this step's own result.
    let (o, r) = unsafe {
        (
            std::slice::from_raw_parts_mut(out.addr() as *mut f32, n),
            std::slice::from_raw_parts(res.addr() as *const f32, n),
        )
    };
    for (a, b) in o.iter_mut().zip(r) {
        *a += *b;
    }
    Ok(())
}

/// Ops whose result shape depends on the input values (nonzero's count of non-zero elements,
/// repeat_interleave's sum of a tensor of counts). When such a result's shape cannot be
/// evaluated before the step runs, the executor calls `run_dynamic` instead of `run_cpu`.
pub fn data_dependent(kind: OpKind) -> bool {
    matches!(kind, OpKind::NonZero | OpKind::RepeatInterleave)
}

pub use crate::shared::Dynamic;

/// Runs a data-dependent op on host `inputs`, allocating its results.
pub fn run_dynamic(op: &Op, inputs: &[Buffer]) -> Result<Dynamic> {
    match op.kind {
        OpKind::NonZero => cpu::indexing::nonzero_dynamic(op, inputs),
        OpKind::RepeatInterleave => cpu::layout::repeat_interleave_dynamic(op, inputs),
        _ => Err(Error::Value(format!("{}: not a data-dependent op", op.kind.name()))),
    }
}

/// A qmatmul step with a folded rms_norm and/or a gated pair (engine/gpu/quant.rs `folded` has
/// the layout): the steps it replaced, one at a time, through its scratch outputs.
fn folded(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let bad = || {
        Error::Value(format!("{}: the inputs and outputs of a product with folded steps do not match", op.kind.name()))
    };
    let (mut ins, mut outs) = (inputs.to_vec(), outputs.to_vec());
    let mut op = op.clone();
    if let Some((norm, product)) = super::passes::split_qnorm(&op) {
        let (gamma, normed) = (ins.pop().ok_or_else(bad)?, outs.pop().ok_or_else(bad)?);
        let x = ins.first().ok_or_else(bad)?.clone();
        run_cpu(&norm, &[x, gamma], std::slice::from_ref(&normed))?;
        ins[0] = normed;
        op = product;
    }
    let Some((act, product)) = super::passes::split_qgated(&op) else { return run_cpu(&op, &ins, &outs) };
    let ([x, wg, wu], [out, gate, up]) = (&ins[..], &outs[..]) else { return Err(bad()) };
    run_cpu(&product, &[x.clone(), wg.clone()], std::slice::from_ref(gate))?;
    run_cpu(&product, &[x.clone(), wu.clone()], std::slice::from_ref(up))?;
    let group = super::passes::gated_group(act, out.dtype(), out.shape());
    cpu::elementwise::run(&group, &[gate.clone(), up.clone()], out)
}
