use super::*;
use crate::attrs::Attr;
use crate::dtype::DType;
use crate::error::GraphError;
use crate::ops::OpKind::Slice;
use crate::ops::testing::*;

/// One index, written compactly: "3" / "a" an integer index, "2:" / ":-2" / "::-1" /
/// ":a//2" a slice, "None", "...", "T" a tensor index, "S:n" a sized slice with result n,
/// "ST:n" a sized slice whose start is a tensor.
fn entry(s: &str) -> (i64, Dim, Dim, i64, i64, Dim) {
    let z = Dim::stat(0);
    match s {
        "None" => return (NEW_AXIS, z.clone(), z.clone(), 1, 0, z),
        "..." => return (ELLIPSIS, z.clone(), z.clone(), 1, 0, z),
        "T" => return (TENSOR_INDEX, z.clone(), z.clone(), 1, 0, z),
        _ => {}
    }
    if let Some(n) = s.strip_prefix("ST:") {
        return (SIZED_SLICE, z.clone(), z, 1, TENSOR_START, d(n));
    }
    if let Some(n) = s.strip_prefix("S:") {
        return (SIZED_SLICE, z.clone(), z, 1, 0, d(n));
    }
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() == 1 {
        return (INDEX, d(s), z.clone(), 1, 0, z);
    }
    let mut flags = 0;
    let start = if parts[0].is_empty() {
        z.clone()
    } else {
        flags |= HAS_START;
        d(parts[0])
    };
    let stop = if parts[1].is_empty() {
        z.clone()
    } else {
        flags |= HAS_STOP;
        d(parts[1])
    };
    let step = parts.get(2).filter(|p| !p.is_empty()).map_or(1, |p| p.parse().unwrap());
    (SLICE, start, stop, step, flags, z)
}

fn sl(x: &[&str], idx: &[&str], extra: &[Type]) -> crate::error::Result<Vec<Type>> {
    let es: Vec<_> = idx.iter().map(|s| entry(s)).collect();
    let mut inputs = vec![f32(x)];
    inputs.extend_from_slice(extra);
    run(
        Slice,
        &inputs,
        &[
            ("kinds", Attr::Ints(es.iter().map(|e| e.0).collect())),
            ("starts", Attr::Dims(es.iter().map(|e| e.1.clone()).collect())),
            ("stops", Attr::Dims(es.iter().map(|e| e.2.clone()).collect())),
            ("steps", Attr::Ints(es.iter().map(|e| e.3).collect())),
            ("bounds", Attr::Ints(es.iter().map(|e| e.4).collect())),
            ("out_dims", Attr::Dims(es.iter().map(|e| e.5.clone()).collect())),
        ],
    )
}

fn ok(x: &[&str], idx: &[&str]) -> Vec<Dim> {
    sl(x, idx, &[]).unwrap()[0].tensor().unwrap().shape.clone()
}

#[test]
fn symbolic_slices_match_the_reference() {
    assert_eq!(ok(&["a"], &["2:"]), dims(&["a-2"]));
    assert_eq!(ok(&["a"], &[":-2"]), dims(&["a-2"]));
    assert_eq!(ok(&["a"], &["1:-1"]), dims(&["a-2"]));
    assert_eq!(ok(&["a"], &["-3:"]), dims(&["3"]));
    assert_eq!(ok(&["a"], &["::2"]), vec![d("a+1").floordiv(&Dim::stat(2)).unwrap()]);
    assert_eq!(ok(&["a"], &["1::2"]), dims(&["a//2"]));
    assert_eq!(ok(&["a", "3"], &[":a//2"]), dims(&["a//2", "3"]));
    assert_eq!(ok(&["a"], &["a//2:"]), vec![d("a").sub(&d("a//2")).unwrap()]);
    assert_eq!(ok(&["a"], &[":b"]), dims(&["b"]));
    assert_eq!(ok(&["a"], &["a:"]), dims(&["0"]));
}

#[test]
fn static_slices_follow_numpy() {
    assert_eq!(ok(&["5"], &["2:"]), dims(&["3"]));
    assert_eq!(ok(&["5"], &["5:"]), dims(&["0"]));
    assert_eq!(ok(&["5"], &["-5:"]), dims(&["5"]));
    assert_eq!(ok(&["10"], &["1:7:2"]), dims(&["3"]));
    assert_eq!(ok(&["10"], &["1:8:3"]), dims(&["3"]));
    assert_eq!(ok(&["5"], &["4:2"]), dims(&["0"]));
}

#[test]
fn negative_steps() {
    assert_eq!(ok(&["5"], &["::-1"]), dims(&["5"]));
    assert_eq!(ok(&["5"], &["::-2"]), dims(&["3"]));
    assert_eq!(ok(&["5"], &["3:0:-1"]), dims(&["3"]));
    assert_eq!(ok(&["5"], &["4::-1"]), dims(&["5"]));
    assert_eq!(ok(&["5"], &[":-6:-1"]), dims(&["5"]));
    assert_eq!(ok(&["5"], &["-6::-1"]), dims(&["0"]));
    assert_eq!(ok(&["a"], &["::-1"]), dims(&["a"]));
    assert_eq!(ok(&["a"], &["2:1:-1"]), dims(&["1"]));
    assert_eq!(ok(&["a"], &["a-1::-1"]), dims(&["a"]));
}

#[test]
fn indices_ellipsis_and_new_axes() {
    assert_eq!(ok(&["5", "3"], &["2"]), dims(&["3"]));
    assert_eq!(ok(&["5", "3"], &["-1"]), dims(&["3"]));
    assert_eq!(ok(&["a", "3"], &["-1"]), dims(&["3"]));
    assert_eq!(ok(&["a", "3", "4"], &["...", "0"]), dims(&["a", "3"]));
    assert_eq!(ok(&["a", "3", "4"], &["...", "None", ":"]), dims(&["a", "3", "1", "4"]));
    assert_eq!(ok(&["a", "3"], &["None"]), dims(&["1", "a", "3"]));
    assert_eq!(ok(&["a", "3"], &[":", "None", "1"]), dims(&["a", "1"]));
    assert_eq!(ok(&["a", "3", "4"], &["1", "...", "1"]), dims(&["3"]));
    assert_eq!(ok(&[], &["..."]), dims(&[]));
    assert_eq!(ok(&[], &["None"]), dims(&["1"]));
    let out = sl(&["a", "3"], &["T"], &[tt(DType::Int32, &[])]).unwrap();
    assert_eq!(out[0].tensor().unwrap().shape, dims(&["3"]));
    let out = sl(&["a", "3"], &["S:n"], &[]).unwrap();
    assert_eq!(out[0].tensor().unwrap().shape, dims(&["n", "3"]));
    let out = sl(&["a", "3"], &["ST:n"], &[tt(DType::Int64, &[])]).unwrap();
    assert_eq!(out[0].tensor().unwrap().shape, dims(&["n", "3"]));
}

#[test]
fn out_of_range_and_malformed_indices() {
    let is_value = |r: crate::error::Result<Vec<Type>>, needle: &str| match r {
        Err(GraphError::Value(m)) => {
            assert!(m.starts_with("slice_tensor: ") && m.contains(needle), "{m}")
        }
        other => panic!("{other:?}"),
    };
    is_value(sl(&["5"], &["2:10"], &[]), "slice bound 10 is out of range");
    is_value(sl(&["5"], &["2:6"], &[]), "out of range");
    is_value(sl(&["5"], &["-6:"], &[]), "out of range");
    is_value(sl(&["5"], &[":-6"], &[]), "out of range");
    is_value(sl(&["5"], &["5::-1"], &[]), "[-dim - 1, dim - 1]");
    is_value(sl(&["5"], &[":-7:-1"], &[]), "out of range");
    is_value(sl(&["a"], &["a+1:"], &[]), "out of range");
    is_value(sl(&["5", "3"], &["5"], &[]), "index 5 is out of range");
    is_value(sl(&["5", "3"], &["-6"], &[]), "out of range");
    is_value(sl(&["a", "3"], &["a"], &[]), "out of range");
    is_value(sl(&["5"], &["::0"], &[]), "step cannot be zero");
    is_value(sl(&["a", "3"], &["...", "..."], &[]), "at most one Ellipsis");
    is_value(sl(&["a", "3"], &["0", "0", "0"], &[]), "3 indices for a tensor of rank 2");
    is_value(sl(&[], &["0"], &[]), "rank 0");
    is_value(sl(&["5", "3"], &["S:4"], &[]), "has 5 elements, not the given 4");
    is_value(sl(&["a", "3"], &["T"], &[]), "missing input");
    is_value(
        sl(&["a", "3"], &["T"], &[tt(DType::Int64, &["2"])]),
        "slice_tensor: indices: an index tensor must be a scalar",
    );
    type_err(sl(&["a", "3"], &["T"], &[f32(&[])]), "integer dtype");
    is_value(sl(&["a", "3"], &[":"], &[tt(DType::Int64, &[])]), "use 0 tensors but 1 were given");
}

#[test]
fn slice_spec_decodes_the_attributes() {
    let idx = ["1", "2:-1:2", "None", "...", "T", "ST:n", "S:3"];
    let es: Vec<_> = idx.iter().map(|s| entry(s)).collect();
    let mut attrs = crate::attrs::Attrs::new();
    for (key, a) in [
        ("kinds", Attr::Ints(es.iter().map(|e| e.0).collect())),
        ("starts", Attr::Dims(es.iter().map(|e| e.1.clone()).collect())),
        ("stops", Attr::Dims(es.iter().map(|e| e.2.clone()).collect())),
        ("steps", Attr::Ints(es.iter().map(|e| e.3).collect())),
        ("bounds", Attr::Ints(es.iter().map(|e| e.4).collect())),
        ("out_dims", Attr::Dims(es.iter().map(|e| e.5.clone()).collect())),
    ] {
        attrs = attrs.with(key, a);
    }
    let spec = slice_spec(&crate::ops::Op { kind: Slice, attrs: attrs.clone() }).unwrap();
    let sized = |start, out: &str| super::Slice { start, stop: None, step: 1, out_dim: Some(d(out)) };
    assert_eq!(
        spec.indices,
        vec![
            Index::At(d("1")),
            Index::Slice(super::Slice {
                start: Some(Bound::Dim(d("2"))),
                stop: Some(Bound::Dim(d("-1"))),
                step: 2,
                out_dim: None
            }),
            Index::NewAxis,
            Index::Ellipsis,
            Index::Tensor,
            Index::Slice(sized(Some(Bound::Tensor), "n")),
            Index::Slice(sized(None, "3")),
        ]
    );
    assert_eq!(spec.consumed, 5);
    let bad = attrs.with("steps", Attr::Ints(vec![1]));
    let err = slice_spec(&crate::ops::Op { kind: Slice, attrs: bad }).unwrap_err();
    assert!(matches!(&err, GraphError::Value(m) if m.starts_with("slice_tensor: indices: malformed")), "{err}");
}
