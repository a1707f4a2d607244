//! Every kernel family compiles with NVRTC for sm_90a, to a cubin and to PTX, with no GPU.
//! Skips (with a message) when libnvrtc cannot be found, unless MAX_REQUIRE_NVRTC=1 (CI sets
//! it, so a broken kernel cannot land silently).

use max_kernels_cuda::{Target, compile, ensure_nvrtc, sources};

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

#[test]
fn every_family_compiles_for_sm90a() {
    if !nvrtc_or_skip() {
        return;
    }
    for family in sources::ALL {
        let cubin = compile(family, "sm_90a", Target::Cubin).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{} cubin is not an ELF image", family.name);
        let ptx = String::from_utf8(compile(family, "sm_90a", Target::Ptx).unwrap()).unwrap();
        assert!(ptx.contains(".target sm_90a"), "{}", family.name);
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
