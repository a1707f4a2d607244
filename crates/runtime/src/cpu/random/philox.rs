//! Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw ("Parallel random
//! numbers: as easy as 1, 2, 3", SC 2011; the Random123 library): a keyed bijection of 128-bit
//! counters, ten rounds of two 32x32 -> 64-bit products, the key bumped by the Weyl constants
//! between rounds. kernels/random.cu has the same function, word for word.

/// The round multipliers and the key increments (Random123's PHILOX_M4x32_* and PHILOX_W32_*).
const M0: u32 = 0xd251_1f53;
const M1: u32 = 0xcd9e_8d57;
const W0: u32 = 0x9e37_79b9;
const W1: u32 = 0xbb67_ae85;

#[inline]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

/// The four output words of counter `ctr` under key `key` (words in Random123's order).
#[inline]
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = ctr;
    let [mut k0, mut k1] = key;
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let (hi0, lo0) = mulhilo(M0, c0);
        let (hi1, lo1) = mulhilo(M1, c2);
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0);
    }
    [c0, c1, c2, c3]
}

/// Block `block` of stream `stream` under `seed`: the key is the seed's low and high words,
/// the counter (block low, block high, stream low, stream high).
#[inline]
pub fn block(seed: u64, stream: u64, block: u64) -> [u32; 4] {
    philox4x32_10(
        [block as u32, (block >> 32) as u32, stream as u32, (stream >> 32) as u32],
        [seed as u32, (seed >> 32) as u32],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors for philox4x32 with 10 rounds (tests/kat_vectors):
    /// counter, key, output.
    #[test]
    fn matches_the_random123_known_answers() {
        let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            ([0, 0, 0, 0], [0, 0], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
            ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (ctr, key, want) in kat {
            assert_eq!(philox4x32_10(ctr, key), want, "counter {ctr:08x?} key {key:08x?}");
        }
    }

    #[test]
    fn the_block_layout_puts_seed_in_the_key_and_stream_in_the_counter() {
        let (seed, stream, b) = (0x299f_31d0_a409_3822u64, 0x0370_7344_1319_8a2eu64, 0x85a3_08d3_243f_6a88u64);
        assert_eq!(block(seed, stream, b), [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]);
        assert_eq!(block(0, 0, 0), [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        // Every input word matters.
        let base = block(1, 2, 3);
        assert_ne!(block(1 << 40, 2, 3), base);
        assert_ne!(block(1, 2 | 1 << 40, 3), base);
        assert_ne!(block(1, 2, 3 | 1 << 40), base);
    }
}
