//! Every kernel the reduction launch wrappers can name exists in its family's PTX for sm_90a,
//! with one parameter of the size of the wrapper's argument struct (so the #[repr(C)] structs
//! and the kernels' structs agree). Skips without libnvrtc unless MAX_REQUIRE_NVRTC=1.

use std::collections::HashMap;

use max_kernels_cuda::launch::reduction::kernels;
use max_kernels_cuda::{Target, compile, ensure_nvrtc};

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
fn every_launched_kernel_exists_with_its_argument_size() {
    if !nvrtc_or_skip() {
        return;
    }
    let mut ptx: HashMap<&str, String> = HashMap::new();
    let all = kernels();
    assert!(all.len() > 200, "{}", all.len());
    for (family, name, size) in all {
        let text = ptx.entry(family.name).or_insert_with(|| {
            String::from_utf8(compile(&family, "sm_90a", Target::Ptx).unwrap_or_else(|e| panic!("{e}"))).unwrap()
        });
        let entry = format!(".entry {name}(\n\t.param .align 8 .b8 {name}_param_0[{size}]\n)");
        assert!(text.contains(&entry), "{}: missing or different: {entry}", family.name);
    }
}
