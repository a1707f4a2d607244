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

/// A process that exits while prefetch's background compiles run, after `settle` (which the
/// Python package calls at exit): nothing is compiling once it returns (the cache directory
/// stays as it is), some compile had begun, and the exit is clean. Without it, NVRTC torn down
/// under a running compile crashed such exits (SIGSEGV, or LLVM's "out of memory", about one
/// exit in four). Runs itself as the child, on a fresh cache directory.
#[test]
fn exit_after_settle_is_clean_and_compiles_nothing_after_it() {
    if !nvrtc_or_skip() {
        return;
    }
    let listing = |dir: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    };
    if let Some(dir) = std::env::var_os("COMPILE_TESTS_EXIT_CHILD") {
        let dir = std::path::PathBuf::from(dir);
        drop(prefetch("sm_90a", &[&sources::FILL, &sources::COPY_STRIDED, &sources::CAST]));
        std::thread::sleep(std::time::Duration::from_millis(100)); // the threads are compiling
        max_kernels_cuda::settle();
        let settled = listing(&dir);
        std::thread::sleep(std::time::Duration::from_millis(1500));
        assert!(!settled.is_empty(), "no compile had finished when settle returned");
        assert_eq!(listing(&dir), settled, "a compile went on after settle");
        return; // the test harness exits at once
    }
    for i in 0..2 {
        let dir = std::env::temp_dir().join(format!("max-exit-compiles-{}-{i}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["exit_after_settle_is_clean_and_compiles_nothing_after_it", "--exact", "--quiet"])
            .env("COMPILE_TESTS_EXIT_CHILD", &dir)
            .env("MAX_KERNEL_CACHE_DIR", &dir)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(status.success(), "the child exited with {status}");
    }
}
