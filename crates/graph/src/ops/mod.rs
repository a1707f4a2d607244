//! Every op the graph can hold, grouped in families. Each family module owns its ops' dtype and
//! shape inference and validation: `infer(ctx)` checks the inputs and attributes and returns the
//! result types, or an error that names the op, the argument and the input types.

use crate::attrs::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::{GraphError, Result};
use crate::types::{DeviceRef, TensorType, Type, shape_str};

pub mod attention;
pub mod buffer;
pub mod collective;
pub mod control;
pub mod conv;
pub mod conv_transpose;
pub mod creation;
pub mod elementwise;
pub mod fft;
pub mod indexing;
pub mod layout;
pub mod linalg;
pub mod pool;
pub mod quant;
pub mod random;
pub mod reduction;
pub mod sampling;
#[cfg(test)]
pub(crate) mod testing;

macro_rules! op_kinds {
    ($($family:ident { $($variant:ident => $name:literal [$($arg:literal),*]),* $(,)? })*) => {
        /// The op kinds, named as the Python `ops.<name>` functions that stage them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind { $($($variant),*),* }

        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Family { $($family),* }

        impl OpKind {
            pub const ALL: &'static [OpKind] = &[$($(OpKind::$variant),*),*];

            pub fn name(self) -> &'static str {
                match self { $($(OpKind::$variant => $name),*),* }
            }

            pub fn family(self) -> Family {
                match self { $($(OpKind::$variant => Family::$family),*),* }
            }

            /// Names of the tensor arguments, as the Python op calls them. The last name of a
            /// variadic op repeats with an index (`values[2]`).
            pub fn arg_names(self) -> &'static [&'static str] {
                match self { $($(OpKind::$variant => &[$($arg),*]),*),* }
            }

            pub fn from_name(name: &str) -> Option<OpKind> {
                match name { $($($name => Some(OpKind::$variant),)*)* _ => None }
            }
        }
    };
}

op_kinds! {
    Creation {
        Constant => "constant" [],
        ConstantExternal => "constant_external" [],
        Range => "range" ["start", "stop", "step"],
        ShapeToTensor => "shape_to_tensor" [],
        Cast => "cast" ["x"],
        Rebind => "rebind" ["x"],
    }
    Elementwise {
        Abs => "abs" ["x"],
        Negate => "negate" ["x"],
        Exp => "exp" ["x"],
        Log => "log" ["x"],
        Log1p => "log1p" ["x"],
        Sqrt => "sqrt" ["x"],
        Rsqrt => "rsqrt" ["x"],
        Sin => "sin" ["x"],
        Cos => "cos" ["x"],
        Tanh => "tanh" ["x"],
        Acos => "acos" ["x"],
        Atanh => "atanh" ["x"],
        Erf => "erf" ["x"],
        Floor => "floor" ["x"],
        Round => "round" ["x"],
        Trunc => "trunc" ["x"],
        Relu => "relu" ["x"],
        Gelu => "gelu" ["x"],
        Sigmoid => "sigmoid" ["x"],
        Silu => "silu" ["x"],
        IsNan => "is_nan" ["x"],
        IsInf => "is_inf" ["x"],
        LogicalNot => "logical_not" ["x"],
        Add => "add" ["lhs", "rhs"],
        Sub => "sub" ["lhs", "rhs"],
        Mul => "mul" ["lhs", "rhs"],
        Div => "div" ["lhs", "rhs"],
        FloorDiv => "floordiv" ["lhs", "rhs"],
        Mod => "mod" ["lhs", "rhs"],
        Pow => "pow" ["lhs", "rhs"],
        Maximum => "max" ["x", "y"],
        Minimum => "min" ["x", "y"],
        Equal => "equal" ["lhs", "rhs"],
        NotEqual => "not_equal" ["lhs", "rhs"],
        Greater => "greater" ["lhs", "rhs"],
        GreaterEqual => "greater_equal" ["lhs", "rhs"],
        LogicalAnd => "logical_and" ["lhs", "rhs"],
        LogicalOr => "logical_or" ["lhs", "rhs"],
        LogicalXor => "logical_xor" ["lhs", "rhs"],
        Where => "where" ["condition", "x", "y"],
    }
    Reduction {
        Sum => "sum" ["x"],
        Mean => "mean" ["x"],
        ReduceMax => "reduce_max" ["x"],
        ReduceMin => "reduce_min" ["x"],
        ArgMax => "argmax" ["x"],
        ArgMin => "argmin" ["x"],
        Softmax => "softmax" ["value"],
        LogSoftmax => "logsoftmax" ["value"],
        Cumsum => "cumsum" ["x"],
        TopK => "top_k" ["input"],
        ArgSort => "argsort" ["x"],
        LayerNorm => "layer_norm" ["input", "gamma", "beta"],
        RmsNorm => "rms_norm" ["input", "weight"],
    }
    Layout {
        Reshape => "reshape" ["x"],
        Flatten => "flatten" ["x"],
        Squeeze => "squeeze" ["x"],
        Unsqueeze => "unsqueeze" ["x"],
        Transpose => "transpose" ["x"],
        Permute => "permute" ["x"],
        BroadcastTo => "broadcast_to" ["x", "shape"],
        Concat => "concat" ["original_vals"],
        Stack => "stack" ["values"],
        Split => "split" ["x"],
        Tile => "tile" ["x"],
        Pad => "pad" ["input", "value"],
        RepeatInterleave => "repeat_interleave" ["x", "repeats"],
        Slice => "slice_tensor" ["x", "indices"],
        AsInterleavedComplex => "as_interleaved_complex" ["x"],
        BandPart => "band_part" ["x"],
        TransferTo => "transfer_to" ["x"],
    }
    Linalg {
        Matmul => "matmul" ["lhs", "rhs"],
        Outer => "outer" ["lhs", "rhs"],
    }
    Conv {
        Conv2d => "conv2d" ["x", "filter", "bias"],
        Conv2dTranspose => "conv2d_transpose" ["x", "filter", "bias"],
        Conv3d => "conv3d" ["x", "filter", "bias"],
        AvgPool2d => "avg_pool2d" ["input"],
        MaxPool2d => "max_pool2d" ["input"],
        Fold => "fold" ["input"],
    }
    Indexing {
        Gather => "gather" ["input", "indices"],
        GatherNd => "gather_nd" ["input", "indices"],
        Scatter => "scatter" ["input", "updates", "indices"],
        ScatterNd => "scatter_nd" ["input", "updates", "indices"],
        MaskedScatter => "masked_scatter" ["input", "mask", "updates"],
        NonZero => "nonzero" ["x"],
    }
    Control {
        ChainCreate => "chain_create" [],
        Cond => "cond" ["pred", "chain"],
        WhileLoop => "while_loop" ["initial_values"],
        Print => "print" ["chain", "value"],
        Call => "call" ["args"],
    }
    Buffer {
        BufferCreate => "buffer_create" [],
        BufferLoad => "buffer_load" ["chain", "x"],
        BufferStore => "buffer_store" ["chain", "destination", "source"],
        BufferStoreSlice => "buffer_store_slice" ["chain", "destination", "source", "indices"],
    }
    Quant {
        Dequantize => "dequantize" ["quantized"],
        QMatmul => "qmatmul" ["lhs", "rhs"],
    }
    Attention {
        Rope => "rope" ["x", "freqs_cis", "positions"],
        KvCacheStore => "kv_cache_store" ["chain", "blocks", "k", "v", "slots"],
        PagedAttention => "paged_attention" ["chain", "q", "blocks", "input_row_offsets", "cache_lengths", "lookup_table"],
    }
    Sampling {
        SampleTokens => "sample_tokens" ["logits", "temperature", "top_k", "top_p", "min_p", "seed"],
        ApplyPenalties => "apply_penalties" ["logits", "tokens", "offsets", "prompt_lengths", "frequency", "presence", "repetition"],
    }
    Collective {
        AllreduceSum => "allreduce_sum" ["inputs"],
        Allgather => "allgather" ["inputs"],
        ReducescatterSum => "reducescatter_sum" ["inputs"],
        DistributedBroadcast => "distributed_broadcast" ["input", "signal_buffers"],
    }
    Fft {
        Irfft => "irfft" ["input_tensor"],
    }
    Random {
        RandomUniform => "random_uniform" ["seed"],
        RandomNormal => "random_normal" ["seed"],
    }
}

/// An op: its kind and attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub kind: OpKind,
    pub attrs: Attrs,
}

/// What inference sees: the op, its input types and attributes, and how to word errors.
pub struct Ctx<'a> {
    pub kind: OpKind,
    pub inputs: &'a [Type],
    pub attrs: &'a Attrs,
}

impl<'a> Ctx<'a> {
    /// The attribute reader of `op` alone, without input types: its errors name the op and the
    /// attribute (what a backend sees when it reads an op's typed parameters).
    pub fn of_op(op: &'a Op) -> Ctx<'a> {
        Ctx { kind: op.kind, inputs: &[], attrs: &op.attrs }
    }

    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// The Python-side name of input `i`.
    pub fn arg(&self, i: usize) -> String {
        let names = self.kind.arg_names();
        match names.get(i) {
            Some(n) if i + 1 < names.len() || self.inputs.len() <= names.len() => n.to_string(),
            _ => match names.last() {
                Some(last) => format!("{last}[{}]", i + 1 - names.len()),
                None => format!("input{i}"),
            },
        }
    }

    fn describe_inputs(&self) -> String {
        let parts: Vec<String> = self
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, t)| !matches!(t, Type::Chain))
            .map(|(i, t)| format!("{}={t}", self.arg(i)))
            .collect();
        parts.join(", ")
    }

    fn message(&self, arg: &str, msg: &str) -> String {
        let inputs = self.describe_inputs();
        if inputs.is_empty() {
            format!("{}: {arg}: {msg}", self.name())
        } else {
            format!("{}: {arg}: {msg} (inputs: {inputs})", self.name())
        }
    }

    pub fn value_err(&self, arg: &str, msg: impl AsRef<str>) -> GraphError {
        GraphError::Value(self.message(arg, msg.as_ref()))
    }

    pub fn type_err(&self, arg: &str, msg: impl AsRef<str>) -> GraphError {
        GraphError::Type(self.message(arg, msg.as_ref()))
    }

    pub fn index_err(&self, arg: &str, msg: impl AsRef<str>) -> GraphError {
        GraphError::Index(self.message(arg, msg.as_ref()))
    }

    pub fn expect_inputs(&self, n: usize) -> Result<()> {
        if self.inputs.len() != n {
            return Err(self.value_err("inputs", format!("expected {n} inputs, got {}", self.inputs.len())));
        }
        Ok(())
    }

    /// Input `i` as a tensor.
    pub fn tensor(&self, i: usize) -> Result<&'a TensorType> {
        match self.inputs.get(i) {
            Some(Type::Tensor(t)) => Ok(t),
            Some(other) => Err(self.type_err(&self.arg(i), format!("expected a tensor, got {other}"))),
            None => Err(self.value_err(&self.arg(i), "missing input")),
        }
    }

    /// Input `i` as a tensor of rank `rank` whose dtype `ok` accepts: else a TypeError saying it
    /// must be `want` (the dtypes accepted) or a ValueError saying it must be `what` (its shape).
    pub fn tensor_with(
        &self,
        i: usize,
        ok: impl Fn(DType) -> bool,
        want: &str,
        rank: usize,
        what: &str,
    ) -> Result<&'a TensorType> {
        let t = self.tensor(i)?;
        if !ok(t.dtype) {
            return Err(self.type_err(&self.arg(i), format!("must be {want}, got {}", t.dtype)));
        }
        if t.rank() != rank {
            return Err(self.value_err(&self.arg(i), format!("must be {what}, got shape {}", shape_str(&t.shape))));
        }
        Ok(t)
    }

    /// Dims that must agree when both are known: a ValueError naming `arg` when they do not.
    pub fn same_dim(&self, arg: &str, what: &str, a: &Dim, b: &Dim) -> Result<()> {
        if a != b && a.is_static() && b.is_static() {
            return Err(self.value_err(arg, format!("{what}: {a} differs from {b}")));
        }
        Ok(())
    }

    /// Input `i` as a buffer.
    pub fn buffer(&self, i: usize) -> Result<&'a TensorType> {
        match self.inputs.get(i) {
            Some(Type::Buffer(t)) => Ok(t),
            Some(other) => Err(self.type_err(&self.arg(i), format!("expected a buffer, got {other}"))),
            None => Err(self.value_err(&self.arg(i), "missing input")),
        }
    }

    pub fn attr(&self, key: &str) -> Option<&'a Attr> {
        self.attrs.get(key)
    }

    fn bad_attr(&self, key: &str, want: &str) -> GraphError {
        match self.attrs.get(key) {
            None => self.value_err(key, format!("missing {want}")),
            Some(a) => self.type_err(key, format!("expected {want}, got {a}")),
        }
    }

    pub fn int(&self, key: &str) -> Result<i64> {
        match self.attr(key) {
            Some(Attr::Int(i)) => Ok(*i),
            _ => Err(self.bad_attr(key, "an integer")),
        }
    }

    pub fn opt_int(&self, key: &str) -> Result<Option<i64>> {
        match self.attr(key) {
            None => Ok(None),
            Some(Attr::Int(i)) => Ok(Some(*i)),
            _ => Err(self.bad_attr(key, "an integer or None")),
        }
    }

    pub fn float(&self, key: &str) -> Result<f64> {
        match self.attr(key) {
            Some(Attr::Float(x)) => Ok(*x),
            Some(Attr::Int(i)) => Ok(*i as f64),
            _ => Err(self.bad_attr(key, "a number")),
        }
    }

    pub fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.attr(key) {
            None => Ok(default),
            Some(Attr::Bool(b)) => Ok(*b),
            _ => Err(self.bad_attr(key, "a bool")),
        }
    }

    pub fn string(&self, key: &str) -> Result<&'a str> {
        match self.attr(key) {
            Some(Attr::Str(s)) => Ok(s),
            _ => Err(self.bad_attr(key, "a string")),
        }
    }

    pub fn ints(&self, key: &str) -> Result<&'a [i64]> {
        match self.attr(key) {
            Some(Attr::Ints(v)) => Ok(v),
            _ => Err(self.bad_attr(key, "a list of integers")),
        }
    }

    pub fn dims(&self, key: &str) -> Result<&'a [Dim]> {
        match self.attr(key) {
            Some(Attr::Dims(v)) => Ok(v),
            _ => Err(self.bad_attr(key, "a shape")),
        }
    }

    pub fn opt_dims(&self, key: &str) -> Result<Option<&'a [Dim]>> {
        match self.attr(key) {
            None => Ok(None),
            Some(Attr::Dims(v)) => Ok(Some(v)),
            _ => Err(self.bad_attr(key, "a shape or None")),
        }
    }

    pub fn dtype(&self, key: &str) -> Result<DType> {
        match self.attr(key) {
            Some(Attr::DType(d)) => Ok(*d),
            _ => Err(self.bad_attr(key, "a dtype")),
        }
    }

    pub fn device(&self, key: &str) -> Result<DeviceRef> {
        match self.attr(key) {
            Some(Attr::Device(d)) => Ok(*d),
            _ => Err(self.bad_attr(key, "a device")),
        }
    }

    pub fn types(&self, key: &str) -> Result<&'a [Type]> {
        match self.attr(key) {
            Some(Attr::Types(t)) => Ok(t),
            _ => Err(self.bad_attr(key, "a list of types")),
        }
    }

    /// Normalises a possibly negative axis of a rank-`rank` tensor; IndexError when out of range.
    pub fn axis(&self, key: &str, axis: i64, rank: usize) -> Result<usize> {
        let r = rank as i64;
        if axis < -r || axis >= r {
            let hi = r - 1;
            return Err(
                self.index_err(key, format!("axis {axis} is out of range for rank {rank} (expected -{r}..={hi})"))
            );
        }
        Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
    }

    /// All tensor inputs on one device; ValueError naming the first that differs.
    pub fn same_device(&self, idx: &[usize]) -> Result<DeviceRef> {
        let first = self.tensor_or_buffer(idx[0])?.device;
        for &i in &idx[1..] {
            let d = self.tensor_or_buffer(i)?.device;
            if d != first {
                return Err(self.value_err(
                    &self.arg(i),
                    format!(
                        "input values must be on the same device: {} is on {d}, {} on {first}",
                        self.arg(i),
                        self.arg(idx[0])
                    ),
                ));
            }
        }
        Ok(first)
    }

    pub fn tensor_or_buffer(&self, i: usize) -> Result<&'a TensorType> {
        match self.inputs.get(i) {
            Some(Type::Tensor(t)) | Some(Type::Buffer(t)) => Ok(t),
            Some(other) => Err(self.type_err(&self.arg(i), format!("expected a tensor, got {other}"))),
            None => Err(self.value_err(&self.arg(i), "missing input")),
        }
    }
}

/// Infers the result types of `op` applied to `inputs`.
pub fn infer(op: &Op, inputs: &[Type]) -> Result<Vec<Type>> {
    let ctx = Ctx { kind: op.kind, inputs, attrs: &op.attrs };
    match op.kind.family() {
        Family::Creation => creation::infer(&ctx),
        Family::Elementwise => elementwise::infer(&ctx),
        Family::Reduction => reduction::infer(&ctx),
        Family::Layout => layout::infer(&ctx),
        Family::Linalg => linalg::infer(&ctx),
        Family::Conv => conv::infer(&ctx),
        Family::Indexing => indexing::infer(&ctx),
        Family::Control => control::infer(&ctx),
        Family::Buffer => buffer::infer(&ctx),
        Family::Quant => quant::infer(&ctx),
        Family::Attention => attention::infer(&ctx),
        Family::Sampling => sampling::infer(&ctx),
        Family::Collective => collective::infer(&ctx),
        Family::Fft => fft::infer(&ctx),
        Family::Random => random::infer(&ctx),
    }
}

/// One tensor result.
pub fn one(t: TensorType) -> Result<Vec<Type>> {
    Ok(vec![Type::Tensor(t)])
}

/// numpy broadcasting of two shapes: equal dims, or a static 1 on either side.
pub fn broadcast_shapes(ctx: &Ctx, a: &[Dim], b: &[Dim], names: (&str, &str)) -> Result<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let one = Dim::stat(1);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank { &a[i + a.len() - rank] } else { &one };
        let db = if i + b.len() >= rank { &b[i + b.len() - rank] } else { &one };
        let d = if da == db || *db == one {
            da.clone()
        } else if *da == one {
            db.clone()
        } else {
            return Err(ctx.value_err(
                names.1,
                format!(
                    "shapes {} and {} cannot be broadcast: dimension {da} of {} and {db} of {} at output axis {i} are neither equal nor 1 (insert a rebind if they are equal at run time)",
                    crate::types::shape_str(a), crate::types::shape_str(b), names.0, names.1
                ),
            ));
        };
        out.push(d);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut names: Vec<&str> = OpKind::ALL.iter().map(|k| k.name()).collect();
        for k in OpKind::ALL {
            assert_eq!(OpKind::from_name(k.name()), Some(*k));
        }
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len());
    }
}
