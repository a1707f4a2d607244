//! Unit tests of the block decoders on hand-built blocks, and of the tiled qmatmul against a
//! plain triple loop (the gguf parity tests are in tests/test_quant.py).

use half::f16;

use super::blocks::{Decode, Encoding};
use super::matmul_columns;

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

#[test]
fn q4_0_nibble_order() {
    let mut b = vec![0u8; 18];
    b[..2].copy_from_slice(&f16_bytes(0.5));
    for j in 0..16 {
        b[2 + j] = (j as u8) | ((15 - j as u8) << 4);
    }
    let mut out = [0f32; 32];
    Encoding::Q4_0.decode(&b, &mut out);
    for j in 0..16 {
        assert_eq!(out[j], (j as f32 - 8.0) * 0.5);
        assert_eq!(out[j + 16], (7.0 - j as f32) * 0.5);
    }
}

#[test]
fn q4_1_and_q8_0() {
    let mut b = vec![0u8; 20];
    b[..2].copy_from_slice(&f16_bytes(2.0));
    b[2..4].copy_from_slice(&f16_bytes(-1.0));
    b[4] = 0x3A;
    let mut out = [0f32; 32];
    Encoding::Q4_1.decode(&b, &mut out);
    assert_eq!((out[0], out[16], out[1]), (19.0, 5.0, -1.0));
    let mut b = vec![0u8; 34];
    b[..2].copy_from_slice(&f16_bytes(0.25));
    b[2] = (-128i8) as u8;
    b[33] = 127;
    Encoding::Q8_0.decode(&b, &mut out);
    assert_eq!((out[0], out[31], out[5]), (-32.0, 31.75, 0.0));
}

#[test]
fn q4_k_scale_packing() {
    // Sub-block 5 takes its scale from the low nibble of byte 9 and the top bits of byte 1,
    // its min from the high nibble of byte 9 and the top bits of byte 5.
    let mut b = vec![0u8; 144];
    b[..2].copy_from_slice(&f16_bytes(1.0));
    b[2..4].copy_from_slice(&f16_bytes(0.5));
    b[4 + 9] = 0x73; // scale low 3, min low 7
    b[4 + 1] = 0b1000_0000; // scale high bits 2 -> scale = 3 | 2 << 4 = 35
    b[4 + 5] = 0b0100_0000; // min high bits 1 -> min = 7 | 1 << 4 = 23
    b[16 + 2 * 32 + 4] = 0x90; // chunk 2, byte 4: high nibble 9 is element 2*64 + 32 + 4 (sub-block 5)
    let mut out = [0f32; 256];
    Encoding::Q4K.decode(&b, &mut out);
    assert_eq!(out[2 * 64 + 32 + 4], 35.0 * 9.0 - 0.5 * 23.0);
    assert_eq!(out[2 * 64 + 32 + 5], -0.5 * 23.0);
}

#[test]
fn q6_k_layout() {
    let mut b = vec![0u8; 210];
    b[208..].copy_from_slice(&f16_bytes(0.5));
    for s in 0..16 {
        b[192 + s] = (s as i8 - 8) as u8;
    }
    // Element 128 + 64 + 3 (second half, third quarter): high nibble of ql[64 + 3], bits 4..6
    // of qh[32 + 3]; scale index (128 + 64 + 3) / 16 = 12.
    b[64 + 3] = 0xB0;
    b[128 + 32 + 3] = 0b0010_0000;
    let mut out = [0f32; 256];
    Encoding::Q6K.decode(&b, &mut out);
    assert_eq!(out[128 + 64 + 3], 0.5 * 4.0 * ((0xB | (2 << 4)) as f32 - 32.0));
    assert_eq!(out[0], 0.5 * -8.0 * -32.0);
}

#[test]
fn tiled_matmul_matches_a_loop() {
    let (m, k, n) = (3, 37, 150);
    let lhs: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let w = |j: usize, c: usize| ((j * 3 + c * 5) % 13) as f32 - 6.0;
    let mut out = vec![f32::NAN; m * n];
    matmul_columns(&lhs, m, k, n, &mut out, |j, row| {
        for (c, v) in row.iter_mut().enumerate() {
            *v = w(j, c);
        }
    });
    for i in 0..m {
        for j in 0..n {
            let want: f32 = (0..k).map(|c| lhs[i * k + c] * w(j, c)).sum();
            assert_eq!(out[i * n + j], want, "({i}, {j})");
        }
    }
}
