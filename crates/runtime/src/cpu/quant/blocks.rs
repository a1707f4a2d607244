//! Decoding the GGUF block encodings to f32, exactly as ggml's `dequantize_row_*` (and the
//! `gguf` Python package) do: every product and difference is one f32 operation in the same
//! order, no fused multiply-add, so the results match bit for bit.

pub use max_graph::ops::quant::Encoding;

/// Decoding an encoding's blocks on the host (the reference of every quantized kernel).
pub trait Decode {
    /// Decodes one block (`block().1` bytes) into `out` (`block().0` values).
    fn decode(self, b: &[u8], out: &mut [f32]);
    /// Decodes whole blocks: `src` holds `n` blocks and `out` their `n * elements` values.
    fn decode_blocks(self, src: &[u8], out: &mut [f32]);
}

impl Decode for Encoding {
    fn decode(self, b: &[u8], out: &mut [f32]) {
        match self {
            Encoding::Q4_0 => q4_0(b, out),
            Encoding::Q4_1 => q4_1(b, out),
            Encoding::Q8_0 => q8_0(b, out),
            Encoding::Q4K => q4_k(b, out),
            Encoding::Q5K => q5_k(b, out),
            Encoding::Q6K => q6_k(b, out),
        }
    }

    fn decode_blocks(self, src: &[u8], out: &mut [f32]) {
        let (elems, bytes) = self.block();
        for (b, o) in src.chunks_exact(bytes).zip(out.chunks_exact_mut(elems)) {
            self.decode(b, o);
        }
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// f16 d, then 16 bytes: element j is the low nibble of byte j, element j + 16 its high
/// nibble; value (q - 8) * d.
fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        out[j] = ((q & 0xF) as i32 - 8) as f32 * d;
        out[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// f16 d, f16 m, then nibbles as Q4_0; value q * d + m.
fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        out[j] = d * (q & 0xF) as f32 + m;
        out[j + 16] = d * (q >> 4) as f32 + m;
    }
}

/// f16 d, then 32 int8; value q * d.
fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = q as i8 as f32 * d;
    }
}

/// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block `j` (0..8) from 12 bytes.
fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// The (scale, min) multipliers of the 8 sub-blocks of 32 of a Q4_K/Q5_K super-block.
fn k_scales(b: &[u8]) -> [(f32, f32); 8] {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    std::array::from_fn(|j| {
        let (sc, m) = scale_min(j, scales);
        (d * sc as f32, dmin * m as f32)
    })
}

/// f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles: chunk c (of 64
/// elements) takes 32 bytes, low nibbles for sub-block 2c, high for 2c + 1; value d*sc*q - dmin*m.
fn q4_k(b: &[u8], out: &mut [f32]) {
    let s = k_scales(b);
    let qs = &b[16..144];
    for c in 0..4 {
        let ((d1, m1), (d2, m2)) = (s[2 * c], s[2 * c + 1]);
        for l in 0..32 {
            let q = qs[32 * c + l];
            out[64 * c + l] = d1 * (q & 0xF) as f32 - m1;
            out[64 * c + 32 + l] = d2 * (q >> 4) as f32 - m2;
        }
    }
}

/// Q4_K plus 32 bytes of high bits (before the nibbles): bit j of byte l is the fifth bit of
/// element l of sub-block j.
fn q5_k(b: &[u8], out: &mut [f32]) {
    let s = k_scales(b);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for c in 0..4 {
        let ((d1, m1), (d2, m2)) = (s[2 * c], s[2 * c + 1]);
        for l in 0..32 {
            let q = qs[32 * c + l];
            let lo = (q & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4);
            let hi = (q >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
            out[64 * c + l] = d1 * lo as f32 - m1;
            out[64 * c + 32 + l] = d2 * hi as f32 - m2;
        }
    }
}

/// 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales (one per 16 elements),
/// f16 d; value d * scale * (q - 32). Each half of 128 elements uses 64 low and 32 high bytes.
fn q6_k(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 208);
    let sc = &b[192..208];
    for h in 0..2 {
        let (ql, qh) = (&b[64 * h..64 * h + 64], &b[128 + 32 * h..128 + 32 * h + 32]);
        let base = 128 * h;
        for l in 0..32 {
            let q = [
                (ql[l] & 0xF) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (p, &v) in q.iter().enumerate() {
                let e = base + 32 * p + l;
                out[e] = (d * sc[e / 16] as i8 as f32) * (v as i32 - 32) as f32;
            }
        }
    }
}
