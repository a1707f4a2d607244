//! Quantized ops: dequantize and qmatmul over the encodings of `max.graph.quantization`.
//!
//! The GGUF encodings store a row as whole blocks of bytes (uint8), each block holding a fixed
//! number of elements; see `block_parameters`. qmatmul takes its quantized right-hand side
//! transposed, `[N, K_bytes]`. GPTQ (qmatmul only) takes `[K_bytes, N]` (packed 4-bit weights
//! then the group scales, per column) plus, with `desc_act`, an int32 permutation of K.

use super::{Ctx, OpKind, one};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::Dequantize => dequantize(ctx),
        OpKind::QMatmul => qmatmul(ctx),
        _ => Err(ctx.value_err("op", "not a quantized op")),
    }
}

/// The block encodings of `max.graph.quantization` (GGUF's), the one table of their names and
/// block sizes for the graph and both backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    Q4_0,
    Q4_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl Encoding {
    pub const ALL: [Encoding; 6] =
        [Encoding::Q4_0, Encoding::Q4_1, Encoding::Q8_0, Encoding::Q4K, Encoding::Q5K, Encoding::Q6K];

    /// The encoding of a `max.graph.quantization` name ("Q4_0", "Q4_K", ...).
    pub fn parse(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Encoding::Q4_0 => "Q4_0",
            Encoding::Q4_1 => "Q4_1",
            Encoding::Q8_0 => "Q8_0",
            Encoding::Q4K => "Q4_K",
            Encoding::Q5K => "Q5_K",
            Encoding::Q6K => "Q6_K",
        }
    }

    /// (elements, bytes) of one block, as GGUF lays them out.
    pub fn block(self) -> (usize, usize) {
        match self {
            Encoding::Q4_0 => (32, 18),  // f16 scale + 32 4-bit values
            Encoding::Q4_1 => (32, 20),  // f16 scale and min + 32 4-bit values
            Encoding::Q8_0 => (32, 34),  // f16 scale + 32 int8 values
            Encoding::Q4K => (256, 144), // f16 d, dmin + 12 bytes of 6-bit scales + 128 bytes of nibbles
            Encoding::Q5K => (256, 176), // as Q4_K plus 32 bytes of high bits
            Encoding::Q6K => (256, 210), // 128 low nibbles + 64 high bits + 16 int8 scales + f16 d
        }
    }
}

/// (elements per block, bytes per block) of the block encoding named `encoding`.
pub fn block_parameters(encoding: &str) -> Option<(i64, i64)> {
    Encoding::parse(encoding).map(|e| (e.block().0 as i64, e.block().1 as i64))
}

fn blocks<'a>(ctx: &Ctx<'a>) -> Result<(&'a str, i64, i64)> {
    let enc = ctx.string("encoding")?;
    match block_parameters(enc) {
        Some((e, b)) => Ok((enc, e, b)),
        None => Err(ctx.value_err(
            "encoding",
            format!("unsupported quantization encoding {enc} (block encodings: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K)"),
        )),
    }
}

/// Elements per row of a quantized tensor whose last dim holds `bytes` bytes.
fn row_elements(ctx: &Ctx, arg: &str, enc: &str, bytes: &Dim, elems: i64, block: i64) -> Result<i64> {
    let Some(b) = bytes.as_static() else {
        return Err(ctx.type_err(arg, format!("the last dimension (bytes per row) must be static, got {bytes}")));
    };
    if b % block != 0 {
        return Err(ctx.value_err(
            arg,
            format!("last dimension ({b}) is not a multiple of the {enc} block size ({block} bytes)"),
        ));
    }
    Ok(b / block * elems)
}

fn quantized<'a>(ctx: &Ctx<'a>, i: usize) -> Result<&'a TensorType> {
    let t = ctx.tensor(i)?;
    if t.dtype != DType::UInt8 {
        return Err(ctx.type_err(&ctx.arg(i), format!("a quantized tensor must be uint8, got {}", t.dtype)));
    }
    Ok(t)
}

/// float32 with the last dim expanded from bytes to elements.
fn dequantize(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let (enc, elems, block) = blocks(ctx)?;
    let x = quantized(ctx, 0)?;
    let Some((last, rest)) = x.shape.split_last() else {
        return Err(ctx.value_err("quantized", "must have at least one dimension"));
    };
    let n = row_elements(ctx, "quantized", enc, last, elems, block)?;
    let mut shape = rest.to_vec();
    shape.push(Dim::stat(n));
    one(TensorType::new(DType::Float32, shape, x.device))
}

/// `lhs[..., K] @ dequantize(rhs)^T`, giving `[..., N]`.
fn qmatmul(ctx: &Ctx) -> Result<Vec<Type>> {
    if ctx.inputs.len() < 2 {
        return Err(ctx.value_err("rhs", "missing the quantized right-hand side"));
    }
    let lhs = ctx.tensor(0)?;
    if lhs.rank() == 0 {
        return Err(ctx.value_err("lhs", "must have at least one dimension"));
    }
    let rhs = quantized(ctx, 1)?;
    if rhs.rank() != 2 {
        return Err(ctx.type_err(&ctx.arg(1), format!("must be a matrix, got shape {}", shape_str(&rhs.shape))));
    }
    let all: Vec<usize> = (0..ctx.inputs.len()).collect();
    ctx.same_device(&all)?;
    if ctx.string("encoding")? == "GPTQ" {
        return gptq(ctx, lhs, rhs);
    }
    let (enc, elems, block) = blocks(ctx)?;
    // float32 everywhere; on a GPU also bfloat16 and float16 (the kernels accumulate in f32 and
    // round the result to lhs's dtype), the activations of a GGUF model computing in 16 bits.
    let gpu = lhs.device.kind != crate::types::DeviceKind::Cpu;
    let ok = lhs.dtype == DType::Float32 || (gpu && matches!(lhs.dtype, DType::BFloat16 | DType::Float16));
    if !ok {
        let want =
            if gpu { "float32, bfloat16 or float16" } else { "float32 on the CPU (bfloat16 and float16 on a GPU)" };
        return Err(ctx.type_err("lhs", format!("must be {want}, got {}", lhs.dtype)));
    }
    if ctx.inputs.len() != 2 {
        return Err(ctx.value_err("rhs", format!("{enc} takes one quantized tensor, got {}", ctx.inputs.len() - 1)));
    }
    let k = row_elements(ctx, "rhs", enc, &rhs.shape[1], elems, block)?;
    let lhs_k = &lhs.shape[lhs.rank() - 1];
    if *lhs_k != Dim::stat(k) {
        return Err(ctx.value_err(
            "lhs",
            format!("last dimension {lhs_k} must match the {k} elements per row of rhs ({} bytes of {enc}; insert a rebind if they are equal at run time)", rhs.shape[1]),
        ));
    }
    let mut shape = lhs.shape[..lhs.rank() - 1].to_vec();
    shape.push(rhs.shape[0].clone());
    one(TensorType::new(lhs.dtype, shape, lhs.device))
}

/// GPTQ with the one configuration there are kernels for: 4 bits, groups of 128.
fn gptq(ctx: &Ctx, lhs: &TensorType, rhs: &TensorType) -> Result<Vec<Type>> {
    if ctx.attr("quant_method").is_none() {
        return Err(ctx.value_err("config", "GPTQ needs a QuantizationConfig"));
    }
    let (method, bits, group) = (ctx.string("quant_method")?, ctx.int("bits")?, ctx.int("group_size")?);
    if method != "gptq" || bits != 4 || group != 128 {
        return Err(ctx.value_err("config", format!("unsupported GPTQ configuration: quant_method={method:?}, bits={bits}, group_size={group} (supported: 'gptq', 4 bits, groups of 128)")));
    }
    if lhs.dtype != DType::BFloat16 {
        return Err(ctx.type_err("lhs", format!("must be bfloat16 for GPTQ, got {}", lhs.dtype)));
    }
    let k = &lhs.shape[lhs.rank() - 1];
    if let Some(kv) = k.as_static()
        && kv % group != 0
    {
        return Err(ctx.value_err("lhs", format!("last dimension {kv} is not a multiple of the group size {group}")));
    }
    let desc_act = ctx.boolean("desc_act", false)?;
    let want = if desc_act { 3 } else { 2 };
    if ctx.inputs.len() != want {
        let what = if desc_act {
            "the packed weights and the permutation indices (desc_act=True)"
        } else {
            "the packed weights only"
        };
        return Err(ctx.value_err("rhs", format!("GPTQ takes {what}, got {} tensors", ctx.inputs.len() - 1)));
    }
    if desc_act {
        let perm = ctx.tensor(2)?;
        if perm.dtype != DType::Int32 || perm.rank() != 1 {
            return Err(ctx.type_err(&ctx.arg(2), format!("the permutation must be a rank-1 int32 tensor, got {perm}")));
        }
        if perm.shape[0] != *k {
            return Err(ctx.value_err(
                &ctx.arg(2),
                format!("the permutation has {} entries but lhs has {k} columns", perm.shape[0]),
            ));
        }
    }
    let mut shape = lhs.shape[..lhs.rank() - 1].to_vec();
    shape.push(rhs.shape[1].clone());
    one(TensorType::new(DType::BFloat16, shape, lhs.device))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::{Attr, Attrs};
    use crate::error::GraphError;
    use crate::ops::testing::{infer_with as run, tt as t};
    use crate::types::DeviceRef;

    fn enc(e: &str) -> Attrs {
        Attrs::new().with("encoding", Attr::Str(e.into()))
    }

    #[test]
    fn dequantize_expands_blocks_to_elements() {
        for (e, bytes, elems) in [
            ("Q4_0", 36, 64),
            ("Q4_1", 40, 64),
            ("Q8_0", 34, 32),
            ("Q4_K", 288, 512),
            ("Q5_K", 176, 256),
            ("Q6_K", 210, 256),
        ] {
            let out = run(OpKind::Dequantize, enc(e), &[t(DType::UInt8, &["n", &bytes.to_string()])]).unwrap();
            assert_eq!(out[0], t(DType::Float32, &["n", &elems.to_string()]), "{e}");
        }
        let err = run(OpKind::Dequantize, enc("Q4_0"), &[t(DType::UInt8, &["n", "35"])]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("dequantize: quantized:")), "{err}");
        assert!(matches!(run(OpKind::Dequantize, enc("GPTQ"), &[t(DType::UInt8, &["36"])]), Err(GraphError::Value(_))));
        assert!(matches!(
            run(OpKind::Dequantize, enc("Q4_0"), &[t(DType::Float32, &["36"])]),
            Err(GraphError::Type(_))
        ));
        assert!(matches!(
            run(OpKind::Dequantize, enc("Q4_0"), &[t(DType::UInt8, &["4", "k"])]),
            Err(GraphError::Type(_))
        ));
    }

    #[test]
    fn qmatmul_checks_k_and_gives_n() {
        let out =
            run(OpKind::QMatmul, enc("Q4_0"), &[t(DType::Float32, &["b", "m", "64"]), t(DType::UInt8, &["n", "36"])])
                .unwrap();
        assert_eq!(out[0], t(DType::Float32, &["b", "m", "n"]));
        let out =
            run(OpKind::QMatmul, enc("Q6_K"), &[t(DType::Float32, &["m", "512"]), t(DType::UInt8, &["32", "420"])])
                .unwrap();
        assert_eq!(out[0], t(DType::Float32, &["m", "32"]));
        let err = run(OpKind::QMatmul, enc("Q4_0"), &[t(DType::Float32, &["m", "32"]), t(DType::UInt8, &["32", "36"])])
            .unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("qmatmul: lhs:")), "{err}");
        assert!(matches!(
            run(OpKind::QMatmul, enc("Q4_0"), &[t(DType::BFloat16, &["m", "64"]), t(DType::UInt8, &["32", "36"])]),
            Err(GraphError::Type(m)) if m.contains("float32 on the CPU")
        ));
    }

    #[test]
    fn qmatmul_on_a_gpu_takes_16_bit_lhs_and_gives_its_dtype() {
        let on_gpu = |ty: Type| match ty {
            Type::Tensor(t) => Type::Tensor(TensorType::new(t.dtype, t.shape, DeviceRef::gpu(0))),
            other => other,
        };
        for dtype in [DType::Float32, DType::BFloat16, DType::Float16] {
            let lhs = on_gpu(t(dtype, &["m", "64"]));
            let out = run(OpKind::QMatmul, enc("Q4_0"), &[lhs, on_gpu(t(DType::UInt8, &["32", "36"]))]).unwrap();
            assert_eq!(out[0], on_gpu(t(dtype, &["m", "32"])), "{dtype}");
        }
        let lhs = on_gpu(t(DType::Float64, &["m", "64"]));
        assert!(matches!(
            run(OpKind::QMatmul, enc("Q4_0"), &[lhs, on_gpu(t(DType::UInt8, &["32", "36"]))]),
            Err(GraphError::Type(_))
        ));
    }

    #[test]
    fn qmatmul_gptq() {
        let cfg = enc("GPTQ")
            .with("quant_method", Attr::Str("gptq".into()))
            .with("bits", Attr::Int(4))
            .with("group_size", Attr::Int(128))
            .with("desc_act", Attr::Bool(false))
            .with("sym", Attr::Bool(true));
        let out =
            run(OpKind::QMatmul, cfg.clone(), &[t(DType::BFloat16, &["m", "256"]), t(DType::UInt8, &["132", "64"])])
                .unwrap();
        assert_eq!(out[0], t(DType::BFloat16, &["m", "64"]));
        let act = cfg.clone().with("desc_act", Attr::Bool(true));
        let out = run(
            OpKind::QMatmul,
            act.clone(),
            &[t(DType::BFloat16, &["m", "256"]), t(DType::UInt8, &["132", "64"]), t(DType::Int32, &["256"])],
        )
        .unwrap();
        assert_eq!(out[0], t(DType::BFloat16, &["m", "64"]));
        assert!(
            run(OpKind::QMatmul, act, &[t(DType::BFloat16, &["m", "256"]), t(DType::UInt8, &["132", "64"])]).is_err()
        );
        let eight = cfg.with("bits", Attr::Int(8));
        assert!(
            matches!(run(OpKind::QMatmul, eight, &[t(DType::BFloat16, &["m", "256"]), t(DType::UInt8, &["132", "64"])]), Err(GraphError::Value(m)) if m.starts_with("qmatmul: config:"))
        );
    }
}
