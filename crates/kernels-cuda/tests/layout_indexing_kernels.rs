//! Every kernel name the layout and indexing launch wrappers can ask for exists in the compiled
//! families (checked on the PTX, without a GPU), and the kernels use no local memory.

use max_kernels_cuda::{Target, compile, ensure_nvrtc, sources};

fn ptx_or_skip(family: &sources::Family) -> Option<String> {
    match ensure_nvrtc() {
        Ok(()) => {}
        Err(e) if std::env::var("MAX_REQUIRE_NVRTC").as_deref() != Ok("1") => {
            eprintln!("skipping: {e}");
            return None;
        }
        Err(e) => panic!("MAX_REQUIRE_NVRTC=1 but {e}"),
    }
    Some(String::from_utf8(compile(family, "sm_90a", Target::Ptx).unwrap_or_else(|e| panic!("{e}"))).unwrap())
}

fn assert_entries(ptx: &str, names: &[String]) {
    for n in names {
        let entry = format!(".entry {n}(");
        assert!(ptx.contains(&entry), "missing {entry}");
    }
    // No kernel spills to or keeps arrays in local memory.
    assert!(!ptx.contains(".local"), "a kernel uses local memory");
}

fn each(prefix: &str, widths: &[&str], suffixes: &[&str]) -> Vec<String> {
    let mut out = vec![];
    for w in widths {
        for s in suffixes {
            out.push(if s.is_empty() { format!("{prefix}_{w}") } else { format!("{prefix}_{w}_{s}") });
        }
    }
    out
}

const W4: &[&str] = &["b8", "b16", "b32", "b64"];
const W5: &[&str] = &["b8", "b16", "b32", "b64", "b128"];
const IDX: &[&str] = &["i32", "i64"];

#[test]
fn layout_kernels_exist() {
    let Some(ptx) = ptx_or_skip(&sources::LAYOUT) else { return };
    let mut names = each("copy_view", W5, IDX);
    names.extend(each("transpose", W4, &[""]));
    names.extend(each("pad", W4, IDX));
    names.extend(each("band_part", W4, IDX));
    assert_entries(&ptx, &names);
}

#[test]
fn indexing_kernels_exist() {
    let Some(ptx) = ptx_or_skip(&sources::INDEXING) else { return };
    let mut names = each("resolve", &["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"], &[""]);
    names.extend(each("gather_rows", W5, IDX));
    names.extend(each("scatter", W4, &[""]));
    names.extend(each("scatter_rows", W5, IDX));
    names.push("scatter_claim".into());
    names.push("scatter_nd_claim".into());
    assert_entries(&ptx, &names);
}
