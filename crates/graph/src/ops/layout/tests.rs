use crate::attrs::Attr;
use crate::dtype::DType;
use crate::ops::OpKind::*;
use crate::ops::testing::*;
use crate::types::DeviceRef;

#[test]
fn reshape_infers_minus_one_with_symbolic_dims() {
    assert_eq!(shape(Reshape, &[f32(&["batch", "3"])], &[("shape", dims_attr(&["-1"]))]), dims(&["batch*3"]));
    assert_eq!(shape(Reshape, &[f32(&["batch", "3"])], &[("shape", dims_attr(&["3", "-1"]))]), dims(&["3", "batch"]));
    assert_eq!(shape(Reshape, &[f32(&["b", "6"])], &[("shape", dims_attr(&["b", "2", "-1"]))]), dims(&["b", "2", "3"]));
    assert_eq!(shape(Reshape, &[f32(&["a", "6"])], &[("shape", dims_attr(&["a*2", "-1"]))]), dims(&["a*2", "3"]));
    assert_eq!(shape(Reshape, &[f32(&["a*2"])], &[("shape", dims_attr(&["-1", "2"]))]), dims(&["a", "2"]));
    assert_eq!(shape(Reshape, &[f32(&["0", "6"])], &[("shape", dims_attr(&["-1"]))]), dims(&["0"]));
    assert_eq!(shape(Reshape, &[f32(&[])], &[("shape", dims_attr(&["1", "1"]))]), dims(&["1", "1"]));
    assert_eq!(shape(Reshape, &[f32(&["b", "c"])], &[("shape", dims_attr(&["c", "b"]))]), dims(&["c", "b"]));
}

#[test]
fn reshape_rejects_bad_targets() {
    value_err(
        run(Reshape, &[f32(&["2", "6"])], &[("shape", dims_attr(&["5", "2"]))]),
        "reshape: shape: input and output number of elements",
    );
    value_err(run(Reshape, &[f32(&["2", "6"])], &[("shape", dims_attr(&["5", "-1"]))]), "number of elements");
    value_err(run(Reshape, &[f32(&["b", "4"])], &[("shape", dims_attr(&["-1", "8"]))]), "number of elements");
    value_err(run(Reshape, &[f32(&["b", "6"])], &[("shape", dims_attr(&["c", "6"]))]), "rebind");
    value_err(run(Reshape, &[f32(&["2", "6"])], &[("shape", dims_attr(&["-1", "-1"]))]), "at most one -1");
    value_err(run(Reshape, &[f32(&["2", "6"])], &[("shape", dims_attr(&["-2", "-6"]))]), "non-negative");
    value_err(run(Reshape, &[f32(&["0", "6"])], &[("shape", dims_attr(&["0", "-1"]))]), "another dimension is 0");
}

#[test]
fn flatten_squeeze_unsqueeze() {
    let x = f32(&["b", "3", "4"]);
    let fl = |s, e| shape(Flatten, std::slice::from_ref(&x), &[("start_dim", int(s)), ("end_dim", int(e))]);
    assert_eq!(fl(0, -1), dims(&["b*12"]));
    assert_eq!(fl(1, -1), dims(&["b", "12"]));
    assert_eq!(fl(-3, -2), dims(&["b*3", "4"]));
    assert_eq!(fl(1, 1), dims(&["b", "3", "4"]));
    assert_eq!(shape(Flatten, &[f32(&[])], &[("start_dim", int(0)), ("end_dim", int(-1))]), dims(&["1"]));
    value_err(
        run(Flatten, std::slice::from_ref(&x), &[("start_dim", int(2)), ("end_dim", int(1))]),
        "flatten: start_dim:",
    );
    index_err(
        run(Flatten, std::slice::from_ref(&x), &[("start_dim", int(0)), ("end_dim", int(5))]),
        "flatten: end_dim:",
    );

    assert_eq!(shape(Squeeze, &[f32(&["b", "1", "4"])], &[("axis", int(-2))]), dims(&["b", "4"]));
    value_err(
        run(Squeeze, &[f32(&["b", "1", "4"])], &[("axis", int(0))]),
        "squeeze: axis: the squeezed dimension must be 1",
    );
    index_err(run(Squeeze, &[f32(&["3", "1", "4"])], &[("axis", int(3))]), "squeeze: axis:");

    assert_eq!(shape(Unsqueeze, &[f32(&["b", "4"])], &[("axis", int(0))]), dims(&["1", "b", "4"]));
    assert_eq!(shape(Unsqueeze, &[f32(&["b", "4"])], &[("axis", int(-1))]), dims(&["b", "4", "1"]));
    assert_eq!(shape(Unsqueeze, &[f32(&["b", "4"])], &[("axis", int(-3))]), dims(&["1", "b", "4"]));
    assert_eq!(shape(Unsqueeze, &[f32(&[])], &[("axis", int(0))]), dims(&["1"]));
    value_err(run(Unsqueeze, &[f32(&["b", "4"])], &[("axis", int(3))]), "unsqueeze: axis:");
    value_err(run(Unsqueeze, &[f32(&["b", "4"])], &[("axis", int(-4))]), "out of range");
}

#[test]
fn transpose_and_permute() {
    let x = f32(&["b", "3", "4"]);
    assert_eq!(
        shape(Transpose, std::slice::from_ref(&x), &[("axis_1", int(0)), ("axis_2", int(-1))]),
        dims(&["4", "3", "b"])
    );
    assert_eq!(shape(Transpose, &[f32(&[])], &[("axis_1", int(-1)), ("axis_2", int(0))]), dims(&[]));
    index_err(
        run(Transpose, std::slice::from_ref(&x), &[("axis_1", int(0)), ("axis_2", int(3))]),
        "transpose: axis_2:",
    );
    assert_eq!(
        shape(Permute, std::slice::from_ref(&x), &[("dims", Attr::Ints(vec![2, 0, 1]))]),
        dims(&["4", "b", "3"])
    );
    assert_eq!(
        shape(Permute, std::slice::from_ref(&x), &[("dims", Attr::Ints(vec![-1, 0, 1]))]),
        dims(&["4", "b", "3"])
    );
    value_err(run(Permute, std::slice::from_ref(&x), &[("dims", Attr::Ints(vec![0, 0, 1]))]), "permute: dims:");
    value_err(run(Permute, std::slice::from_ref(&x), &[("dims", Attr::Ints(vec![0, 1]))]), "rank 3");
    index_err(run(Permute, std::slice::from_ref(&x), &[("dims", Attr::Ints(vec![0, 1, 3]))]), "permute: dims:");
}

#[test]
fn broadcast_to_static_and_tensor_shapes() {
    assert_eq!(
        shape(BroadcastTo, &[f32(&["b", "1"])], &[("shape", dims_attr(&["2", "b", "3"]))]),
        dims(&["2", "b", "3"])
    );
    assert_eq!(shape(BroadcastTo, &[f32(&["1", "3"])], &[("shape", dims_attr(&["c*2", "3"]))]), dims(&["c*2", "3"]));
    value_err(
        run(BroadcastTo, &[f32(&["b", "3"])], &[("shape", dims_attr(&["c", "3"]))]),
        "broadcast_to: shape: input dimension 0 (b)",
    );
    value_err(run(BroadcastTo, &[f32(&["2"])], &[("shape", dims_attr(&["3"]))]), "must be 1 or equal");
    value_err(run(BroadcastTo, &[f32(&["1", "3"])], &[("shape", dims_attr(&["3"]))]), "target rank 1");
    type_err(run(BroadcastTo, &[f32(&["1", "3"])], &[("shape", dims_attr(&["-1", "3"]))]), "non-negative");
    let shp = tt(DType::Int64, &["2"]);
    let inputs = [f32(&["1", "3"]), shp.clone()];
    assert_eq!(shape(BroadcastTo, &inputs, &[("out_dims", dims_attr(&["n", "3"]))]), dims(&["n", "3"]));
    value_err(run(BroadcastTo, &inputs, &[("out_dims", dims_attr(&["n", "4"]))]), "broadcast_to: out_dims:");
    value_err(run(BroadcastTo, &inputs, &[("out_dims", dims_attr(&["n", "m", "3"]))]), "holds 2");
    value_err(run(BroadcastTo, &inputs, &[]), "out_dims must be given");
    type_err(
        run(BroadcastTo, &[f32(&["1", "3"]), f32(&["2"])], &[("out_dims", dims_attr(&["n", "3"]))]),
        "integer dtype",
    );
    value_err(
        run(BroadcastTo, &[f32(&["1", "3"]), tt(DType::Int64, &["1", "2"])], &[("out_dims", dims_attr(&["n", "3"]))]),
        "rank 1",
    );
}

#[test]
fn interleaved_complex_band_part_and_transfer() {
    assert_eq!(shape(AsInterleavedComplex, &[f32(&["b", "8"])], &[]), dims(&["b", "4", "2"]));
    assert_eq!(shape(AsInterleavedComplex, &[f32(&["b", "c*2"])], &[]), dims(&["b", "c", "2"]));
    value_err(
        run(AsInterleavedComplex, &[f32(&["b", "7"])], &[]),
        "as_interleaved_complex: x: the last dimension must be even",
    );
    type_err(run(AsInterleavedComplex, &[f32(&["b", "c"])], &[]), "must be static");
    value_err(run(AsInterleavedComplex, &[f32(&[])], &[]), "rank 1");

    let x = f32(&["b", "3", "4"]);
    let band = |lo: Attr, up: Attr| run(BandPart, std::slice::from_ref(&x), &[("num_lower", lo), ("num_upper", up)]);
    assert_eq!(band(int(1), int(2)).unwrap()[0], x);
    assert_eq!(band(Attr::None, Attr::None).unwrap()[0], x);
    assert_eq!(band(int(-1), int(3)).unwrap()[0], x);
    value_err(band(int(3), Attr::None), "band_part: num_lower: 3 is out of bounds");
    value_err(band(Attr::None, int(4)), "band_part: num_upper:");
    value_err(band(int(-2), Attr::None), "non-negative");
    value_err(run(BandPart, &[f32(&["4"])], &[]), "band_part: x: needs rank 2");
    assert!(run(BandPart, &[f32(&["m", "n"])], &[("num_lower", int(100)), ("num_upper", int(100))]).is_ok());

    let out = run(TransferTo, &[f32(&["b", "3"])], &[("device", Attr::Device(DeviceRef::gpu(1)))]).unwrap();
    assert_eq!(out[0].tensor().unwrap().device, DeviceRef::gpu(1));
    assert_eq!(out[0].tensor().unwrap().shape, dims(&["b", "3"]));
}
