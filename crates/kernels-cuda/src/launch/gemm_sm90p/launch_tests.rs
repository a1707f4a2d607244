//! The launcher's argument layout, shared memory, plans of several operands and kernel names.

use super::*;

#[test]
fn argument_layout_is_the_kernels() {
    // 3 u64 and 3 i64, then 16 i32 (pdl and early_b last), segs and 5 segment tiles, 4
    // segment widths and 4 C addresses: the Epilogue at byte 200, as in
    // gemm_sm90p_sched.cuh's GemmPArgs; four 128-byte maps for TmaMaps
    assert_eq!(std::mem::offset_of!(GemmPArgs, early_b), 108);
    assert_eq!(std::mem::offset_of!(GemmPArgs, segs), 112);
    assert_eq!(std::mem::offset_of!(GemmPArgs, seg_n), 136);
    assert_eq!(std::mem::offset_of!(GemmPArgs, epi), 200);
    assert_eq!(size_of::<GemmPArgs>(), 200 + size_of::<Epilogue>());
    assert_eq!(size_of::<[TmaMap; SEGS]>(), 512);
}

#[test]
fn shared_memory_fits_a_hopper_block() {
    for staged in [false, true] {
        assert!(smem_bytes(128, 256, staged) <= 232_448 && smem_bytes(128, 128, staged) <= 232_448);
    }
    // The default layout as before the staged epilogue existed.
    assert_eq!((smem_bytes(128, 256, false), smem_bytes(128, 128, false)), (197_728, 230_544));
    assert_eq!((smem_bytes(128, 256, true), smem_bytes(128, 128, true)), (216_320, 216_320));
    // 64-row tiles: 9 x 24 KB, 12 x 16 KB; the barriers within the kernel's 256 bytes.
    assert_eq!((smem_bytes(64, 128, false), smem_bytes(64, 64, false)), (222_384, 197_856));
    assert!(smem_bytes(64, 256, false) <= 232_448 && 2 * stages(64, 64, false) * 8 + 32 <= 256);
    assert!(staged_ok(8192, 256, true) && !staged_ok(8190, 256, true) && !staged_ok(8192, 8, true));
    assert!(!staged_ok(8192, 256, false));
}

#[test]
fn segments_count_their_own_tiles_and_gated_pairs_twice_the_columns() {
    let knobs = Knobs::default();
    for (rows, ns) in [(64, vec![4096, 1024, 1024]), (300, vec![200, 72, 40]), (2048, vec![576, 192, 192, 8])] {
        let p = plan_for(
            rows,
            0,
            4096,
            1,
            132,
            false,
            knobs,
            Operands::Segments(&ns.iter().map(|&n| (0, 0, n)).collect::<Vec<_>>()),
        )
        .unwrap();
        assert_eq!(p.n_tiles, ns.iter().map(|n| n.div_ceil(p.bn)).sum::<usize>(), "{rows} {ns:?}");
    }
    let g = plan_for(64, 14336, 4096, 1, 132, false, knobs, Operands::Gated(0)).unwrap();
    assert_eq!(g.n_tiles, 14336usize.div_ceil(g.bn / 2));
    for spec in [(64, 64), (64, 128), (128, 128), (128, 256)] {
        for dtype in [DType::BFloat16, DType::Float16] {
            let name = gated_name(dtype, spec);
            assert!(family(dtype).source.contains(&format!("({name}, ")), "{name} is not an entry");
        }
    }
}

#[test]
fn every_planned_kernel_is_in_its_family() {
    // Each (height, layout, width) a plan can give, in each form the launcher may ask for,
    // is an entry of the family's source (the same sentence as the GEMMP_ENTRY lines).
    let knobs = Knobs::default();
    for dtype in [DType::BFloat16, DType::Float16] {
        let src = family(dtype).source;
        for (bm, n_major, bn) in [64, 128].into_iter().flat_map(|bm| {
            [false, true].into_iter().flat_map(move |nm| [64, 128, 256].into_iter().map(move |bn| (bm, nm, bn)))
        }) {
            let forced = Knobs { bm: Some(bm), bn: Some(bn), ..knobs };
            let Some(p) = plan(64, 4096, 4096, 1, 132, n_major, forced) else { panic!("{bm} {bn}") };
            if p.bn != bn {
                continue;
            }
            let forms = [(false, false, false), (false, false, true), (true, false, false), (true, false, true)];
            for (staged, f32, identity) in forms.into_iter().chain([(false, true, true)]) {
                if (staged && bm == 64) || (f32 && (n_major || dtype != DType::BFloat16)) {
                    continue;
                }
                let name = kernel_name(dtype, n_major, (bm, bn), staged, f32, identity);
                assert!(src.contains(&format!("({name}, ")), "{name} is not an entry");
            }
        }
    }
}
