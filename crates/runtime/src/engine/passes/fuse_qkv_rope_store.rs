//! A layer's q/k/v products take its rope + KV-cache store (fuse_rope_store's step) into their
//! store: `kv_cache_store[rope](chain, blocks, k, v, slots, q, freqs, positions)` whose q, k and
//! v are (through views at most) the three outputs of one quantized sibling step becomes that
//! step with the attribute [`ROPE_STORE`], the store's attributes as `kv_cache_store.<name>`,
//! inputs `[x, W_q, W_k, W_v, (gamma), chain, blocks, slots, freqs, positions]` and outputs
//! `[q, k, v, (normalised x), chain, rope(q)]` (the products' own outputs, then the store's).
//! The GPU runs it as one GEMV launch at 1-2 tokens (launch/qgemv_fold.rs `QRope`: the
//! products are stored rotated into rope(q) and the cache instead of their outputs), otherwise
//! as the product step and the rope + store launch through those outputs. Only interleaved
//! ropes fuse into quantized products (a rotated pair is two adjacent rows of the product,
//! which one warp holds), of GPU-placed products without a residual or gate whose outputs
//! nothing else reads; the step takes the store's place. Sibling 16-bit or f32 products read as
//! stored (a `Gemm` step of three weights, with a folded norm at most) take the store as
//! [`GemmEpilogue::rope_store`], with either rotation (gemv_nt.cu's warps hold a pair of rows
//! wherever they lie: launch/gemv_nt.rs `NtRope`). Top level only.

use std::collections::HashMap;

use max_graph::attrs::Attr;
use max_graph::ops::attention::STORE_ROPE;
use max_graph::ops::{Op, OpKind};
use max_graph::{DeviceKind, Type, ValueId};

use crate::engine::plan::is_view;
use crate::engine::program::{Body, GemmEpilogue, Step, StepKind};

/// The attribute of a qmatmul step with a folded rope + KV-cache store.
pub const ROPE_STORE: &str = "rope_store";

/// The kv_cache_store folded into a qmatmul step's `op` and the product's own op, or None.
pub fn split_rope_store(op: &Op) -> Option<(Op, Op)> {
    if !matches!(op.attrs.get(ROPE_STORE), Some(Attr::Bool(true))) {
        return None;
    }
    let (store, product) = super::split_prefixed(op, ROPE_STORE, "kv_cache_store.");
    Some((Op { kind: OpKind::KvCacheStore, attrs: store }, Op { kind: op.kind, attrs: product }))
}

/// Where the store's input `v` comes from: the product step, its output and the view steps
/// between (each view's output read by nothing but the next step).
fn source(
    body: &Body,
    producer: &HashMap<ValueId, usize>,
    readers: &HashMap<ValueId, Vec<usize>>,
    mut v: ValueId,
    mut reader: usize,
) -> Option<(usize, ValueId, Vec<usize>)> {
    let mut views = vec![];
    for _ in 0..4 {
        if readers.get(&v).is_none_or(|r| r != &[reader]) || body.results.contains(&v) {
            return None;
        }
        let p = *producer.get(&v)?;
        if !is_view(&body.steps[p]) {
            return Some((p, v, views));
        }
        // (a rebind checks and binds shapes as it runs: it stays, and so does the store)
        if matches!(&body.steps[p].kind, StepKind::Op(op) if op.kind == OpKind::Rebind) {
            return None;
        }
        views.push(p);
        (v, reader) = (body.steps[p].inputs[0], p);
    }
    None
}

/// Whether `step` is a step of exactly three sibling products (its first three outputs) that
/// may take a store: GPU-placed, not gated, without a residual or a store already; a qmatmul
/// step (for interleaved ropes only) or products read as stored with no epilogue.
fn products(step: &Step, types: &[Type], interleaved: bool) -> bool {
    let normed = match &step.kind {
        StepKind::Op(op) => {
            let keys = [super::GATED, super::RESIDUAL, ROPE_STORE];
            if op.kind != OpKind::QMatmul || keys.iter().any(|k| op.attrs.0.contains_key(*k)) || !interleaved {
                return false;
            }
            op.attrs.0.contains_key(super::NORM)
        }
        StepKind::Gemm(g) => {
            let plain = !g.bias && !g.residual && g.act.is_none() && g.tail.nodes.is_empty();
            if g.b_transpose.is_none() || g.gated.is_some() || g.rope_store.is_some() || !plain {
                return false;
            }
            g.norm.is_some()
        }
        _ => return false,
    };
    let normed = usize::from(normed);
    let gpu = step.outputs.iter().all(|&v| matches!(&types[v], Type::Tensor(t) if t.device.kind == DeviceKind::Gpu));
    step.bodies.is_empty() && gpu && step.outputs.len() == 3 + normed && step.inputs.len() == 4 + normed
}

/// Folds each eligible rope + store of `body` into its q/k/v products.
pub fn fuse(body: &mut Body, types: &[Type]) {
    let readers = super::fuse_rope_store::readers(body);
    let producer = super::producers(body);
    let mut gone = vec![false; body.steps.len()];
    for s in 0..body.steps.len() {
        let store = &body.steps[s];
        let StepKind::Op(sop) = &store.kind else { continue };
        let interleaved = matches!(sop.attrs.get(STORE_ROPE), Some(Attr::Bool(true)));
        let roped = sop.attrs.get(STORE_ROPE).is_some();
        if sop.kind != OpKind::KvCacheStore || !roped || store.inputs.len() != 8 || store.outputs.len() != 2 {
            continue;
        }
        let [chain, blocks, k, v, slots, q, freqs, positions] = store.inputs[..] else { continue };
        let on_gpu = matches!(&types[blocks], Type::Buffer(t) | Type::Tensor(t) if t.device.kind == DeviceKind::Gpu);
        let found: Option<Vec<_>> = [q, k, v].iter().map(|&x| source(body, &producer, &readers, x, s)).collect();
        let Some(found) = found.filter(|_| on_gpu) else { continue };
        let p = found[0].0;
        if !products(&body.steps[p], types, interleaved) || gone[p] || found.iter().any(|f| f.0 != p) {
            continue;
        }
        // the product outputs of q, k and v, in that order
        let outs = &body.steps[p].outputs;
        let order: Vec<usize> = found.iter().filter_map(|f| outs[..3].iter().position(|&o| o == f.1)).collect();
        if order.len() != 3 || order[0] == order[1] || order[1] == order[2] || order[0] == order[2] {
            continue;
        }
        let (product, store) = (&body.steps[p], &body.steps[s]);
        let kind = match &product.kind {
            StepKind::Op(pop) => {
                let mut op = pop.clone();
                op.attrs.0.insert(ROPE_STORE.into(), Attr::Bool(true));
                for (key, value) in &sop.attrs.0 {
                    op.attrs.0.insert(format!("kv_cache_store.{key}"), value.clone());
                }
                StepKind::Op(op)
            }
            StepKind::Gemm(g) => StepKind::Gemm(GemmEpilogue { rope_store: Some(sop.clone()), ..g.clone() }),
            _ => continue,
        };
        let mut inputs: Vec<ValueId> = vec![product.inputs[0]];
        inputs.extend(order.iter().map(|&i| product.inputs[1 + i]));
        inputs.extend(&product.inputs[4..]);
        inputs.extend([chain, blocks, slots, freqs, positions]);
        let mut outputs: Vec<ValueId> = order.iter().map(|&i| product.outputs[i]).collect();
        outputs.extend(&product.outputs[3..]);
        outputs.extend(&store.outputs);
        for f in &found {
            for &view in &f.2 {
                gone[view] = true;
            }
        }
        gone[p] = true;
        body.steps[s] = Step { kind, inputs, outputs, bodies: vec![] };
    }
    super::drop_marked(body, &gone);
}

#[cfg(test)]
#[path = "fuse_qkv_rope_store_tests.rs"]
mod tests;
