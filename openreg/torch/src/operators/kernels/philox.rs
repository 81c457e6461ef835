//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
//! counter-based generator CUDA's and XPU's random kernels use. A block of four 32-bit
//! numbers is a pure function of a 64-bit key (the seed) and a 128-bit counter, so any element
//! of a tensor can draw its numbers without the others: a kernel is split over threads (or a
//! GPU's blocks) any way, and each element still gets the same numbers.
//!
//! The counter of element group `g` at generator offset `offset` is `[g, offset / 4]` (low
//! words first): the group indexes one 128-bit block within a launch, and every launch takes
//! a fresh offset from the generator (`runtime/generator.rs`).


/// Philox block 0 at counter column `column` (a seed for a CPU generator).
pub(crate) fn philox_block(seed: u64, column: u64) -> [u32; 4] {
    philox([0, 0, column as u32, (column >> 32) as u32], key(seed))
}

// ANCHOR: philox
const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9; // the key's increment per round: the golden ratio, and sqrt(3) - 1
const W1: u32 = 0xBB67_AE85;

/// One Philox4x32 round: two 32x32->64 multiplies, the halves swapped and mixed with the key.
#[inline(always)]
fn round([c0, c1, c2, c3]: [u32; 4], [k0, k1]: [u32; 2]) -> [u32; 4] {
    let p0 = u64::from(M0) * u64::from(c0);
    let p1 = u64::from(M1) * u64::from(c2);
    [(p1 >> 32) as u32 ^ c1 ^ k0, p1 as u32, (p0 >> 32) as u32 ^ c3 ^ k1, p0 as u32]
}

/// Ten rounds, the key bumped between them.
#[inline(always)]
pub(crate) fn philox(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        c = round(c, k);
    }
    c
}
// ANCHOR_END: philox

/// The key for a seed: its low word first.
#[inline(always)]
pub(crate) fn key(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// Groups computed together: written as loops over this many lanes, the rounds compile to
/// SIMD multiplies (`vpmuludq`) in the kernels' AVX versions.
pub(crate) const LANES: usize = 16;

/// The blocks of groups `first..first + LANES` at `offset`: `out[w][l]` is word `w` of group
/// `first + l`. Equal, lane by lane, to [`philox`] on each group's counter.
#[inline(always)]
pub(crate) fn blocks(seed: u64, offset: u64, first: u64, out: &mut [[u32; LANES]; 4]) {
    let column = offset / 4;
    let [k0, k1] = key(seed);
    let mut c = [[0u32; LANES]; 4];
    for l in 0..LANES {
        let g = first + l as u64;
        c[0][l] = g as u32;
        c[1][l] = (g >> 32) as u32;
        c[2][l] = column as u32;
        c[3][l] = (column >> 32) as u32;
    }
    let mut k = [k0, k1];
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        for l in 0..LANES {
            let p0 = u64::from(M0) * u64::from(c[0][l]);
            let p1 = u64::from(M1) * u64::from(c[2][l]);
            let (c1, c3) = (c[1][l], c[3][l]);
            c[0][l] = (p1 >> 32) as u32 ^ c1 ^ k[0];
            c[1][l] = p1 as u32;
            c[2][l] = (p0 >> 32) as u32 ^ c3 ^ k[1];
            c[3][l] = p0 as u32;
        }
    }
    *out = c;
}

#[cfg(test)]
mod tests {
    use super::*;

    // The three philox4x32 10 lines of Random123's kat_vectors: counter, key, expected.
    const KNOWN: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        ([0, 0, 0, 0], [0, 0], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
        ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
    ];

    #[test]
    fn matches_the_published_known_answers() {
        for (counter, key, expected) in KNOWN {
            assert_eq!(philox(counter, key), expected, "counter {counter:x?} key {key:x?}");
        }
    }

    #[test]
    fn lanes_equal_one_block_at_a_time() {
        let mut out = [[0u32; LANES]; 4];
        for (seed, offset, first) in [(0, 0, 0), (42, 8, 1000), (u64::MAX, 1 << 40, (1 << 33) - 3)] {
            blocks(seed, offset, first, &mut out);
            for l in 0..LANES {
                let g = first + l as u64;
                let column = offset / 4;
                let want = philox([g as u32, (g >> 32) as u32, column as u32, (column >> 32) as u32], key(seed));
                assert_eq!([out[0][l], out[1][l], out[2][l], out[3][l]], want, "lane {l}");
            }
        }
    }
}
