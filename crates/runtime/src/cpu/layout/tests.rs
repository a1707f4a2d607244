use super::strided::{self, View, contiguous_strides};

#[test]
fn copy_transposed_reversed_and_broadcast() {
    let src: Vec<u16> = (0..12).collect();
    let mut dst = vec![0u16; 12];
    let t = View { shape: vec![4, 3], strides: vec![1, 4] };
    unsafe { strided::copy(src.as_ptr().cast(), &t, dst.as_mut_ptr().cast(), &[3, 1], 2) };
    assert_eq!(dst, vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
    let r = View { shape: vec![3, 4], strides: vec![-4, 1] };
    unsafe { strided::copy(src.as_ptr().add(8).cast(), &r, dst.as_mut_ptr().cast(), &[4, 1], 2) };
    assert_eq!(dst, vec![8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3]);
    let b = View { shape: vec![3, 4], strides: vec![0, 1] };
    unsafe { strided::copy(src.as_ptr().cast(), &b, dst.as_mut_ptr().cast(), &[4, 1], 2) };
    assert_eq!(dst, vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
}

#[test]
fn parallel_copy_matches_serial() {
    // Large enough to split over the pool; a transposed 3-byte-free odd shape.
    let (r, c) = (301usize, 517usize);
    let src: Vec<u32> = (0..(r * c) as u32).collect();
    let mut dst = vec![0u32; r * c];
    let t = View { shape: vec![c, r], strides: vec![1, c as isize] };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    pool.install(|| unsafe {
        strided::copy(src.as_ptr().cast(), &t, dst.as_mut_ptr().cast(), &contiguous_strides(&[c, r]), 4)
    });
    for i in 0..c {
        for j in 0..r {
            assert_eq!(dst[i * r + j], src[j * c + i]);
        }
    }
}

#[test]
fn tiled_permutes_match_a_naive_walk() {
    // [a, b, c] -> every permutation, byte and 8-byte elements, sizes off the tile grid.
    let (a, b, c) = (3usize, 45usize, 70usize);
    let src: Vec<u64> = (0..(a * b * c) as u64).map(|v| v * 0x0101_0101).collect();
    let strides = [(b * c) as isize, c as isize, 1];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    for perm in [[0, 2, 1], [2, 0, 1], [1, 2, 0], [2, 1, 0]] {
        let shape: Vec<usize> = perm.iter().map(|&p| [a, b, c][p]).collect();
        let v = View { shape: shape.clone(), strides: perm.iter().map(|&p| strides[p]).collect() };
        let mut want = Vec::with_capacity(src.len());
        for i in 0..shape[0] {
            for j in 0..shape[1] {
                for k in 0..shape[2] {
                    let off = i as isize * v.strides[0] + j as isize * v.strides[1] + k as isize * v.strides[2];
                    want.push(src[off as usize]);
                }
            }
        }
        let mut dst = vec![0u64; src.len()];
        let (sp, dp) = (src.as_ptr() as usize, dst.as_mut_ptr() as usize);
        pool.install(|| unsafe { strided::copy(sp as *const u8, &v, dp as *mut u8, &contiguous_strides(&shape), 8) });
        assert_eq!(dst, want, "{perm:?}");
        let bytes: Vec<u8> = src.iter().map(|x| *x as u8).collect();
        let mut out = vec![0u8; bytes.len()];
        unsafe { strided::copy(bytes.as_ptr(), &v, out.as_mut_ptr(), &contiguous_strides(&shape), 1) };
        assert_eq!(out, want.iter().map(|x| *x as u8).collect::<Vec<_>>(), "{perm:?}");
    }
}

#[test]
fn fill_pattern() {
    let mut v = vec![0u32; 100_000];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    pool.install(|| unsafe { strided::fill(v.as_mut_ptr().cast(), &0x01020304u32.to_le_bytes(), v.len()) });
    assert!(v.iter().all(|x| *x == 0x01020304));
}

mod kernels {
    use max_graph::{Attr, Attrs, DType, DeviceRef, Dim, Op, OpKind};

    use crate::cpu::layout::run;
    use crate::{Buffer, Device};

    fn buf<T: Copy>(dtype: DType, shape: &[i64], data: &[T]) -> Buffer {
        let b = Buffer::empty(dtype, shape, &Device::Cpu).unwrap();
        assert_eq!(b.nbytes(), std::mem::size_of_val(data));
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().cast::<u8>(), b.addr() as *mut u8, b.nbytes()) };
        b
    }

    fn values<T: Copy + Default>(b: &Buffer) -> Vec<T> {
        let mut v = vec![T::default(); b.num_elements()];
        unsafe { std::ptr::copy_nonoverlapping(b.addr() as *const u8, v.as_mut_ptr().cast::<u8>(), b.nbytes()) };
        v
    }

    fn op(kind: OpKind, attrs: &[(&str, Attr)]) -> Op {
        let mut a = Attrs::new();
        for (k, v) in attrs {
            a = a.with(k, v.clone());
        }
        Op { kind, attrs: a }
    }

    #[test]
    fn transfer_to_a_gpu_is_a_clear_error() {
        let x = buf(DType::Int32, &[2], &[1i32, 2]);
        let out = Buffer::empty(DType::Int32, &[2], &Device::Cpu).unwrap();
        let gpu =
            op(OpKind::TransferTo, &[("device", Attr::Device(DeviceRef { kind: max_graph::DeviceKind::Gpu, id: 0 }))]);
        let err = run(&gpu, std::slice::from_ref(&x), std::slice::from_ref(&out)).unwrap_err().to_string();
        assert!(err.starts_with("transfer_to: transfers to gpu:0 have no kernel yet"), "{err}");
        let cpu = op(OpKind::TransferTo, &[("device", Attr::Device(DeviceRef::CPU))]);
        run(&cpu, &[x], std::slice::from_ref(&out)).unwrap();
        assert_eq!(values::<i32>(&out), vec![1, 2]);
    }

    #[test]
    fn strided_inputs_are_walked_in_their_own_order() {
        // A transposed view as the input of a reshape: the result is its row-major order.
        let x = buf(DType::UInt16, &[2, 3], &[0u16, 1, 2, 3, 4, 5]);
        let xt = unsafe {
            Buffer::from_external(x.addr(), DType::UInt16, &[3, 2], &[2, 6], Device::Cpu, Box::new(x.clone()))
        }
        .unwrap();
        assert!(!xt.is_contiguous());
        let out = Buffer::empty(DType::UInt16, &[6], &Device::Cpu).unwrap();
        run(&op(OpKind::Reshape, &[("shape", Attr::Dims(vec![Dim::stat(6)]))]), &[xt], std::slice::from_ref(&out))
            .unwrap();
        assert_eq!(values::<u16>(&out), vec![0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn unresolved_symbolic_slice_bound_and_bad_counts() {
        let x = buf(DType::Int8, &[4], &[1i8, 2, 3, 4]);
        let out = Buffer::empty(DType::Int8, &[2], &Device::Cpu).unwrap();
        let s = op(
            OpKind::Slice,
            &[
                ("kinds", Attr::Ints(vec![1])),
                ("starts", Attr::Dims(vec![Dim::sym("n").unwrap()])),
                ("stops", Attr::Dims(vec![Dim::stat(0)])),
                ("steps", Attr::Ints(vec![1])),
                ("bounds", Attr::Ints(vec![1])),
                ("out_dims", Attr::Dims(vec![Dim::stat(0)])),
            ],
        );
        let err = run(&s, std::slice::from_ref(&x), std::slice::from_ref(&out)).unwrap_err().to_string();
        assert!(err.contains("slice_tensor: indices: the bound n is not known at run time"), "{err}");
        let counts = buf(DType::Int64, &[4], &[1i64, 0, 2, -1]);
        let r = op(OpKind::RepeatInterleave, &[("axis", Attr::Int(0)), ("out_dim", Attr::Dims(vec![Dim::stat(2)]))]);
        let err = run(&r, &[x, counts], &[out]).unwrap_err().to_string();
        assert!(err.contains("repeat_interleave: repeats must be non-negative, got -1"), "{err}");
    }
}

#[test]
#[ignore]
fn bench_copy() {
    let n = 4096usize;
    let src: Vec<f32> = (0..n * n).map(|i| i as f32).collect();
    let mut dst = vec![0f32; n * n];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for (name, v) in [
        ("flat", View::contiguous(&[n * n])),
        ("transpose", View { shape: vec![n, n], strides: vec![1, n as isize] }),
        ("rev-rows", View { shape: vec![n, n], strides: vec![-(n as isize), 1] }),
    ] {
        let base = if name == "rev-rows" { unsafe { src.as_ptr().add((n - 1) * n) } } else { src.as_ptr() } as usize;
        let out = dst.as_mut_ptr() as usize;
        let d = contiguous_strides(&v.shape);
        let t = std::time::Instant::now();
        for _ in 0..5 {
            pool.install(|| unsafe { strided::copy(base as *const u8, &v, out as *mut u8, &d, 4) });
        }
        println!("{name}: {:.1} ms", t.elapsed().as_secs_f64() * 1e3 / 5.0);
    }
}
