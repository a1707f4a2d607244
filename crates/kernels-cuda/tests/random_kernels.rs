//! Every kernel the random launcher can name exists in the family's PTX for sm_90a, with one
//! parameter of the size of the launcher's argument struct (so the #[repr(C)] struct and the
//! kernel's agree), and the uniform arithmetic is never contracted into an FMA (the host's
//! values are its bits). Skips without libnvrtc unless MAX_REQUIRE_NVRTC=1.

use max_kernels_cuda::launch::random::kernels;
use max_kernels_cuda::sources::RANDOM;
use max_kernels_cuda::{Target, compile, ensure_nvrtc};

#[test]
fn every_launched_kernel_exists_with_its_argument_size() {
    match ensure_nvrtc() {
        Ok(()) => {}
        Err(e) if std::env::var("MAX_REQUIRE_NVRTC").as_deref() != Ok("1") => {
            eprintln!("skipping: {e}");
            return;
        }
        Err(e) => panic!("MAX_REQUIRE_NVRTC=1 but {e}"),
    }
    let ptx = String::from_utf8(compile(&RANDOM, "sm_90a", Target::Ptx).unwrap_or_else(|e| panic!("{e}"))).unwrap();
    let all = kernels();
    assert_eq!(all.len(), 12);
    for (family, name, size) in all {
        assert_eq!(family.name, RANDOM.name);
        let entry = format!(".entry {name}(\n\t.param .align 8 .b8 {name}_param_0[{size}]\n)");
        assert!(ptx.contains(&entry), "missing or different: {entry}");
        if name.starts_with("random_uniform") {
            let body = ptx.split(&format!(".entry {name}(")).nth(1).unwrap_or("");
            let body = body.split(".entry ").next().unwrap_or("");
            assert!(!body.contains("fma.rn"), "{name}: offset + scale * u must not be contracted into an FMA");
        }
    }
}
