//! Every kernel a family's launch wrappers can name exists in the family's PTX for sm_90a, with
//! one parameter of the size of the wrapper's argument struct (so the #[repr(C)] structs and
//! the kernels' structs agree), for the families whose launchers list their kernels. Also the
//! families whose exact arithmetic must not be contracted into FMAs. Skips without libnvrtc
//! unless MAX_REQUIRE_NVRTC=1.

use max_kernels_cuda::ensure_nvrtc;
use max_kernels_cuda::launch::{
    allreduce_p2p, attention, attention_decode, attention_prefill, fft, gemv_mma, gemv_nt, qgemm_sm90, random, sampling,
};
use max_kernels_cuda::sources::{
    self, ALLREDUCE_P2P, ATTENTION, ATTENTION_DECODE, ATTENTION_PREFILL, ATTENTION_PREFILL_SM90, FFT, Family, GEMV_MMA,
    GEMV_NT, QGEMM_SM90, RANDOM, SAMPLING,
};

mod common;

/// The family's PTX after checking that `listed` (the launcher's kernels, `count` of them) are
/// all in it with their argument sizes; None when NVRTC is missing and not required.
fn check_listed(family: &Family, listed: Vec<(Family, String, usize)>, count: usize) -> Option<String> {
    match ensure_nvrtc() {
        Ok(()) => {}
        Err(e) if std::env::var("MAX_REQUIRE_NVRTC").as_deref() != Ok("1") => {
            eprintln!("skipping: {e}");
            return None;
        }
        Err(e) => panic!("MAX_REQUIRE_NVRTC=1 but {e}"),
    }
    let ptx = String::from_utf8(common::ptx(family, "sm_90a").unwrap_or_else(|e| panic!("{e}"))).unwrap();
    assert_eq!(listed.len(), count, "{}: kernels listed", family.name);
    for (f, name, size) in listed {
        assert_eq!(f.name, family.name);
        // Structs holding TMA maps (attention_prefill_sm90.cu's) are 64-byte aligned.
        let entry = |align: usize| format!(".entry {name}(\n\t.param .align {align} .b8 {name}_param_0[{size}]\n)");
        assert!(ptx.contains(&entry(8)) || ptx.contains(&entry(64)), "missing or different: {}", entry(8));
    }
    Some(ptx)
}

#[test]
fn allreduce_p2p_kernels_exist_with_their_argument_sizes() {
    check_listed(&ALLREDUCE_P2P, allreduce_p2p::kernels(), 12);
}

#[test]
fn attention_kernels_exist_with_their_argument_sizes() {
    check_listed(&ATTENTION, attention::kernels(), 12);
}

#[test]
fn attention_decode_kernels_exist_with_their_argument_sizes() {
    check_listed(&ATTENTION_DECODE, attention_decode::kernels(), 33);
}

#[test]
fn attention_prefill_kernels_exist_with_their_argument_sizes() {
    check_listed(&ATTENTION_PREFILL, attention_prefill::kernels(), 6);
}

#[test]
fn attention_prefill_sm90_kernels_exist_with_their_argument_sizes() {
    check_listed(&ATTENTION_PREFILL_SM90, attention_prefill::kernels_sm90(), 12);
}

#[test]
fn qgemm_kernels_exist_with_their_three_argument_sizes() {
    // (three parameters: the lhs map and the weight maps, 64-byte aligned, then the arguments;
    // one family per encoding)
    assert_eq!(QGEMM_SM90.len(), 6);
    for family in &QGEMM_SM90 {
        let enc = family.name.strip_prefix("qgemm_sm90_").unwrap();
        let listed = qgemm_sm90::kernels(enc);
        assert_eq!(listed.len(), 18);
        let Some(ptx) = check_listed(family, vec![], 0) else { return };
        assert_eq!(ptx.matches(".entry ").count(), listed.len(), "{}", family.name);
        for (name, [map, maps, args]) in listed {
            let entry = format!(
                ".entry {name}(\n\t.param .align 64 .b8 {name}_param_0[{map}],\n\t.param .align 64 .b8 \
                 {name}_param_1[{maps}],\n\t.param .align 8 .b8 {name}_param_2[{args}]\n)"
            );
            assert!(ptx.contains(&entry), "missing or different: {entry}");
        }
    }
}

#[test]
fn fft_kernels_exist_with_their_argument_sizes() {
    check_listed(&FFT, fft::kernels(), 10);
}

#[test]
fn gemv_mma_kernels_exist_with_their_argument_sizes() {
    check_listed(&GEMV_MMA, gemv_mma::kernels(), 8);
}

#[test]
fn gemv_nt_kernels_exist_with_their_argument_sizes() {
    check_listed(&GEMV_NT, gemv_nt::kernels(), 106);
}

#[test]
fn sampling_kernels_exist_and_never_contract() {
    let Some(ptx) = check_listed(&SAMPLING, sampling::kernels(), 5) else { return };
    // The exact arithmetic must not be contracted: no fused multiply-add in the family.
    assert!(!ptx.contains("fma.rn.f32"), "the sampling family must not contract a * b + c into an FMA");
}

#[test]
fn random_kernels_exist_and_uniform_never_contracts() {
    let Some(ptx) = check_listed(&RANDOM, random::kernels(), 12) else { return };
    for (_, name, _) in random::kernels() {
        if name.starts_with("random_uniform") {
            let body = ptx.split(&format!(".entry {name}(")).nth(1).unwrap_or("");
            let body = body.split(".entry ").next().unwrap_or("");
            assert!(!body.contains("fma.rn"), "{name}: offset + scale * u must not be contracted into an FMA");
        }
    }
}

/// The qgemv kernels (one family per encoding and activation type, sources::qgemv) are where
/// launch/quant.rs looks for them: each family has the general kernel of every row variant and,
/// for the word-decoded encodings, the streaming one, under the names of the launch records.
#[test]
fn qgemv_kernels_are_in_their_family() {
    if ensure_nvrtc().is_err() && std::env::var("MAX_REQUIRE_NVRTC").as_deref() != Ok("1") {
        eprintln!("skipping: no libnvrtc");
        return;
    }
    let pairs: Vec<(&str, &str)> = ["q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k"]
        .into_iter()
        .flat_map(|e| ["", "_bf16", "_f16"].map(|t| (e, t)))
        .collect();
    assert_eq!(pairs.len(), sources::QGEMV.len());
    std::thread::scope(|s| {
        for &(enc, act) in &pairs {
            s.spawn(move || {
                let family = sources::qgemv(enc, act).unwrap_or_else(|e| panic!("{e}"));
                let ptx = String::from_utf8(common::ptx(family, "sm_90a").unwrap_or_else(|e| panic!("{e}"))).unwrap();
                let streams = !enc.ends_with("5_k") && !enc.ends_with("6_k");
                let mut names: Vec<String> = [1, 2, 4, 8].map(|mr| format!("qgemv_{enc}_m{mr}{act}")).into();
                if streams {
                    names.extend([1, 2, 4, 8].map(|mr| format!("qgemv_s_{enc}_m{mr}{act}")));
                }
                for name in &names {
                    assert!(ptx.contains(&format!(".entry {name}(")), "{}: no {name}", family.name);
                }
                assert_eq!(ptx.matches(".entry ").count(), names.len(), "{}: other kernels", family.name);
            });
        }
    });
}
