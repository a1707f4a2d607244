//! Table tests of the conv2d selection on an H200's facts (132 SMs, 60 MiB of L2, a cluster per
//! SM pair): the defaults on ResNet-50's layers, and each `conv.*` knob changing what runs.

use max_tuning::{Knob, Tuning};

use super::*;
use crate::launch::epilogue::Act;

const SMS: usize = 132;

fn facts_clusters(_smem: u32, _trio: bool) -> Result<usize> {
    Ok(SMS / 2)
}

fn shape(n: usize, hw: usize, c: usize, k: usize, rs: usize, stride: usize) -> Conv2dShape {
    let pad = rs / 2;
    let out = (hw + 2 * pad - rs) / stride + 1;
    Conv2dShape { n, h: hw, w: hw, c, k, r: rs, s: rs, p: out, q: out, stride: [stride; 2], pad: [pad; 2], dil: [1, 1] }
}

/// A ResNet block's conv with bias, relu and (optionally) a residual, all 16-byte aligned.
fn epi(residual: bool) -> Epilogue {
    Epilogue::new(Some(0x20_0000), Act::Relu, residual.then_some(0x30_0000))
}

fn run(sh: &Conv2dShape, e: &Epilogue, bias: u64, knobs: &Knobs) -> ConvConfig {
    let facts = DeviceFacts { sms: SMS, l2_bytes: 60 << 20, clusters: &facts_clusters };
    let p = Problem { dtype: DType::BFloat16, sh, ptrs: (0x1000, 0x2000, bias, 0x4000), epi: e };
    match select(&p, &facts, knobs).unwrap() {
        Selection::Run(c) => c,
        Selection::NotEligible(why) => panic!("not eligible: {why}"),
    }
}

fn knobs(spec: &str) -> Knobs {
    Knobs::from_tuning(&Tuning::parse(spec).unwrap())
}

/// The 1x1 56x56 64 -> 256 expansion with a residual (batch 32), the 3x3 28x28 128 -> 128
/// (batch 32) without one, a 7x7 2048 -> 512 reduction at batch 1 (few tiles, a long reduction), and a plain 3x3
/// conv with no epilogue at all.
fn cases() -> [(Conv2dShape, Epilogue); 4] {
    [
        (shape(32, 56, 64, 256, 1, 1), epi(true)),
        (shape(32, 28, 128, 128, 3, 1), epi(false)),
        (shape(1, 7, 2048, 512, 1, 1), epi(true)),
        (shape(32, 56, 64, 64, 3, 1), Epilogue::default()),
    ]
}

#[test]
fn defaults_on_resnet_layers() {
    let [expand, three, tail, plain] = cases();
    let c = run(&expand.0, &expand.1, 0, &knobs(""));
    assert_eq!((c.splits, c.staged, c.tiled_a, c.pdl), (1, 3, true, true), "{c:?}");
    assert!(c.lean && c.res_ring && c.tma_out && c.packed, "{c:?}");
    let c = run(&three.0, &three.1, 0, &knobs(""));
    assert_eq!((c.splits, c.staged, c.tiled_a, c.res_ring), (1, 2, false, false), "{c:?}");
    let c = run(&tail.0, &tail.1, 0, &knobs(""));
    assert!(c.splits > 1, "few tiles split the reduction: {c:?}");
    assert_eq!((c.staged, c.lean), (0, false));
    let c = run(&plain.0, &plain.1, 0, &knobs(""));
    assert!(c.plain && !c.lean, "{c:?}");
    // Every config names an entry of the kernel's families and fits shared memory.
    for (sh, e) in cases() {
        let c = run(&sh, &e, 0, &knobs(""));
        assert!(c.kernel.starts_with("conv_sm90_bf16_n"), "{}", c.kernel);
        assert!(c.smem <= SMEM_MAX && c.grid >= 1 && c.grid <= SMS.max(c.tiles));
    }
}

/// Each knob, on a case where it applies, changes the configuration the way it says.
#[test]
fn every_conv_knob_changes_what_runs() {
    let [expand, three, tail, plain] = cases();
    let base = |case: &(Conv2dShape, Epilogue)| run(&case.0, &case.1, 0, &knobs(""));
    let with = |case: &(Conv2dShape, Epilogue), spec: &str| run(&case.0, &case.1, 0, &knobs(spec));
    let check = |name: &str, before: &ConvConfig, after: &ConvConfig, holds: bool| {
        assert!(holds && before != after, "{name}: {before:?} -> {after:?}");
    };

    let (b, a) = (base(&three), with(&three, "conv.bn=64"));
    check("conv.bn", &b, &a, a.bn == 64 && b.bn != 64);
    let (b, a) = (base(&three), with(&three, "conv.bm=256,conv.bn=128"));
    check("conv.bm", &b, &a, a.bm == 256);
    let (b, a) = (base(&three), with(&three, "conv.grid=40"));
    check("conv.grid", &b, &a, a.grid == 40);
    let (b, a) = (base(&three), with(&three, "conv.splitk=3"));
    check("conv.splitk", &b, &a, a.splits == 3 && b.splits == 1);
    let (b, a) = (base(&three), with(&three, "conv.bm=128,conv.bn=128,conv.pingpong=1"));
    check("conv.pingpong", &b, &a, a.pingpong && !b.pingpong && a.kernel.contains("_pp"));
    let (b, a) = (base(&three), with(&three, "conv.lean=0"));
    check("conv.lean", &b, &a, b.lean && !a.lean);
    let (b, a) = (base(&three), with(&three, "conv.pdl=0"));
    check("conv.pdl", &b, &a, b.pdl && !a.pdl && a.flags() & 4 == 0);
    let (b, a) = (base(&three), with(&three, "conv.vec=0"));
    check("conv.vec", &b, &a, b.staged == 2 && a.staged == 0);
    let (b, a) = (base(&expand), with(&expand, "conv.res_vec=0"));
    check("conv.res_vec", &b, &a, b.staged == 3 && a.staged == 2);
    let (b, a) = (base(&expand), with(&expand, "conv.res_ring=0"));
    check("conv.res_ring", &b, &a, b.res_ring && !a.res_ring);
    let narrow = (expand.0, expand.1);
    let narrow_spec = "conv.bn=128,conv.pingpong=0";
    let (b, a) = (with(&narrow, narrow_spec), with(&narrow, &format!("{narrow_spec},conv.res_buf=0")));
    check("conv.res_buf", &b, &a, b.res_buf && !a.res_buf);
    let (b, a) = (base(&expand), with(&expand, "conv.tma_out=0"));
    check("conv.tma_out", &b, &a, b.tma_out && !a.tma_out);
    let (b, a) = (base(&expand), with(&expand, "conv.store_tma=1"));
    check("conv.store_tma", &b, &a, b.vector && !a.vector);
    let (b, a) = (base(&expand), with(&expand, "conv.packed=0"));
    check("conv.packed", &b, &a, b.packed && !a.packed);
    let (b, a) = (base(&three), with(&three, "conv.early_bias=0"));
    check("conv.early_bias", &b, &a, b.early_bias && !a.early_bias);
    // With the residual read from global memory: its L2 prefetch (a residual within half of L2)
    // and the warps' row prefetch.
    let mid = (shape(32, 28, 128, 512, 1, 1), epi(true));
    let (b, a) = (with(&mid, "conv.res_ring=0"), with(&mid, "conv.res_ring=0,conv.prefetch=0"));
    check("conv.prefetch", &b, &a, b.prefetch_l2 && !a.prefetch_l2);
    let (b, a) = (with(&mid, "conv.res_ring=0"), with(&mid, "conv.res_ring=0,conv.line_prefetch=0"));
    check("conv.line_prefetch", &b, &a, b.line_prefetch && !a.line_prefetch);
    let (b, a) = (base(&expand), with(&expand, "conv.tiled_a=0"));
    check("conv.tiled_a", &b, &a, b.tiled_a && !a.tiled_a);
    // 192-row tiles in clusters of two, and the short ping-pong tiles of plain convs.
    let trio = "conv.bm=192,conv.bn=128";
    let wide = (shape(32, 28, 128, 256, 3, 1), epi(false));
    let (b, a) = (with(&wide, &format!("{trio},conv.cluster=1")), with(&wide, &format!("{trio},conv.cluster=2")));
    check("conv.cluster", &b, &a, !b.cluster && a.cluster && a.kernel.ends_with("_c2"));
    let pp64 = "conv.bm=128,conv.bn=64,conv.pingpong=1";
    let (b, a) = (with(&plain, pp64), with(&plain, &format!("{pp64},conv.tm=64")));
    check("conv.tm", &b, &a, a.tm == Some(64) && a.flags() >> 8 & 0xff == 64);
    // A small problem splits by default; conv.splitk=1 keeps it whole.
    let (b, a) = (base(&tail), with(&tail, "conv.splitk=1"));
    check("conv.splitk=1", &b, &a, b.splits > 1 && a.splits == 1);
}

/// conv.fold decides how far padded convs (C % 8 != 0) fold the filter into the channels.
#[test]
fn fold_knob_changes_the_padded_form() {
    let stem = shape(32, 224, 3, 64, 7, 2);
    let e = epi(false);
    let form = |spec: &str| {
        let fold = knobs(spec).fold.unwrap_or(2);
        let p = super::super::pad::plan(DType::BFloat16, &stem, (0x1000, 0x2000, 0, 0x4000), &e, fold);
        p.first().map(|p| (p.fold_rows, p.fold_cols))
    };
    assert_eq!(form(""), form("conv.fold=2"));
    assert_ne!(form("conv.fold=2"), form("conv.fold=1"));
    assert_ne!(form("conv.fold=1"), form("conv.fold=0"));
    assert_eq!(form("conv.fold=0"), Some((1, 1)));
}

#[test]
fn knobs_read_the_registry() {
    let t = Tuning::default().with_value(Knob::ConvBn, max_tuning::Value::Int(64));
    assert_eq!(Knobs::from_tuning(&t).bn, Some(64));
    let d = Knobs::from_tuning(&Tuning::default());
    assert!(d.pdl && d.tiled_a && !d.no_lean && d.fold == Some(2) && d.bn.is_none());
}
