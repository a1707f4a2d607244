//! Control flow and ordering: chains, cond, while_loop and print. (`ops.call` inlines the
//! called graph with `Graph::inline`, so it never becomes a node.)
//!
//! Side effects are ordered by a chain value. cond and while_loop may take the chain as their
//! last input; their blocks then yield the chain after their own effects as their last result,
//! and the node returns the new chain last. Their blocks reach inference as the attributes
//! `block{i}_args` / `block{i}_results` (see `Graph::add_node_with_blocks`).

use super::{Ctx, OpKind};
use crate::dtype::DType;
use crate::error::Result;
use crate::types::Type;

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::ChainCreate => {
            ctx.expect_inputs(0)?;
            Ok(vec![Type::Chain])
        }
        OpKind::Cond => cond(ctx),
        OpKind::WhileLoop => while_loop(ctx),
        OpKind::Print => print(ctx),
        OpKind::Call => {
            Err(ctx.value_err("graph", "ops.call inlines the called graph into the caller; it is not staged as a node"))
        }
        _ => Err(ctx.value_err("op", "not a control op")),
    }
}

/// Input `i` must be a chain.
pub fn expect_chain(ctx: &Ctx, i: usize) -> Result<()> {
    match ctx.inputs.get(i) {
        Some(Type::Chain) => Ok(()),
        Some(other) => Err(ctx.type_err(&ctx.arg(i), format!("expected a chain, got {other}"))),
        None => Err(ctx.value_err(&ctx.arg(i), "missing input")),
    }
}

/// `t` (argument `arg`) must be a bool scalar tensor.
fn bool_scalar(ctx: &Ctx, arg: &str, t: Option<&Type>) -> Result<()> {
    match t {
        Some(Type::Tensor(t)) if t.dtype == DType::Bool && t.rank() == 0 => Ok(()),
        Some(other) => Err(ctx.value_err(arg, format!("must be a bool scalar tensor, got {other}"))),
        None => Err(ctx.value_err(arg, "must be a bool scalar tensor, got nothing")),
    }
}

fn block<'a>(ctx: &Ctx<'a>, i: usize, part: &str, who: &str) -> Result<&'a [Type]> {
    match ctx.attr(&format!("block{i}_{part}")) {
        Some(crate::attrs::Attr::Types(t)) => Ok(t),
        _ => Err(ctx.value_err(who, format!("{} needs its blocks: stage it with add_control", ctx.name()))),
    }
}

/// Compares a block's results with the types it must yield (both ending with the chain when
/// `threaded`). `what` names the expected types in messages.
fn check_results(
    ctx: &Ctx,
    who: &str,
    got: &[Type],
    want: &[Type],
    threaded: bool,
    what: &str,
    as_type_err: bool,
) -> Result<()> {
    let err = |msg: String| {
        if as_type_err { ctx.type_err(who, msg) } else { ctx.value_err(who, msg) }
    };
    let (got, want) = if threaded {
        match got.split_last() {
            Some((Type::Chain, rest)) => (rest, &want[..want.len() - 1]),
            _ => {
                return Err(err("the block does not yield the chain as its last result".into()));
            }
        }
    } else {
        (got, want)
    };
    if got.len() != want.len() {
        return Err(err(format!("returned {} values, expected {} ({what})", got.len(), want.len())));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w {
            return Err(err(format!("result {i} has type {g}, expected {w} ({what})")));
        }
    }
    Ok(())
}

/// inputs `[pred, chain?]`; blocks then and else, with no arguments, yield `out_types`.
fn cond(ctx: &Ctx) -> Result<Vec<Type>> {
    bool_scalar(ctx, "pred", ctx.inputs.first())?;
    let threaded = match ctx.inputs.len() {
        1 => false,
        2 => {
            expect_chain(ctx, 1)?;
            true
        }
        n => {
            return Err(
                ctx.value_err("inputs", format!("expected the predicate and optionally a chain, got {n} inputs"))
            );
        }
    };
    let declared = ctx.types("out_types")?;
    if declared.iter().any(|t| matches!(t, Type::Chain)) {
        return Err(ctx.type_err("out_types", "a chain cannot be declared as a result; cond threads it itself"));
    }
    let mut want = declared.to_vec();
    if threaded {
        want.push(Type::Chain);
    }
    for (i, who) in [(0, "then_fn"), (1, "else_fn")] {
        if !block(ctx, i, "args", who)?.is_empty() {
            return Err(ctx.value_err(who, "a branch block takes no arguments"));
        }
        check_results(ctx, who, block(ctx, i, "results", who)?, &want, threaded, "out_types", false)?;
    }
    if ctx.attr("block2_args").is_some() {
        return Err(ctx.value_err("else_fn", "cond owns exactly two blocks"));
    }
    Ok(want)
}

/// inputs `[initial_values..., chain?]`; the predicate block maps the loop values to a bool
/// scalar, the body block maps them to new loop values of the same types. With a chain, the
/// predicate also yields its chain last, and that chain is what the body (or, once the
/// predicate is false, the loop's result) continues from.
fn while_loop(ctx: &Ctx) -> Result<Vec<Type>> {
    let threaded = matches!(ctx.inputs.last(), Some(Type::Chain));
    let carried = &ctx.inputs[..ctx.inputs.len() - usize::from(threaded)];
    if carried.is_empty() {
        return Err(ctx.value_err("initial_values", "a while loop needs at least one loop value"));
    }
    for (i, t) in carried.iter().enumerate() {
        if !matches!(t, Type::Tensor(_)) {
            return Err(ctx.type_err(&ctx.arg(i), format!("loop values must be tensors, got {t}")));
        }
    }
    for (i, who) in [(0, "predicate"), (1, "body")] {
        if block(ctx, i, "args", who)? != ctx.inputs {
            return Err(ctx.value_err(who, "the block's arguments must have the types of the loop values"));
        }
    }
    let pred = block(ctx, 0, "results", "predicate")?;
    let pred = match (threaded, pred.split_last()) {
        (true, Some((Type::Chain, rest))) => rest,
        (true, _) => {
            return Err(ctx.value_err("predicate", "the block does not yield the chain as its last result"));
        }
        (false, _) => pred,
    };
    match pred {
        [t] => bool_scalar(ctx, "predicate", Some(t))?,
        other => {
            return Err(
                ctx.value_err("predicate", format!("must return one bool scalar tensor, got {} values", other.len()))
            );
        }
    }
    let body = block(ctx, 1, "results", "body")?;
    check_results(ctx, "body", body, ctx.inputs, threaded, "the loop values", true)?;
    if ctx.attr("block2_args").is_some() {
        return Err(ctx.value_err("body", "while_loop owns exactly two blocks"));
    }
    Ok(ctx.inputs.to_vec())
}

/// inputs `[chain, value?]`: prints a tensor, or the `text` attribute when there is no value.
fn print(ctx: &Ctx) -> Result<Vec<Type>> {
    expect_chain(ctx, 0)?;
    ctx.string("label")?;
    match ctx.inputs.len() {
        1 => {
            ctx.string("text")?;
        }
        2 => {
            ctx.tensor(1)?;
        }
        n => return Err(ctx.value_err("value", format!("print takes one value, got {}", n - 1))),
    }
    Ok(vec![Type::Chain])
}

#[cfg(test)]
mod tests {
    use super::super::Op;
    use super::*;
    use crate::attrs::{Attr, Attrs};
    use crate::error::GraphError;
    use crate::ops::testing::{infer_with as run, tt as t};

    fn blocks(attrs: Attrs, blocks: &[(Vec<Type>, Vec<Type>)]) -> Attrs {
        let mut attrs = attrs;
        for (i, (args, results)) in blocks.iter().enumerate() {
            attrs = attrs
                .with(&format!("block{i}_args"), Attr::Types(args.clone()))
                .with(&format!("block{i}_results"), Attr::Types(results.clone()));
        }
        attrs
    }

    #[test]
    fn cond_checks_both_branches_against_out_types() {
        let i32s = t(DType::Int32, &[]);
        let pred = t(DType::Bool, &[]);
        let declared = Attrs::new().with("out_types", Attr::Types(vec![i32s.clone()]));
        let ok = blocks(
            declared.clone(),
            &[(vec![], vec![i32s.clone(), Type::Chain]), (vec![], vec![i32s.clone(), Type::Chain])],
        );
        assert_eq!(run(OpKind::Cond, ok, &[pred.clone(), Type::Chain]).unwrap(), vec![i32s.clone(), Type::Chain]);
        let wrong = blocks(declared.clone(), &[(vec![], vec![i32s.clone()]), (vec![], vec![t(DType::Int64, &[])])]);
        let err = run(OpKind::Cond, wrong, std::slice::from_ref(&pred)).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("cond: else_fn: result 0")), "{err}");
        let too_many = blocks(declared, &[(vec![], vec![i32s.clone(), i32s.clone()]), (vec![], vec![i32s.clone()])]);
        let err = run(OpKind::Cond, too_many, std::slice::from_ref(&pred)).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("cond: then_fn: returned 2 values")), "{err}");
        let none = blocks(Attrs::new().with("out_types", Attr::Types(vec![])), &[(vec![], vec![]), (vec![], vec![])]);
        assert!(
            matches!(run(OpKind::Cond, none, &[t(DType::Float32, &[])]), Err(GraphError::Value(m)) if m.starts_with("cond: pred:"))
        );
    }

    #[test]
    fn while_loop_checks_predicate_and_body() {
        let x = t(DType::Float32, &["n"]);
        let b = t(DType::Bool, &[]);
        let ins = vec![x.clone(), Type::Chain];
        let ok = blocks(Attrs::new(), &[(ins.clone(), vec![b.clone(), Type::Chain]), (ins.clone(), ins.clone())]);
        assert_eq!(run(OpKind::WhileLoop, ok, &ins).unwrap(), ins);
        let changed = blocks(
            Attrs::new(),
            &[(ins.clone(), vec![b.clone(), Type::Chain]), (ins.clone(), vec![t(DType::Float32, &["m"]), Type::Chain])],
        );
        let err = run(OpKind::WhileLoop, changed, &ins).unwrap_err();
        assert!(matches!(&err, GraphError::Type(m) if m.starts_with("while_loop: body: result 0")), "{err}");
        let bad_pred = blocks(Attrs::new(), &[(ins.clone(), vec![x.clone(), Type::Chain]), (ins.clone(), ins.clone())]);
        assert!(
            matches!(run(OpKind::WhileLoop, bad_pred, &ins), Err(GraphError::Value(m)) if m.starts_with("while_loop: predicate:"))
        );
        let empty =
            blocks(Attrs::new(), &[(vec![Type::Chain], vec![b.clone()]), (vec![Type::Chain], vec![Type::Chain])]);
        assert!(
            matches!(run(OpKind::WhileLoop, empty, &[Type::Chain]), Err(GraphError::Value(m)) if m.starts_with("while_loop: initial_values:"))
        );
    }

    #[test]
    fn call_inlines_the_subgraph_body() {
        use crate::graph::Graph;
        let x = t(DType::Float32, &["n"]);
        let mut sub = Graph::new("sub");
        let a = sub.add_input(x.clone());
        let w = sub
            .add_node(
                Op {
                    kind: OpKind::ConstantExternal,
                    attrs: Attrs::new().with("name", Attr::Str("w".into())).with("type", Attr::Types(vec![x.clone()])),
                },
                vec![],
            )
            .unwrap()[0];
        let sum = sub.add_node(Op { kind: OpKind::Add, attrs: Attrs::new() }, vec![a, w]).unwrap()[0];
        let c0 = sub.add_node(Op { kind: OpKind::ChainCreate, attrs: Attrs::new() }, vec![]).unwrap()[0];
        let c1 = sub
            .add_node(
                Op { kind: OpKind::Print, attrs: Attrs::new().with("label", Attr::Str("s".into())) },
                vec![c0, sum],
            )
            .unwrap()[0];
        sub.set_outputs(vec![sum]).unwrap();

        let mut g = Graph::new("main");
        let y = g.add_input(x.clone());
        let chain = g.add_node(Op { kind: OpKind::ChainCreate, attrs: Attrs::new() }, vec![]).unwrap()[0];
        let before = g.nodes.len();
        let out = g.inline(&sub, &[y], &[], Some(chain), "layer0.", &[sum, c1]).unwrap();
        assert_eq!(g.ty(out[0]), Some(&x));
        assert_eq!(g.ty(out[1]), Some(&Type::Chain));
        // constant_external, add and print: the sub's chain_create became `chain`.
        assert_eq!(g.nodes.len() - before, 3);
        assert!(g.nodes.iter().any(|n| n.op.attrs.get("name") == Some(&Attr::Str("layer0.w".into()))));
        let err = g.inline(&sub, &[chain], &[], None, "", &[sum]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("call: args[0]:")), "{err}");
    }

    #[test]
    fn print_returns_a_chain() {
        let label = Attrs::new().with("label", Attr::Str("x".into()));
        assert_eq!(
            run(OpKind::Print, label.clone(), &[Type::Chain, t(DType::Float32, &["2"])]).unwrap(),
            vec![Type::Chain]
        );
        let text = label.clone().with("text", Attr::Str("hello".into()));
        assert_eq!(run(OpKind::Print, text, &[Type::Chain]).unwrap(), vec![Type::Chain]);
        assert!(matches!(run(OpKind::Print, label, &[t(DType::Float32, &["2"])]), Err(GraphError::Type(_))));
    }
}
