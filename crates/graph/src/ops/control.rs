//! Control flow and ordering: chains, cond, while_loop, print and call (filled in with the
//! family).

use super::{Ctx, OpKind};
use crate::error::{GraphError, Result};
use crate::types::Type;

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::ChainCreate => {
            ctx.expect_inputs(0)?;
            Ok(vec![Type::Chain])
        }
        _ => Err(GraphError::Value(format!("{}: not staged yet", ctx.name()))),
    }
}
