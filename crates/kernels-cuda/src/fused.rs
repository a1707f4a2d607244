//! Generated CUDA source for fused elementwise groups. A group is a small expression tree over
//! its inputs; it becomes one kernel that reads each input once per output element
//! (broadcasting by index math: each input has its own strides per output axis, 0 where it
//! broadcasts), evaluates the tree in registers and writes the result. A second entry point,
//! `fused_contig`, skips the index math when every input is the output's shape or a scalar.
//!
//! The arithmetic follows the host kernels (crates/runtime/src/cpu/elementwise.rs): floats in
//! f32 (f64 for float64), each node rounded to its dtype; integers in 64 bits with wrapping;
//! casts with the rules of prelude.cuh.

use std::fmt::Write;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;
use max_graph::ops::OpKind;

use crate::sources::Family;
use crate::{Error, Result, function};

/// An operand of a node: a group input or an earlier node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arg {
    Input(usize),
    Node(usize),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub op: OpKind,
    pub args: Vec<Arg>,
    pub dtype: DType,
    /// gelu's approximation ("none", "tanh", "quick").
    pub approximate: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FusedSpec {
    pub inputs: Vec<DType>,
    pub nodes: Vec<Node>,
    /// Rank of the output (the index math is generated for exactly this rank).
    pub rank: usize,
}

/// The most output dims generated index math handles (views merge dims before this).
pub const MAX_RANK: usize = 8;
/// The most inputs a group may read.
pub const MAX_INPUTS: usize = 16;
/// Elements per thread per step in the contiguous form.
const UNROLL: u64 = 4;

fn storage(d: DType) -> Result<&'static str> {
    Ok(match d {
        DType::Bool => "bool",
        DType::Int8 => "i8",
        DType::Int16 => "i16",
        DType::Int32 => "i32",
        DType::Int64 => "i64",
        DType::UInt8 => "u8",
        DType::UInt16 => "u16",
        DType::UInt32 => "u32",
        DType::UInt64 => "u64",
        DType::Float16 => "f16",
        DType::BFloat16 => "bf16",
        DType::Float32 => "float",
        DType::Float64 => "double",
        DType::Float8E4m3fn => "f8e4m3",
        DType::Float8E5m2 => "f8e5m2",
        other => return Err(Error::Unsupported(format!("fused elementwise kernels do not support {other}"))),
    })
}

/// The register type values of `d` are computed in.
fn compute(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::Float64 => "double",
        d if d.is_float() => "float",
        d if d.is_signed_integral() => "long long",
        _ => "unsigned long long",
    }
}

/// Loads a storage value into its compute type (exact).
fn load(d: DType, expr: &str) -> String {
    match d {
        DType::Bool | DType::Float32 | DType::Float64 => expr.to_string(),
        d if d.is_float() => format!("to_f32({expr})"),
        d => format!("({})({expr})", compute(d)),
    }
}

/// Rounds a compute value to dtype `d` and back (floats narrower than their compute type,
/// integers narrower than 64 bits).
fn round(d: DType, expr: &str) -> String {
    match d {
        // NaN needs no canonical bits here: only the stored result's are visible.
        DType::Float16 => format!("round_f16_({expr})"),
        DType::BFloat16 => format!("round_bf16_({expr})"),
        DType::Float8E4m3fn | DType::Float8E5m2 => {
            format!("to_f32(FromF32<{}>::go({expr}))", storage(d).unwrap_or("float"))
        }
        DType::Int8 | DType::Int16 | DType::Int32 | DType::UInt8 | DType::UInt16 | DType::UInt32 => {
            format!("({})({})({expr})", compute(d), storage(d).unwrap_or("i64"))
        }
        _ => expr.to_string(),
    }
}

fn unary_float(op: OpKind, x: &str, double: bool, approximate: Option<&str>) -> Option<String> {
    let f = |name: &str| if double { format!("{name}({x})") } else { format!("{name}f({x})") };
    Some(match op {
        OpKind::Abs => f("fabs"),
        OpKind::Negate => format!("(-{x})"),
        OpKind::Exp => f("exp"),
        OpKind::Log => f("log"),
        OpKind::Log1p => f("log1p"),
        OpKind::Sqrt => f("sqrt"),
        OpKind::Rsqrt => {
            if double {
                format!("(1.0 / sqrt({x}))")
            } else {
                format!("(1.0f / sqrtf({x}))")
            }
        }
        OpKind::Sin => f("sin"),
        OpKind::Cos => f("cos"),
        OpKind::Tanh => f("tanh"),
        OpKind::Acos => f("acos"),
        OpKind::Atanh => f("atanh"),
        OpKind::Erf => f("erf"),
        OpKind::Floor => f("floor"),
        OpKind::Round => f("rint"),
        OpKind::Trunc => f("trunc"),
        OpKind::Relu => format!("relu_({x})"),
        OpKind::Sigmoid => format!("sigmoid_({x})"),
        OpKind::Silu => format!("({x} * sigmoid_({x}))"),
        OpKind::Gelu => match approximate {
            Some("tanh") => format!("gelu_tanh_({x})"),
            Some("quick") if double => format!("({x} * sigmoid_(1.702 * {x}))"),
            Some("quick") => format!("({x} * sigmoid_(1.702f * {x}))"),
            _ => format!("gelu_erf_({x})"),
        },
        _ => return None,
    })
}

fn binary(op: OpKind, a: &str, b: &str, kind: &str) -> Option<String> {
    let float = kind == "float" || kind == "double";
    let signed = kind == "long long";
    Some(match (op, kind) {
        (OpKind::Add, "bool") | (OpKind::Maximum, "bool") | (OpKind::LogicalOr, _) => format!("({a} || {b})"),
        (OpKind::Mul, "bool") | (OpKind::Minimum, "bool") | (OpKind::LogicalAnd, _) => format!("({a} && {b})"),
        (OpKind::Sub, "bool") | (OpKind::LogicalXor, _) => format!("({a} != {b})"),
        (OpKind::Greater, "bool") => format!("({a} && !{b})"),
        (OpKind::GreaterEqual, "bool") => format!("({a} || !{b})"),
        (OpKind::Add, _) if !float => format!("({kind})((unsigned long long){a} + (unsigned long long){b})"),
        (OpKind::Sub, _) if !float => format!("({kind})((unsigned long long){a} - (unsigned long long){b})"),
        (OpKind::Mul, _) if !float => format!("({kind})((unsigned long long){a} * (unsigned long long){b})"),
        // Rounded intrinsics, so that NVRTC does not contract a product and a sum into one FMA:
        // every node rounds as the host backend rounds it.
        (OpKind::Add, "double") => format!("__dadd_rn({a}, {b})"),
        (OpKind::Sub, "double") => format!("__dsub_rn({a}, {b})"),
        (OpKind::Mul, "double") => format!("__dmul_rn({a}, {b})"),
        (OpKind::Add, _) => format!("__fadd_rn({a}, {b})"),
        (OpKind::Sub, _) => format!("__fsub_rn({a}, {b})"),
        (OpKind::Mul, _) => format!("__fmul_rn({a}, {b})"),
        (OpKind::Div, _) => format!("({a} / {b})"),
        (OpKind::FloorDiv, _) if float => format!("floor_div_({a}, {b})"),
        (OpKind::FloorDiv, _) => format!("{}({a}, {b})", if signed { "idiv_floor_" } else { "udiv_" }),
        (OpKind::Mod, _) if float => format!("py_mod_({a}, {b})"),
        (OpKind::Mod, _) => format!("{}({a}, {b})", if signed { "imod_py_" } else { "umod_" }),
        (OpKind::Pow, "double") => format!("pow({a}, {b})"),
        (OpKind::Pow, "float") => format!("powf({a}, {b})"),
        (OpKind::Pow, _) => format!("{}({a}, {b})", if signed { "ipow_" } else { "upow_" }),
        (OpKind::Maximum, _) if float => format!("fmax_nan_({a}, {b})"),
        (OpKind::Minimum, _) if float => format!("fmin_nan_({a}, {b})"),
        (OpKind::Maximum, _) => format!("({a} > {b} ? {a} : {b})"),
        (OpKind::Minimum, _) => format!("({a} < {b} ? {a} : {b})"),
        (OpKind::Equal, _) => format!("({a} == {b})"),
        (OpKind::NotEqual, _) => format!("({a} != {b})"),
        (OpKind::Greater, _) => format!("({a} > {b})"),
        (OpKind::GreaterEqual, _) => format!("({a} >= {b})"),
        _ => return None,
    })
}

/// Helper functions the generated expressions call.
const HELPERS: &str = include_str!("../kernels/fused_helpers.cuh");

/// Converts a compute value of `from` into the compute type of `to` with the cast rules.
fn cast(from: DType, to: DType, x: &str) -> Result<String> {
    let (s_from, s_to) = (storage(from)?, storage(to)?);
    let as_storage = match from {
        DType::Bool | DType::Float32 | DType::Float64 => x.to_string(),
        d if d.is_float() => format!("FromF32<{s_from}>::go({x})"),
        _ => format!("({s_from})({x})"),
    };
    Ok(load(to, &format!("convert<{s_to}>({as_storage})")))
}

/// The value of `node`, rounded to its dtype; the stored (`last`) 16-bit float is left unrounded,
/// as the store rounds it.
fn expression(
    spec: &FusedSpec,
    node: &Node,
    vals: &[String],
    inputs: &[DType],
    nodes: &[Node],
    last: bool,
) -> Result<String> {
    let dtype_of = |a: &Arg| match a {
        Arg::Input(i) => inputs[*i],
        Arg::Node(j) => nodes[*j].dtype,
    };
    let arg = |k: usize| -> Result<(String, DType)> {
        let a =
            node.args.get(k).ok_or_else(|| Error::Unsupported(format!("{}: missing operand {k}", node.op.name())))?;
        let v = match a {
            Arg::Input(i) => format!("a{i}"),
            Arg::Node(j) => vals[*j].clone(),
        };
        Ok((v, dtype_of(a)))
    };
    let _ = spec;
    let out_kind = compute(node.dtype);
    let raw = match node.op {
        OpKind::Gelu
            if matches!(node.dtype, DType::BFloat16 | DType::Float16)
                && matches!(node.approximate.as_deref(), None | Some("none")) =>
        {
            format!("gelu_erf16_({})", arg(0)?.0)
        }
        OpKind::Cast => {
            let (x, d) = arg(0)?;
            return cast(d, node.dtype, &x);
        }
        OpKind::Where => {
            let ((c, _), (x, _), (y, _)) = (arg(0)?, arg(1)?, arg(2)?);
            format!("({c} ? {x} : {y})")
        }
        OpKind::IsNan => format!("({0} != {0})", arg(0)?.0),
        OpKind::IsInf => format!("isinf({})", arg(0)?.0),
        OpKind::LogicalNot => format!("(!{})", arg(0)?.0),
        op if node.args.len() == 1 => {
            let (x, d) = arg(0)?;
            let in_kind = compute(d);
            match in_kind {
                "float" | "double" => unary_float(op, &x, in_kind == "double", node.approximate.as_deref())
                    .ok_or_else(|| Error::Unsupported(format!("{} has no fused form", op.name())))?,
                "bool" => match op {
                    OpKind::Abs | OpKind::Negate | OpKind::Relu | OpKind::Floor | OpKind::Round | OpKind::Trunc => x,
                    _ => cast(
                        DType::Float64,
                        node.dtype,
                        &unary_float(op, &format!("(double){x}"), true, node.approximate.as_deref())
                            .unwrap_or_default(),
                    )?,
                },
                k => match op {
                    OpKind::Abs if k == "long long" => {
                        format!("({x} < 0 ? (long long)(0ull - (unsigned long long){x}) : {x})")
                    }
                    OpKind::Negate => format!("({k})(0ull - (unsigned long long){x})"),
                    OpKind::Relu if k == "long long" => format!("({x} > 0 ? {x} : 0ll)"),
                    OpKind::Abs | OpKind::Relu | OpKind::Floor | OpKind::Round | OpKind::Trunc => x,
                    _ => {
                        let f = unary_float(op, &format!("(double){x}"), true, node.approximate.as_deref())
                            .ok_or_else(|| Error::Unsupported(format!("{} has no fused form", op.name())))?;
                        return cast(DType::Float64, node.dtype, &f);
                    }
                },
            }
        }
        op => {
            let ((a, da), (b, _)) = (arg(0)?, arg(1)?);
            binary(op, &a, &b, compute(da))
                .ok_or_else(|| Error::Unsupported(format!("{} has no fused form", op.name())))?
        }
    };
    let _ = out_kind;
    if last && matches!(node.dtype, DType::Float16 | DType::BFloat16) {
        return Ok(raw);
    }
    Ok(round(node.dtype, &raw))
}

/// The CUDA source of a group (entry points `fused` and `fused_contig`).
pub fn source(spec: &FusedSpec) -> Result<String> {
    if spec.rank > MAX_RANK || spec.inputs.len() > MAX_INPUTS || spec.nodes.is_empty() {
        return Err(Error::Unsupported(format!(
            "fused group too large for one kernel (rank {}, {} inputs, {} nodes)",
            spec.rank,
            spec.inputs.len(),
            spec.nodes.len()
        )));
    }
    let out = spec.nodes.last().map(|n| n.dtype).unwrap_or(DType::Float32);
    let mut s = String::new();
    s.push_str(HELPERS);
    let r = spec.rank.max(1);
    let ni = spec.inputs.len().max(1);
    let _ = writeln!(s, "struct Geometry {{ i64 shape[{r}]; i64 strides[{ni}][{r}]; }};");
    let params: Vec<String> = spec
        .inputs
        .iter()
        .enumerate()
        .map(|(i, d)| Ok(format!("const {}* __restrict__ in{i}", storage(*d)?)))
        .collect::<Result<_>>()?;
    let mut body = String::new();
    let mut vals: Vec<String> = Vec::new();
    for (j, node) in spec.nodes.iter().enumerate() {
        let e = expression(spec, node, &vals, &spec.inputs, &spec.nodes, j + 1 == spec.nodes.len())?;
        let _ = writeln!(body, "        const {} v{j} = {e};", compute(node.dtype));
        vals.push(format!("v{j}"));
    }
    let last = vals.len() - 1;
    let store = match out {
        // A NaN result is stored as the dtype's canonical quiet NaN (sign kept), as the host does.
        DType::Float32 => format!("FromF32<float>::go(v{last})"),
        DType::Bool | DType::Float64 => format!("v{last}"),
        d if d.is_float() => format!("FromF32<{}>::go(v{last})", storage(d)?),
        d => format!("({})v{last}", storage(d)?),
    };
    let loads_at = |offset: &dyn Fn(usize) -> String| -> Result<String> {
        let mut l = String::new();
        for (i, d) in spec.inputs.iter().enumerate() {
            let _ = writeln!(l, "        const {} a{i} = {};", compute(*d), load(*d, &format!("in{i}[{}]", offset(i))));
        }
        Ok(l)
    };
    let out_ty = storage(out)?;
    let sig =
        format!("{out_ty}* __restrict__ out{}{}, u64 n", if params.is_empty() { "" } else { ", " }, params.join(", "));
    // General form: per-input offsets from the output index.
    let _ = writeln!(s, "extern \"C\" __global__ void fused({sig}, Geometry g) {{");
    let _ = writeln!(
        s,
        "    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {{"
    );
    let _ = writeln!(s, "        u64 rest = i;");
    for i in 0..spec.inputs.len() {
        let _ = writeln!(s, "        i64 o{i} = 0;");
    }
    let _ = writeln!(s, "        for (int d = {} - 1; d >= 0; --d) {{", spec.rank);
    let _ = writeln!(s, "            const i64 c = (i64)(rest % (u64)g.shape[d]); rest /= (u64)g.shape[d];");
    for i in 0..spec.inputs.len() {
        let _ = writeln!(s, "            o{i} += c * g.strides[{i}][d];");
    }
    let _ = writeln!(s, "        }}");
    s.push_str(&loads_at(&|i| format!("o{i}"))?);
    s.push_str(&body);
    let _ = writeln!(s, "        out[i] = {store};\n    }}\n}}");
    // Contiguous form: same-shape inputs read at i, scalars at 0 (flagged per input). Each
    // thread handles UNROLL elements a block apart per step: still coalesced, with UNROLL
    // independent loads in flight per input to cover memory latency.
    let _ = writeln!(s, "#define UNROLL {UNROLL}");
    let _ = writeln!(s, "extern \"C\" __global__ void fused_contig({sig}, u32 scalar_mask) {{");
    let _ = writeln!(s, "    const u64 step = (u64)gridDim.x * blockDim.x * UNROLL;");
    let _ = writeln!(
        s,
        "    for (u64 base = blockIdx.x * (u64)blockDim.x * UNROLL + threadIdx.x; base < n; base += step) {{"
    );
    let _ = writeln!(s, "#pragma unroll\n    for (int u = 0; u < UNROLL; ++u) {{");
    let _ = writeln!(s, "        const u64 i = base + (u64)u * blockDim.x;");
    let _ = writeln!(s, "        if (i >= n) break;");
    s.push_str(&loads_at(&|i| format!("((scalar_mask >> {i}) & 1u) ? 0 : i"))?);
    s.push_str(&body);
    let _ = writeln!(s, "        out[i] = {store};\n    }}\n    }}\n}}");
    // Vector form: each thread handles VEC consecutive elements through one 16-byte (or
    // narrower, for narrow types) load per input and one store, then a scalar tail.
    let widest = spec.inputs.iter().chain(std::iter::once(&out)).map(|d| d.size_in_bytes()).max().unwrap_or(4);
    let vec = (16 / widest.max(1)).max(1);
    let _ = writeln!(s, "#define VEC {vec}");
    let _ = writeln!(s, "template <typename T> struct alignas(sizeof(T) * VEC) Pack {{ T v[VEC]; }};");
    // fused_vec2 has each thread load two vectors per input before computing either: twice the
    // bytes in flight per thread, for groups whose arithmetic keeps register use (and so
    // occupancy) from hiding memory latency with one.
    for (name, vu) in [("fused_vec", 1), ("fused_vec2", 2)] {
        let _ = writeln!(s, "extern \"C\" __global__ void {name}({sig}, u32 scalar_mask) {{");
        let _ = writeln!(s, "    const u64 nvec = n / VEC, stride = (u64)gridDim.x * blockDim.x;");
        let _ = writeln!(
            s,
            "    for (u64 j0 = blockIdx.x * (u64)blockDim.x + threadIdx.x; j0 < nvec; j0 += stride * {vu}) {{"
        );
        for (i, d) in spec.inputs.iter().enumerate() {
            let t = storage(*d)?;
            let _ = writeln!(s, "        Pack<{t}> p{i}[{vu}];");
        }
        let _ = writeln!(s, "#pragma unroll\n        for (int u = 0; u < {vu}; ++u) {{");
        let _ = writeln!(s, "            const u64 j = j0 + u * stride;");
        let _ = writeln!(s, "            if (j >= nvec) break;");
        for (i, d) in spec.inputs.iter().enumerate() {
            let t = storage(*d)?;
            let _ = writeln!(
                s,
                "            if ((scalar_mask >> {i}) & 1u) {{ for (int q = 0; q < VEC; ++q) p{i}[u].v[q] = in{i}[0]; }} else {{ p{i}[u] = *reinterpret_cast<const Pack<{t}>*>(in{i} + j * VEC); }}"
            );
        }
        let _ = writeln!(s, "        }}");
        let _ = writeln!(s, "#pragma unroll\n        for (int u = 0; u < {vu}; ++u) {{");
        let _ = writeln!(s, "            const u64 j = j0 + u * stride;");
        let _ = writeln!(s, "            if (j >= nvec) break;");
        let _ = writeln!(s, "            Pack<{out_ty}> po;");
        // f16 fast paths (fused_helpers.cuh): packs of f16 inputs free of NaNs decode with one
        // conversion per element (the body is emitted twice, the branch taken per pack), and
        // f16 results free of NaNs encode a pair per conversion.
        let f16_in: Vec<usize> = (0..spec.inputs.len()).filter(|&i| spec.inputs[i] == DType::Float16).collect();
        let f16_out = out == DType::Float16;
        if f16_out {
            let _ = writeln!(s, "            float r[VEC];");
        }
        let result = if f16_out { format!("r[q] = v{last};") } else { format!("po.v[q] = {store};") };
        let per_element = |fast: bool| {
            let mut e = String::from("#pragma unroll\n            for (int q = 0; q < VEC; ++q) {\n");
            for (i, d) in spec.inputs.iter().enumerate() {
                let at = format!("p{i}[u].v[q]");
                let v = if fast && *d == DType::Float16 { format!("f16_to_f32_finite({at})") } else { load(*d, &at) };
                let _ = writeln!(e, "        const {} a{i} = {v};", compute(*d));
            }
            e.push_str(&body);
            let _ = writeln!(e, "            {result}\n            }}");
            e
        };
        if f16_in.is_empty() {
            s.push_str(&per_element(false));
        } else {
            let nan: Vec<String> = f16_in.iter().map(|i| format!("f16_pack_has_nan(p{i}[u].v)")).collect();
            let _ = writeln!(s, "            if (!({})) {{", nan.join(" || "));
            s.push_str(&per_element(true));
            let _ = writeln!(s, "            }} else {{");
            s.push_str(&per_element(false));
            let _ = writeln!(s, "            }}");
        }
        if f16_out {
            let _ = writeln!(s, "            f16_pack_from_f32(r, po.v);");
        }
        let _ = writeln!(s, "            *reinterpret_cast<Pack<{out_ty}>*>(out + j * VEC) = po;\n        }}\n    }}");
        let _ = writeln!(
            s,
            "    for (u64 i = nvec * VEC + blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += stride) {{"
        );
        s.push_str(&loads_at(&|i| format!("((scalar_mask >> {i}) & 1u) ? 0 : i"))?);
        s.push_str(&body);
        let _ = writeln!(s, "        out[i] = {store};\n    }}\n}}");
    }
    Ok(s)
}

/// Each generated source becomes a `Family` (leaked once: there is one per distinct group).
fn family(spec: &FusedSpec) -> Result<Family> {
    static KNOWN: Mutex<Vec<(FusedSpec, Family)>> = Mutex::new(Vec::new());
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, f)) = known.iter().find(|(s, _)| s == spec) {
        return Ok(*f);
    }
    let src: &'static str = Box::leak(source(spec)?.into_boxed_str());
    let name: &'static str = Box::leak(format!("fused{}", known.len()).into_boxed_str());
    let f = Family { name, source: src };
    known.push((spec.clone(), f));
    Ok(f)
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Geometry<const R: usize, const N: usize> {
    shape: [i64; R],
    strides: [[i64; R]; N],
}
// SAFETY: plain-old-data matching the generated `Geometry` struct.
unsafe impl<const R: usize, const N: usize> DeviceRepr for Geometry<R, N> {}

/// How one input is read: its device address and element strides per output axis.
pub struct Input {
    pub ptr: u64,
    pub strides: Vec<i64>,
    /// Same shape as the output and contiguous.
    pub same_layout: bool,
    pub scalar: bool,
}

fn push_geometry<const R: usize>(
    launch: &mut cudarc::driver::LaunchArgs<'_>,
    shape: &[usize],
    inputs: &[Input],
    keep: &mut Vec<Arc<dyn std::any::Any>>,
) -> Result<()> {
    macro_rules! with_n {
        ($($n:literal)*) => {
            match inputs.len().max(1) {
                $($n => {
                    let mut g = Geometry::<R, $n> { shape: [1; R], strides: [[0; R]; $n] };
                    for (d, s) in shape.iter().enumerate() { g.shape[d] = *s as i64; }
                    for (i, inp) in inputs.iter().enumerate() {
                        for (d, st) in inp.strides.iter().enumerate() { g.strides[i][d] = *st; }
                    }
                    let g = Arc::new(g);
                    // SAFETY: the Arc outlives the launch (kept in `keep` until it returns).
                    let r: &'static Geometry<R, $n> = unsafe { &*Arc::as_ptr(&g) };
                    launch.arg(r);
                    keep.push(g);
                    Ok(())
                })*
                n => Err(Error::Unsupported(format!("fused group with {n} inputs"))),
            }
        };
    }
    with_n!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
}

/// Whether the vector form loads two vectors per thread step: for 16-bit (and narrower) data
/// with at most two streamed inputs, where one 16-byte vector per input leaves too few bytes in
/// flight per thread for 8 elements of arithmetic (measured on an H200: relu and gelu(a)+b gain,
/// a*b+c loses). The tuning knob `fusion.vec2` forces the choice.
fn two_vectors(widest: usize, streamed: usize) -> bool {
    max_tuning::current().flag(max_tuning::Knob::FusionVec2).unwrap_or(widest <= 2 && streamed <= 2)
}

/// Launches the group on `stream`: `out` holds `shape`'s elements (contiguous).
pub fn launch(stream: &Arc<CudaStream>, spec: &FusedSpec, out: u64, shape: &[usize], inputs: &[Input]) -> Result<()> {
    let n: u64 = shape.iter().map(|d| *d as u64).product();
    if n == 0 {
        return Ok(());
    }
    let fam = family(spec)?;
    let contig = inputs.iter().all(|i| i.same_layout || i.scalar);
    // The vector form needs every streamed pointer 16-byte aligned.
    let vectorized = contig && out.is_multiple_of(16) && inputs.iter().all(|i| i.scalar || i.ptr % 16 == 0);
    let out_dtype = spec.nodes.last().map(|nd| nd.dtype).unwrap_or(DType::Float32);
    let widest = spec.inputs.iter().chain(std::iter::once(&out_dtype)).map(|d| d.size_in_bytes()).max().unwrap_or(4);
    let streamed = inputs.iter().filter(|i| !i.scalar).count();
    let two = vectorized && two_vectors(widest, streamed);
    let name = if two {
        "fused_vec2"
    } else if vectorized {
        "fused_vec"
    } else if contig {
        "fused_contig"
    } else {
        "fused"
    };
    let f = function(stream.context(), &fam, name)?;
    let per_block = if vectorized {
        256 * (16 / widest.max(1)).max(1) as u64 * if two { 2 } else { 1 }
    } else if contig {
        256 * UNROLL
    } else {
        256
    };
    let blocks = n.div_ceil(per_block).clamp(1, 1 << 16) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut launch = stream.launch_builder(&f);
    // The generated signature is (out, in0, in1, ..., n, geometry-or-mask).
    launch.arg(&out);
    let ptrs: Vec<u64> = inputs.iter().map(|i| i.ptr).collect();
    for p in &ptrs {
        launch.arg(p);
    }
    launch.arg(&n);
    let mut keep: Vec<Arc<dyn std::any::Any>> = Vec::new();
    let mask: u32 =
        inputs.iter().enumerate().map(|(i, inp)| if inp.scalar && !inp.same_layout { 1 << i } else { 0 }).sum();
    if contig {
        launch.arg(&mask);
    } else {
        macro_rules! with_r {
            ($($r:literal)*) => {
                match spec.rank.max(1) {
                    $($r => push_geometry::<$r>(&mut launch, shape, inputs, &mut keep)?,)*
                    r => return Err(Error::Unsupported(format!("fused group of rank {r}"))),
                }
            };
        }
        with_r!(1 2 3 4 5 6 7 8);
    }
    // SAFETY: argument list matches the generated signature; every pointer addresses a live
    // device buffer of the right size (the caller's contract).
    unsafe { launch.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(fused)"))?;
    drop(keep);
    crate::launch::record::record("fused", || (name.to_string(), vec![("inputs", inputs.len() as i64)]));
    Ok(())
}

/// Compiles a group's source for `arch` without a GPU (CI checks generated kernels this way).
pub fn compile_check(spec: &FusedSpec, arch: &str) -> Result<Vec<u8>> {
    let src = source(spec)?;
    let fam = Family { name: "fused_check", source: Box::leak(src.into_boxed_str()) };
    crate::compile(&fam, arch, crate::Target::Ptx)
}
