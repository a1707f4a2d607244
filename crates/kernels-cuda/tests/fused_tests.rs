//! Generated fused elementwise kernels compile with NVRTC for sm_90a, for a sample of groups
//! covering every op kind and dtype class. Skips without libnvrtc unless MAX_REQUIRE_NVRTC=1.

use max_graph::DType;
use max_graph::ops::{Family, OpKind};
use max_kernels_cuda::fused::{Arg, FusedSpec, Node, compile_check};

fn nvrtc() -> bool {
    match max_kernels_cuda::ensure_nvrtc() {
        Ok(()) => true,
        Err(e) if std::env::var("MAX_REQUIRE_NVRTC").as_deref() != Ok("1") => {
            eprintln!("skipping: {e}");
            false
        }
        Err(e) => panic!("MAX_REQUIRE_NVRTC=1 but {e}"),
    }
}

fn node(op: OpKind, args: Vec<Arg>, dtype: DType) -> Node {
    Node { op, args, dtype, approximate: None }
}

#[test]
fn every_elementwise_op_compiles_for_each_dtype_class() {
    if !nvrtc() {
        return;
    }
    let unary: Vec<OpKind> = OpKind::ALL
        .iter()
        .copied()
        .filter(|k| {
            k.family() == Family::Elementwise
                && k.arg_names().len() == 1
                && !matches!(k, OpKind::LogicalNot | OpKind::IsNan | OpKind::IsInf)
        })
        .collect();
    let binary: Vec<OpKind> = OpKind::ALL
        .iter()
        .copied()
        .filter(|k| {
            k.family() == Family::Elementwise
                && k.arg_names().len() == 2
                && !matches!(k, OpKind::LogicalAnd | OpKind::LogicalOr | OpKind::LogicalXor)
        })
        .collect();
    for dtype in [
        DType::Float32,
        DType::BFloat16,
        DType::Float16,
        DType::Float64,
        DType::Int8,
        DType::Int64,
        DType::UInt32,
        DType::Float8E4m3fn,
    ] {
        let mut nodes = Vec::new();
        for k in &unary {
            nodes.push(node(*k, vec![Arg::Input(0)], dtype));
        }
        for k in &binary {
            let out = if matches!(k, OpKind::Equal | OpKind::NotEqual | OpKind::Greater | OpKind::GreaterEqual) {
                DType::Bool
            } else {
                dtype
            };
            nodes.push(node(*k, vec![Arg::Input(0), Arg::Input(1)], out));
        }
        let n = nodes.len();
        nodes.push(node(OpKind::Greater, vec![Arg::Node(0), Arg::Node(1)], DType::Bool));
        nodes.push(node(OpKind::Where, vec![Arg::Node(n), Arg::Node(2), Arg::Input(1)], dtype));
        nodes.push(node(OpKind::Cast, vec![Arg::Node(n + 1)], DType::Float32));
        let spec = FusedSpec { inputs: vec![dtype, dtype], nodes, rank: 3 };
        let ptx = compile_check(&spec, "sm_90a").unwrap_or_else(|e| panic!("{dtype}: {e}"));
        let text = String::from_utf8_lossy(&ptx);
        assert!(
            text.contains(".entry fused(")
                && text.contains(".entry fused_contig(")
                && text.contains(".entry fused_vec("),
            "{dtype}"
        );
    }
}

#[test]
fn bool_logic_and_gelu_modes_compile() {
    if !nvrtc() {
        return;
    }
    let mut nodes = vec![
        node(OpKind::LogicalAnd, vec![Arg::Input(0), Arg::Input(1)], DType::Bool),
        node(OpKind::LogicalXor, vec![Arg::Node(0), Arg::Input(1)], DType::Bool),
        node(OpKind::LogicalNot, vec![Arg::Node(1)], DType::Bool),
        node(OpKind::Cast, vec![Arg::Node(2)], DType::BFloat16),
    ];
    for mode in ["none", "tanh", "quick"] {
        nodes.push(Node {
            op: OpKind::Gelu,
            args: vec![Arg::Node(3)],
            dtype: DType::BFloat16,
            approximate: Some(mode.into()),
        });
    }
    let spec = FusedSpec { inputs: vec![DType::Bool, DType::Bool], nodes, rank: 1 };
    compile_check(&spec, "sm_90a").unwrap();
}
