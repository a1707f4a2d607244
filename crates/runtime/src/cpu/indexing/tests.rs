//! Unit tests of the indexing kernels on small hand-checked cases (the numpy parity tests are
//! in tests/test_indexing.py).

use max_graph::attrs::{Attr, Attrs};
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, Dim};

use super::{nonzero_dynamic, run};
use crate::{Buffer, Device, Error};

fn buf<T: Copy>(dtype: DType, shape: &[i64], data: &[T]) -> Buffer {
    let b = Buffer::empty(dtype, shape, &Device::Cpu).unwrap();
    assert_eq!(b.nbytes(), std::mem::size_of_val(data));
    // SAFETY: the fresh host buffer holds exactly these bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().cast::<u8>(), b.addr() as *mut u8, b.nbytes()) };
    b
}

fn read<T: Copy + Default>(b: &Buffer) -> Vec<T> {
    let mut v = vec![T::default(); b.num_elements()];
    // SAFETY: b holds num_elements() values of T.
    unsafe { std::ptr::copy_nonoverlapping(b.addr() as *const u8, v.as_mut_ptr().cast::<u8>(), b.nbytes()) };
    v
}

fn op(kind: OpKind, attrs: Attrs) -> Op {
    Op { kind, attrs }
}

#[test]
fn gather_takes_rows_with_negative_indices() {
    let x = buf(DType::Int16, &[3, 2], &[1i16, 2, 3, 4, 5, 6]);
    let idx = buf(DType::Int32, &[2, 2], &[2i32, -3, -1, 1]);
    let out = Buffer::empty(DType::Int16, &[2, 2, 2], &Device::Cpu).unwrap();
    run(&op(OpKind::Gather, Attrs::new().with("axis", Attr::Int(0))), &[x.clone(), idx], std::slice::from_ref(&out))
        .unwrap();
    assert_eq!(read::<i16>(&out), vec![5, 6, 1, 2, 5, 6, 3, 4]);
    let idx = buf(DType::UInt8, &[3], &[1u8, 0, 1]);
    let out = Buffer::empty(DType::Int16, &[3, 3], &Device::Cpu).unwrap();
    run(&op(OpKind::Gather, Attrs::new().with("axis", Attr::Int(-1))), &[x.clone(), idx], std::slice::from_ref(&out))
        .unwrap();
    assert_eq!(read::<i16>(&out), vec![2, 1, 2, 4, 3, 4, 6, 5, 6]);
    let idx = buf(DType::Int64, &[1], &[3i64]);
    let out = Buffer::empty(DType::Int16, &[1, 2], &Device::Cpu).unwrap();
    let err = run(&op(OpKind::Gather, Attrs::new().with("axis", Attr::Int(0))), &[x, idx], &[out]).unwrap_err();
    assert!(
        matches!(&err, Error::Value(m) if m == "gather: index 3 is out of range for axis 0 of size 3 (expected -3..=2)"),
        "{err}"
    );
}

#[test]
fn gather_nd_with_a_batch_dim() {
    // input [2, 2, 3], indices [2, 1, 1] with batch_dims=1: out[b, g] = input[b, idx[b, g]].
    let x = buf(DType::Float32, &[2, 2, 3], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    let idx = buf(DType::Int64, &[2, 1, 1], &[1i64, -2]);
    let out = Buffer::empty(DType::Float32, &[2, 1, 3], &Device::Cpu).unwrap();
    run(&op(OpKind::GatherNd, Attrs::new().with("batch_dims", Attr::Int(1))), &[x, idx], std::slice::from_ref(&out))
        .unwrap();
    assert_eq!(read::<f32>(&out), vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
}

#[test]
fn scatter_later_duplicates_win() {
    let x = buf(DType::UInt8, &[4], &[0u8; 4]);
    let up = buf(DType::UInt8, &[3], &[7u8, 8, 9]);
    let idx = buf(DType::Int64, &[3], &[1i64, -3, 3]);
    let out = Buffer::empty(DType::UInt8, &[4], &Device::Cpu).unwrap();
    run(
        &op(OpKind::Scatter, Attrs::new().with("axis", Attr::Int(0))),
        &[x.clone(), up, idx],
        std::slice::from_ref(&out),
    )
    .unwrap();
    assert_eq!(read::<u8>(&out), vec![0, 8, 0, 9]);
    let up = buf(DType::UInt8, &[1, 2], &[5u8, 6]);
    let idx = buf(DType::Int32, &[1, 2], &[2i32, -1]);
    let x2 = x.reshaped(vec![2, 2]).unwrap();
    let out = Buffer::empty(DType::UInt8, &[2, 2], &Device::Cpu).unwrap();
    let err = run(&op(OpKind::Scatter, Attrs::new().with("axis", Attr::Int(0))), &[x2, up, idx], &[out]).unwrap_err();
    assert!(err.to_string().starts_with("scatter: index 2 is out of range for axis 0 of size 2"), "{err}");
}

#[test]
fn nonzero_binds_its_symbol() {
    let x = buf(DType::Float32, &[2, 3], &[0.0f32, -0.0, f32::NAN, 1.0, 0.0, -2.0]);
    let attrs = Attrs::new().with("out_dim", Attr::Dims(vec![Dim::sym("nnz").unwrap()]));
    let (outs, bound) = nonzero_dynamic(&op(OpKind::NonZero, attrs), std::slice::from_ref(&x)).unwrap();
    assert_eq!(bound, vec![("nnz".to_string(), 3)]);
    assert_eq!(outs[0].shape(), &[3, 2]);
    assert_eq!(read::<i64>(&outs[0]), vec![0, 2, 1, 0, 1, 2]);
    let attrs = Attrs::new().with("out_dim", Attr::Dims(vec![Dim::stat(4)]));
    let err = nonzero_dynamic(&op(OpKind::NonZero, attrs), &[x]).unwrap_err();
    assert!(err.to_string().contains("3 non-zero elements but out_dim is 4"), "{err}");
}

#[test]
fn masked_scatter_broadcasts_the_mask() {
    let x = buf(DType::Int32, &[2, 3], &[0i32; 6]);
    let mask = buf(DType::Bool, &[3], &[1u8, 0, 1]);
    let up = buf(DType::Int32, &[5], &[1i32, 2, 3, 4, 5]);
    let out = Buffer::empty(DType::Int32, &[2, 3], &Device::Cpu).unwrap();
    let attrs = Attrs::new().with("out_dim", Attr::Dims(vec![Dim::sym("n").unwrap()]));
    run(&op(OpKind::MaskedScatter, attrs.clone()), &[x.clone(), mask.clone(), up], std::slice::from_ref(&out)).unwrap();
    assert_eq!(read::<i32>(&out), vec![1, 0, 2, 3, 0, 4]);
    let up = buf(DType::Int32, &[3], &[1i32, 2, 3]);
    let err = run(&op(OpKind::MaskedScatter, attrs), &[x, mask, up], &[out]).unwrap_err();
    assert!(err.to_string().contains("4 true elements but updates"), "{err}");
}
