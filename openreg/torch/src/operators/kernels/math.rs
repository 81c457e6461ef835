//! Vectorisable math for the kernels' inner loops. libm's `expf` is a function call per
//! element that the compiler cannot vectorise; these are branch-free, so a loop over a slice
//! becomes SIMD code (4 lanes with SSE2, 8 in the AVX2 versions of the kernels).

// ANCHOR: exp
/// `e^x` in float32, within 2 ulp of the exact value: `x = n ln 2 + r` with `|r| <= ln 2 / 2`,
/// a degree-6 polynomial for `e^r` (Cephes' coefficients), `2^n` built in the exponent bits.
/// Below -87.3 the result is 0 (as `expf` underflows), above 88.7 it is infinity, NaN stays NaN.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // ln 2 split in two, so that n * LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let clamped = x.clamp(-87.336_54, 88.722_83);
    let shifted = clamped * LOG2E + ROUND;
    let n = shifted - ROUND; // round(x / ln 2)
    let r = clamped - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 5.000_000_1e-1;
    let e_r = p * r * r + r + 1.0;
    // n sits in the low mantissa bits of `shifted`; 2^n is (n + 127) in the exponent field.
    let bits = shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23;
    let value = e_r * f32::from_bits(bits); // NaN in, NaN out: every step keeps it
    // Two independent selects (a chain of `else if` stayed a branch in some loops, which
    // then did not vectorise).
    let value = if x > 88.722_83 { f32::INFINITY } else { value };
    if x < -87.336_54 { 0.0 } else { value }
}
// ANCHOR_END: exp

// ANCHOR: tanh
/// `1 / (1 + e^-x)`, vectorisable.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh(x)` in float32, vectorisable: `1 - 2 / (e^2x + 1)`, which saturates correctly at both
/// ends; near 0, where that form cancels, the series `x - x^3/3 + 2x^5/15 - 17x^7/315`.
/// Within 1e-6 of the exact value, relatively.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    let x2 = x * x;
    let series = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 - x2 * (17.0 / 315.0))));
    let wide = 1.0 - 2.0 / (exp(2.0 * x) + 1.0);
    if x.abs() < 0.125 { series } else { wide }
}
// ANCHOR_END: tanh

/// The error function, vectorisable. From |x| = 0.5 on, Abramowitz and Stegun's 7.1.26:
/// `1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) e^(-x^2)` with `t = 1 / (1 + p |x|)`, within
/// 1.5e-7 of the exact value — PyTorch's vectorised CPU `erf` (behind the exact GELU) is this
/// formula. Nearer 0, where `1 - ...` cancels, the Taylor series to x^11. Within 4e-7 overall.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    const FRAC_2_SQRT_PI: f32 = std::f32::consts::FRAC_2_SQRT_PI;
    let (a, x2) = (x.abs(), x * x);
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = ((((1.061_405_4 * t - 1.453_152_1) * t + 1.421_413_7) * t - 0.284_496_74) * t + 0.254_829_6) * t;
    let wide = 1.0 - poly * exp(-x2);
    let wide = if x < 0.0 { -wide } else { wide };
    let series = FRAC_2_SQRT_PI
        * x
        * (1.0 + x2 * (-1.0 / 3.0 + x2 * (1.0 / 10.0 + x2 * (-1.0 / 42.0 + x2 * (1.0 / 216.0 - x2 / 1320.0)))));
    if a < 0.5 { series } else { wide } // NaN in, NaN out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_two_ulp_of_libm_over_the_range() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), f64::from(x).exp() as f32);
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulps <= 2, "exp({x}) = {got}, expected {want} ({ulps} ulp)");
            x += 0.0137;
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_and_sigmoid_close_to_libm() {
        let mut x = -20.0f32;
        while x < 20.0 {
            let (t, want) = (tanh(x), f64::from(x).tanh());
            assert!((f64::from(t) - want).abs() <= 1e-6 * want.abs(), "tanh({x}) = {t}, expected {want}");
            let (s, want) = (sigmoid(x), 1.0 / (1.0 + (-f64::from(x)).exp()));
            assert!((f64::from(s) - want).abs() <= 3e-7 * want, "sigmoid({x}) = {s}, expected {want}");
            x += 0.00731;
        }
        assert_eq!((tanh(100.0), tanh(-100.0), tanh(0.0)), (1.0, -1.0, 0.0));
        assert!(tanh(f32::NAN).is_nan() && sigmoid(f32::NAN).is_nan());
    }

    #[test]
    fn erf_within_its_bound() {
        unsafe extern "C" {
            fn erf(x: f64) -> f64; // C's libm, linked by the standard library
        }
        let mut x = -6.0f32;
        while x < 6.0 {
            let (got, want) = (super::erf(x), unsafe { erf(f64::from(x)) });
            assert!((f64::from(got) - want).abs() <= 4e-7, "erf({x}) = {got}, expected {want}");
            x += 0.00573;
        }
        assert_eq!((super::erf(f32::INFINITY), super::erf(f32::NEG_INFINITY)), (1.0, -1.0));
        assert!(super::erf(f32::NAN).is_nan());
    }
}
