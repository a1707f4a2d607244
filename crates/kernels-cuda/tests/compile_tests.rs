//! Kernel families compile with NVRTC for sm_90a, with no GPU (every family's PTX, and its
//! ptxas check, is in tests/ptxas.rs).
//! Skips (with a message) when libnvrtc cannot be found, unless MAX_REQUIRE_NVRTC=1 (CI sets
//! it, so a broken kernel cannot land silently).

use max_kernels_cuda::{Target, cache_stats, compile, ensure_nvrtc, prefetch, sources, warm_cache};

fn nvrtc_or_skip() -> bool {
    match ensure_nvrtc() {
        Ok(()) => true,
        Err(e) if std::env::var("MAX_REQUIRE_NVRTC").as_deref() != Ok("1") => {
            eprintln!("skipping: {e}");
            false
        }
        Err(e) => panic!("MAX_REQUIRE_NVRTC=1 but {e}"),
    }
}

/// Each family compiles to an ELF cubin for `arch` (NVRTC's own assembler).
fn assert_cubins(families: &[&sources::Family], arch: &str) {
    for family in families {
        let cubin = compile(family, arch, Target::Cubin).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{} cubin for {arch} is not an ELF image", family.name);
    }
}

/// Every family's PTX is compiled (and assembled by ptxas) in tests/ptxas.rs; here the cubin
/// target, which runs NVRTC's own assembler, on the smaller families.
#[test]
fn small_families_compile_to_cubins_for_sm90a() {
    if nvrtc_or_skip() {
        assert_cubins(&[&sources::FILL, &sources::CAST], "sm_90a");
    }
}

/// The decode step's attention families build for GPUs before Hopper too (sm_80): their
/// programmatic-launch waits compile to nothing there (prelude.cuh's pdl_wait), where a bare
/// `griddepcontrol` is rejected by the assembler.
#[test]
fn decode_attention_compiles_for_sm80() {
    if nvrtc_or_skip() {
        assert_cubins(&[&sources::ATTENTION_DECODE, &sources::ATTENTION], "sm_80");
    }
}

#[test]
fn every_cast_pair_is_a_kernel() {
    if !nvrtc_or_skip() {
        return;
    }
    let ptx = String::from_utf8(compile(&sources::CAST, "sm_90a", Target::Ptx).unwrap()).unwrap();
    let names: Vec<&str> =
        max_graph::DType::ALL.iter().filter_map(|d| max_kernels_cuda::launch::cast_name(*d)).collect();
    assert_eq!(names.len(), 15);
    for a in &names {
        for b in &names {
            let entry = format!(".entry cast_{a}_{b}(");
            assert!(ptx.contains(&entry), "missing {entry}");
        }
    }
}

#[test]
fn a_broken_source_reports_the_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let bad = sources::Family { name: "broken", source: "extern \"C\" __global__ void k() { oops; }" };
    let err = compile(&bad, "sm_90a", Target::Cubin).unwrap_err().to_string();
    assert!(err.contains("broken") && err.contains("oops"), "{err}");
}

/// prefetch compiles on threads of its own into the cache that launches (and warm_cache) read:
/// afterwards the families are memory hits.
#[test]
fn prefetched_families_are_in_the_cache() {
    if !nvrtc_or_skip() {
        return;
    }
    for handle in prefetch("sm_90a", &[&sources::FILL, &sources::COPY_STRIDED]) {
        handle.join().expect("a prefetch thread panicked").unwrap_or_else(|e| panic!("{e}"));
    }
    let before = cache_stats();
    warm_cache("sm_90a", Some(&["fill".to_string(), "copy_strided".to_string()])).unwrap();
    let after = cache_stats();
    assert_eq!(after.memory_hits - before.memory_hits, 2);
    assert_eq!(after.compiles + after.disk_hits, before.compiles + before.disk_hits);
}
