use crate::attrs::Attr;
use crate::dtype::DType;
use crate::ops::OpKind::*;
use crate::ops::testing::*;
use crate::types::{DeviceRef, TensorType, Type};

fn shapes(out: Vec<Type>) -> Vec<Vec<crate::dim::Dim>> {
    out.iter().map(|t| t.tensor().unwrap().shape.clone()).collect()
}

#[test]
fn concat_sums_the_axis() {
    assert_eq!(
        shape(Concat, &[f32(&["batch", "3"]), f32(&["batch", "3"])], &[("axis", int(0))]),
        dims(&["batch*2", "3"])
    );
    assert_eq!(shape(Concat, &[f32(&["b", "3"]), f32(&["b", "c"])], &[("axis", int(-1))]), dims(&["b", "c+3"]));
    assert_eq!(
        shape(Concat, &[f32(&["a", "3"]), f32(&["b", "3"]), f32(&["2", "3"])], &[("axis", int(0))]),
        dims(&["a+b+2", "3"])
    );
    assert_eq!(shape(Concat, &[f32(&["3"])], &[("axis", int(0))]), dims(&["3"]));
    value_err(
        run(Concat, &[f32(&["a", "3"]), f32(&["b", "4"])], &[("axis", int(0))]),
        "concat: original_vals[1]: inputs differ on non-concat axis 1",
    );
    value_err(run(Concat, &[f32(&["3"]), tt(DType::Int32, &["3"])], &[("axis", int(0))]), "same dtype");
    value_err(run(Concat, &[f32(&["3"]), f32(&["3", "1"])], &[("axis", int(0))]), "same rank");
    value_err(run(Concat, &[], &[("axis", int(0))]), "concat: original_vals: must provide at least one value");
    index_err(run(Concat, &[f32(&["b", "3"]), f32(&["b", "3"])], &[("axis", int(2))]), "concat: axis:");
    index_err(run(Concat, &[f32(&[]), f32(&[])], &[("axis", int(0))]), "concat: axis:");
    let gpu = Type::Tensor(TensorType::new(DType::Float32, dims(&["3"]), DeviceRef::gpu(0)));
    value_err(run(Concat, &[f32(&["3"]), gpu], &[("axis", int(0))]), "same device");
}

#[test]
fn stack_adds_an_axis() {
    let (x, y) = (f32(&["b", "3"]), f32(&["b", "3"]));
    let st = |a| run(Stack, &[x.clone(), y.clone()], &[("axis", int(a))]);
    assert_eq!(shapes(st(0).unwrap()), vec![dims(&["2", "b", "3"])]);
    assert_eq!(shapes(st(-1).unwrap()), vec![dims(&["b", "3", "2"])]);
    assert_eq!(shapes(st(1).unwrap()), vec![dims(&["b", "2", "3"])]);
    index_err(st(3), "stack: axis:");
    index_err(st(-4), "stack: axis:");
    assert_eq!(shape(Stack, &[f32(&[]), f32(&[]), f32(&[])], &[("axis", int(0))]), dims(&["3"]));
    value_err(
        run(Stack, &[x.clone(), f32(&["c", "3"])], &[("axis", int(0))]),
        "stack: values[1]: all inputs must have the same shape",
    );
    value_err(run(Stack, &[x.clone(), tt(DType::Int32, &["b", "3"])], &[("axis", int(0))]), "same dtype");
    value_err(run(Stack, &[], &[("axis", int(0))]), "stack: values: must provide at least one value");
}

#[test]
fn split_needs_sizes_that_add_up() {
    let sp =
        |x: Type, sizes: &[&str], axis| run(Split, &[x], &[("split_sizes", dims_attr(sizes)), ("axis", int(axis))]);
    assert_eq!(shapes(sp(f32(&["3", "4"]), &["1", "2"], 0).unwrap()), vec![dims(&["1", "4"]), dims(&["2", "4"])]);
    assert_eq!(shapes(sp(f32(&["3", "4"]), &["2", "2"], -1).unwrap()), vec![dims(&["3", "2"]), dims(&["3", "2"])]);
    assert_eq!(shapes(sp(f32(&["b", "4"]), &["b-1", "1"], 0).unwrap()), vec![dims(&["b-1", "4"]), dims(&["1", "4"])]);
    assert_eq!(shapes(sp(f32(&["3", "4"]), &["0", "3"], 0).unwrap()), vec![dims(&["0", "4"]), dims(&["3", "4"])]);
    assert!(sp(f32(&["0", "4"]), &[], 0).unwrap().is_empty());
    value_err(sp(f32(&["3", "4"]), &["1", "1"], 0), "split: split_sizes: sizes [1, 1] add up to 2");
    value_err(sp(f32(&["b", "4"]), &["1", "2"], 0), "not to the dimension b");
    value_err(sp(f32(&["3", "4"]), &["4", "-1"], 0), "non-negative");
    index_err(sp(f32(&["3", "4"]), &["2", "2"], 2), "split: axis:");
}

#[test]
fn tile_multiplies_dims() {
    assert_eq!(shape(Tile, &[f32(&["b", "3"])], &[("repeats", dims_attr(&["2", "3"]))]), dims(&["b*2", "9"]));
    assert_eq!(shape(Tile, &[f32(&["b", "3"])], &[("repeats", dims_attr(&["n", "1"]))]), dims(&["b*n", "3"]));
    value_err(
        run(Tile, &[f32(&["b", "3"])], &[("repeats", dims_attr(&["0", "3"]))]),
        "tile: repeats: repeats must all be positive",
    );
    value_err(run(Tile, &[f32(&["b", "3"])], &[("repeats", dims_attr(&["3"]))]), "one entry per input dim");
}

#[test]
fn pad_grows_each_dim() {
    let pd = |x: Type, v: Type, p: Vec<i64>, mode: &str| {
        run(Pad, &[x, v], &[("paddings", Attr::Ints(p)), ("mode", Attr::Str(mode.into()))])
    };
    let out = pd(f32(&["b", "3"]), f32(&[]), vec![1, 2, 0, 3], "constant").unwrap();
    assert_eq!(shapes(out), vec![dims(&["b+3", "6"])]);
    assert_eq!(shapes(pd(f32(&["a*2"]), f32(&[]), vec![1, 1], "constant").unwrap()), vec![dims(&["a*2+2"])]);
    value_err(pd(f32(&["b", "3"]), f32(&[]), vec![1, 2], "constant"), "pad: paddings: needs 2 values");
    value_err(pd(f32(&["b", "3"]), f32(&[]), vec![-1, 2, 0, 0], "constant"), "non-negative");
    value_err(pd(f32(&["b", "3"]), f32(&[]), vec![1, 2, 0, 0], "reflect"), "pad: mode:");
    value_err(pd(f32(&["3"]), f32(&["1"]), vec![1, 1], "constant"), "pad: value: must be a scalar");
    type_err(pd(f32(&["3"]), tt(DType::Int32, &[]), vec![1, 1], "constant"), "pad: value: must have the input's dtype");
}

#[test]
fn repeat_interleave_counts_and_tensors() {
    let ri = |x: Type, n: i64, axis: Attr| shape(RepeatInterleave, &[x], &[("repeats", int(n)), ("axis", axis)]);
    assert_eq!(ri(f32(&["2", "2"]), 2, Attr::None), dims(&["8"]));
    assert_eq!(ri(f32(&["b", "2"]), 2, Attr::None), dims(&["b*4"]));
    assert_eq!(ri(f32(&["b", "2"]), 2, int(0)), dims(&["b*2", "2"]));
    assert_eq!(ri(f32(&["b", "2"]), 3, int(-1)), dims(&["b", "6"]));
    assert_eq!(ri(f32(&[]), 2, Attr::None), dims(&["2"]));
    let x = f32(&["b", "2"]);
    value_err(
        run(RepeatInterleave, std::slice::from_ref(&x), &[("repeats", int(0)), ("axis", int(0))]),
        "repeat_interleave: repeats: must be positive",
    );
    value_err(
        run(RepeatInterleave, std::slice::from_ref(&x), &[("repeats", int(2)), ("axis", int(2))]),
        "repeat_interleave: axis:",
    );
    value_err(
        run(RepeatInterleave, &[f32(&["2"])], &[("repeats", int(2)), ("axis", int(0)), ("out_dim", dims_attr(&["5"]))]),
        "contradicts",
    );

    let counts = tt(DType::Int64, &["2"]);
    let with = |x: Type, c: Type, attrs: &[(&str, Attr)]| run(RepeatInterleave, &[x, c], attrs);
    let out = with(f32(&["2", "2"]), counts.clone(), &[("axis", int(0)), ("out_dim", dims_attr(&["n"]))]).unwrap();
    assert_eq!(shapes(out), vec![dims(&["n", "2"])]);
    let out = with(f32(&["2", "2"]), tt(DType::Int32, &[]), &[("out_dim", dims_attr(&["5"]))]).unwrap();
    assert_eq!(shapes(out), vec![dims(&["5"])]);
    value_err(
        with(f32(&["2", "2"]), counts.clone(), &[("axis", int(0))]),
        "repeat_interleave: out_dim: out_dim must be given",
    );
    value_err(
        with(f32(&["4", "2"]), tt(DType::Int64, &["3"]), &[("axis", int(0)), ("out_dim", dims_attr(&["n"]))]),
        "has 3 counts",
    );
    type_err(with(f32(&["2", "2"]), f32(&["2"]), &[("axis", int(0)), ("out_dim", dims_attr(&["n"]))]), "integer dtype");
    value_err(
        with(f32(&["2", "2"]), tt(DType::Int64, &["1", "2"]), &[("axis", int(0)), ("out_dim", dims_attr(&["n"]))]),
        "rank 1",
    );
}
