use super::*;

#[test]
fn declarations_are_in_knob_order_with_unique_names_and_valid_defaults() {
    let mut names = std::collections::HashSet::new();
    for (i, d) in DECLS.iter().enumerate() {
        assert_eq!(d.knob as usize, i, "{} out of order", d.name);
        assert!(names.insert(d.name), "{} declared twice", d.name);
        assert!(!d.doc.trim().is_empty(), "{} has no doc", d.name);
        assert_eq!(Knob::by_name(d.name), Some(d.knob));
        if !d.default.is_empty() {
            assert!(parse::value(d, d.default).is_ok(), "{}'s default", d.name);
        }
        // User settings have a variable of their own, tuning knobs a dotted family name.
        assert_eq!(d.env.is_some(), !d.name.contains('.'), "{}", d.name);
        if let Some(var) = d.env {
            assert!(var.starts_with("MAX_"));
        }
    }
}

#[test]
fn one_boolean_syntax() {
    for on in ["1", "true", "ON", " yes "] {
        assert_eq!(parse_flag(on), Some(true));
    }
    for off in ["0", "false", "Off", "no"] {
        assert_eq!(parse_flag(off), Some(false));
    }
    assert_eq!(parse_flag("2"), None);
    assert_eq!(parse_flag(""), None);
    // Choices with "on" and "off" take the flag words too.
    let t = Tuning::parse("cuda_graphs=false").unwrap();
    assert_eq!(t.choice(Knob::CudaGraphs), Some("off"));
    let t = Tuning::parse("cuda_graphs=1").unwrap();
    assert_eq!(t.choice(Knob::CudaGraphs), Some("on"));
    assert_eq!(Tuning::parse("cuda_graphs=ALWAYS").unwrap().choice(Knob::CudaGraphs), Some("always"));
}

#[test]
fn specs_set_typed_values_and_defaults_fill_the_rest() {
    let t = Tuning::parse("conv.bn=128, gemm.splitk=3,gemm.epilogue=direct,conv.pdl=off").unwrap();
    assert_eq!(t.int(Knob::ConvBn), Some(128));
    assert_eq!(t.int(Knob::GemmSplitk), Some(3));
    assert_eq!(t.choice(Knob::GemmEpilogue), Some("direct"));
    assert_eq!(t.flag(Knob::ConvPdl), Some(false));
    assert!(t.is_set(Knob::ConvPdl) && !t.is_set(Knob::ConvLean));
    assert_eq!(t.flag(Knob::ConvLean), Some(true));
    assert_eq!(t.int(Knob::ConvBm), None);
    assert_eq!(t.int(Knob::HostPoolMb), Some(256));
    assert_eq!(t.describe(), "conv.bn=128,conv.pdl=0,gemm.splitk=3,gemm.epilogue=direct");
    assert_eq!(Tuning::parse(&t.describe()).unwrap(), t);
}

#[test]
fn bad_entries_name_what_was_wrong() {
    let err = Tuning::parse("conv.bn=100").unwrap_err();
    assert!(err.contains("conv.bn") && err.contains("64, 128, 256") && err.contains("'100'"), "{err}");
    let err = Tuning::parse("conv.tm=24").unwrap_err();
    assert!(err.contains("multiple of 16"), "{err}");
    let err = Tuning::parse("conv.nope=1").unwrap_err();
    assert!(err.contains("conv.nope") && err.contains("conv.bn"), "{err}");
    let err = Tuning::parse("nothing=1").unwrap_err();
    assert!(err.contains("'nothing'"), "{err}");
    let err = Tuning::parse("conv.bn").unwrap_err();
    assert!(err.contains("name=value"), "{err}");
    let err = Tuning::parse("gemm.epilogue=fast").unwrap_err();
    assert!(err.contains("staged, direct"), "{err}");
    let err = Tuning::parse("conv.pdl=maybe").unwrap_err();
    assert!(err.contains("flag"), "{err}");
}

#[test]
fn scopes_override_and_restore() {
    let before = current();
    {
        let _outer = scoped("gemm.grid=7").unwrap();
        assert_eq!(current().int(Knob::GemmGrid), Some(7));
        {
            let _inner = scoped("gemm.grid=9,gemm.bn=256").unwrap();
            assert_eq!(current().int(Knob::GemmGrid), Some(9));
            assert_eq!(current().int(Knob::GemmBn), Some(256));
        }
        assert_eq!(current().int(Knob::GemmGrid), Some(7));
        assert_eq!(current().int(Knob::GemmBn), before.int(Knob::GemmBn));
    }
    assert_eq!(current(), before);
    assert!(scoped("gemm.grid=0").is_err());
    assert_eq!(current(), before);
}

#[test]
fn batch_invariance_is_off_unless_asked_for() {
    assert!(!Tuning::default().batch_invariant());
    assert!(Tuning::parse("numerics.batch_invariant=on").unwrap().batch_invariant());
    assert!(!Tuning::parse("numerics.batch_invariant=0").unwrap().batch_invariant());
    assert!(Tuning::parse("numerics.batch_invariant=2").is_err());
}
