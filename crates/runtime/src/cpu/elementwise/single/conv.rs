//! Conversions between the storage of float32, bfloat16 and float16 values and the f32 that
//! holds them in the lanes of single.rs, and the rounding of an f32 or f64 result to each type.
//! They give the bits of cast.rs's rules (its tests compare them) with selects instead of
//! branches, so loops over them vectorise.

/// A float type of the group, held in f32 lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Float {
    F32,
    Bf16,
    F16,
}

/// f64 -> f32 rounded to odd: cast.rs's `f64_to_f32_odd`.
#[inline(always)]
pub fn f64_to_f32_odd(v: f64) -> f32 {
    let t = v as f32;
    let tb = t.to_bits();
    let mut r = if (t as f64).abs() > v.abs() { tb.wrapping_sub(1) } else { tb };
    if t.is_infinite() && v.is_finite() {
        r = f32::MAX.to_bits() | (tb & 0x8000_0000);
    }
    if f32::from_bits(r) as f64 != v {
        r |= 1;
    }
    if v.is_nan() { f32::NAN } else { f32::from_bits(r) }
}

/// An f32 rounded to the nearest bfloat16 (ties to even); NaN becomes the quiet NaN.
#[inline(always)]
pub fn round_bf16(x: f32) -> f32 {
    let b = x.to_bits();
    let abs = b & 0x7FFF_FFFF;
    let r = (abs + 0x7FFF + ((abs >> 16) & 1)) & 0xFFFF_0000;
    let m = if abs > 0x7F80_0000 {
        0x7FC0_0000
    } else if abs == 0x7F80_0000 {
        abs
    } else {
        r
    };
    f32::from_bits((b & 0x8000_0000) | m)
}

/// An f32 rounded to the nearest float16 (ties to even), kept as f32; NaN becomes the quiet NaN.
#[inline(always)]
pub fn round_f16(x: f32) -> f32 {
    let b = x.to_bits();
    let abs = b & 0x7FFF_FFFF;
    let r = (abs + 0xFFF + ((abs >> 13) & 1)) & !0x1FFF;
    let normal = if r > 0x477F_E000 { 0x7F80_0000 } else { r };
    // Below 2^-14 float16 steps by 2^-24, the step of f32 in [0.5, 1).
    let sub = ((f32::from_bits(abs) + 0.5) - 0.5).to_bits();
    let m = if abs > 0x7F80_0000 {
        0x7FC0_0000
    } else if abs == 0x7F80_0000 {
        abs
    } else if abs >= 0x3880_0000 {
        normal
    } else {
        sub
    };
    f32::from_bits((b & 0x8000_0000) | m)
}

#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// A bfloat16 held in an f32 (exactly) as its bits; NaN becomes the quiet NaN.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let m = if b & 0x7FFF_FFFF > 0x7F80_0000 { (b & 0x8000_0000) | 0x7FC0_0000 } else { b };
    (m >> 16) as u16
}

#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let e = (h >> 10) & 0x1F;
    let m = h & 0x3FF;
    let mag = if e == 0 {
        // m * 2^-24, exact.
        (m as i32 as f32 * (1.0 / 16_777_216.0)).to_bits()
    } else if e == 31 {
        0x7F80_0000 | (m << 13)
    } else {
        ((e + 112) << 23) | (m << 13)
    };
    f32::from_bits(((h & 0x8000) << 16) | mag)
}

/// A float16 held in an f32 (exactly) as its bits; NaN becomes the quiet NaN.
#[inline(always)]
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let abs = b & 0x7FFF_FFFF;
    let mag = if abs > 0x7F80_0000 {
        0x7E00
    } else if abs == 0x7F80_0000 {
        0x7C00
    } else if abs >= 0x3880_0000 {
        (abs >> 13) - (112 << 10)
    } else {
        (f32::from_bits(abs) * 16_777_216.0) as i32 as u32
    };
    (((b >> 16) & 0x8000) | mag) as u16
}

/// The float32 canonical NaN for a NaN (sign kept), as storing through cast.rs gives.
#[inline(always)]
pub fn quiet(x: f32) -> f32 {
    let b = x.to_bits();
    if b & 0x7FFF_FFFF > 0x7F80_0000 { f32::from_bits((b & 0x8000_0000) | 0x7FC0_0000) } else { x }
}
