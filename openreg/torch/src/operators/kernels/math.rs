//! Vectorisable math for the kernels' inner loops. libm's `expf` is a function call per
//! element that the compiler cannot vectorise; these are branch-free, so a loop over a slice
//! becomes SIMD code (4 lanes with SSE2, 8 in the AVX2 versions of the kernels).

// ANCHOR: exp
/// `e^x` in float32, within 2 ulp of the exact value: `x = n ln 2 + r` with `|r| <= ln 2 / 2`,
/// a degree-6 polynomial for `e^r` (Cephes' coefficients), `2^n` built in the exponent bits.
/// Below -87.3 the result is 0 (as `expf` underflows), above 88.7 it is infinity, NaN stays NaN.
/// `FMA`: whether the calling code is compiled with fused multiply-add (see [`mul_add`]).
#[inline(always)]
pub(crate) fn exp_with<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // ln 2 split in two, so that n * LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let fma = mul_add::<FMA>;
    let clamped = x.clamp(-87.336_54, 88.722_83);
    let shifted = fma(clamped, LOG2E, ROUND);
    let n = shifted - ROUND; // round(x / ln 2)
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, clamped));
    let mut p = 1.987_569_1e-4;
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1] {
        p = fma(p, r, c);
    }
    let e_r = fma(p, r * r, r) + 1.0;
    // n sits in the low mantissa bits of `shifted`; 2^n is (n + 127) in the exponent field.
    let bits = shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23;
    let value = e_r * f32::from_bits(bits); // NaN in, NaN out: every step keeps it
    // Two independent selects (a chain of `else if` stayed a branch in some loops, which
    // then did not vectorise).
    let value = if x > 88.722_83 { f32::INFINITY } else { value };
    if x < -87.336_54 { 0.0 } else { value }
}

/// [`exp_with`] for code compiled without FMA.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    exp_with::<false>(x)
}

/// The natural logarithm in float32, vectorisable (libm's `logf` is a call per element):
/// `x = m 2^e` with `m` in `[sqrt(1/2), sqrt(2))`, `ln x = e ln 2 + ln m`, and `ln m = ln(1 + f)`
/// by Cephes' `logf` polynomial in `f`. Subnormal inputs are scaled by 2^23 first.
/// 0 gives -infinity, a negative number or NaN gives NaN, infinity stays infinity.
#[inline(always)]
pub(crate) fn ln_with<const FMA: bool>(x: f32) -> f32 {
    let fma = mul_add::<FMA>;
    let tiny = x < f32::MIN_POSITIVE;
    let bits = if tiny { x * 8_388_608.0 } else { x }.to_bits();
    // The mantissa as a number in [1, 2), then halved (and e raised) above sqrt(2).
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    let big = m > std::f32::consts::SQRT_2;
    let m = if big { m * 0.5 } else { m };
    let e = ((bits >> 23) & 0xff) as i32 - 127 + i32::from(big) - if tiny { 23 } else { 0 };
    let e = e as f32;
    let f = m - 1.0;
    let z = f * f;
    let mut p = 7.037_683_6e-2;
    for c in [-1.151_461_0e-1, 1.167_699_9e-1, -1.242_014_1e-1, 1.424_932_3e-1, -1.666_805_8e-1, 2.000_071_5e-1,
              -2.499_999_4e-1, 3.333_333_1e-1] {
        p = fma(p, f, c);
    }
    // ln 2 split in two (as in `exp`), the small part added before the large one.
    let y = fma(e, -2.121_944_4e-4, p * f * z);
    let r = fma(e, 0.693_359_4, f + fma(z, -0.5, y));
    let r = if x == f32::INFINITY { x } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    if x < 0.0 || x.is_nan() { f32::NAN } else { r }
}

/// `a * b + c`. In code compiled with FMA (`FMA` true: the `#[target_feature(enable = "fma")]`
/// versions of a kernel) one instruction and one rounding; otherwise a multiply and an add,
/// because there `f32::mul_add` is a call to libm's `fmaf` per element. Rust never fuses
/// `a * b + c` by itself (it would change results), so without this the AVX versions of `exp`
/// spent a third of their instructions on separate multiplies and adds.
#[inline(always)]
pub(crate) fn mul_add<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
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
    fn fused_exp_within_two_ulp() {
        // `mul_add` without FMA hardware is libm's `fmaf`: slow, but the same results.
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp_with::<true>(x), f64::from(x).exp() as f32);
            assert!((got.to_bits() as i64 - want.to_bits() as i64).abs() <= 2, "exp({x}) = {got}, expected {want}");
            x += 0.0137;
        }
        assert_eq!((exp_with::<true>(-100.0), exp_with::<true>(f32::INFINITY)), (0.0, f32::INFINITY));
        assert!(exp_with::<true>(f32::NAN).is_nan());
    }

    #[test]
    fn ln_within_two_ulp_of_libm() {
        // From subnormals to the largest float, both with and without fused multiply-adds.
        let mut x = 1e-44f32;
        while x < f32::MAX / 1.01 {
            let want = f64::from(x).ln() as f32;
            for got in [ln_with::<false>(x), ln_with::<true>(x)] {
                let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(ulps <= 2 || (got - want).abs() < 1e-7, "ln({x}) = {got}, expected {want} ({ulps} ulp)");
            }
            x = (x * 1.0009).max(f32::from_bits(x.to_bits() + 1)); // subnormals: at least a step
        }
        assert_eq!((ln_with::<true>(1.0), ln_with::<true>(0.0)), (0.0, f32::NEG_INFINITY));
        assert_eq!(ln_with::<true>(f32::INFINITY), f32::INFINITY);
        assert!(ln_with::<true>(-1.0).is_nan() && ln_with::<false>(f32::NAN).is_nan());
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
}

// ANCHOR: sincos
/// `(sin 2πt, cos 2πt)` for `t` in [0, 1) ("turns"), vectorisable: the quadrant from `4t`,
/// then Taylor polynomials around the middle of the quadrant (|x| <= π/4, error < 4e-7).
/// Box-Muller's angle and Cauchy's tangent need nothing else.
#[inline(always)]
pub(crate) fn sincos_turns<const FMA: bool>(t: f32) -> (f32, f32) {
    let fma = mul_add::<FMA>;
    let q4 = t * 4.0;
    let q = (q4 as i32) & 3; // t >= 0: truncation is the floor
    let x = (q4 - q4 as i32 as f32 - 0.5) * std::f32::consts::FRAC_PI_2;
    let x2 = x * x;
    let s = x * fma(x2, fma(x2, fma(x2, -1.0 / 5040.0, 1.0 / 120.0), -1.0 / 6.0), 1.0);
    let c = fma(x2, fma(x2, fma(x2, fma(x2, 1.0 / 40320.0, -1.0 / 720.0), 1.0 / 24.0), -0.5), 1.0);
    // The angle is π/4 + x within the quadrant.
    let (sin, cos) = ((s + c) * std::f32::consts::FRAC_1_SQRT_2, (c - s) * std::f32::consts::FRAC_1_SQRT_2);
    // Quadrant q adds qπ/2: (sin, cos) -> (cos, -sin) -> (-sin, -cos) -> (-cos, sin).
    let swap = q & 1 == 1;
    let (a, b) = if swap { (cos, sin) } else { (sin, cos) };
    let sin_sign = if q >= 2 { -1.0 } else { 1.0 };
    let cos_sign = if q == 1 || q == 2 { -1.0 } else { 1.0 };
    (a * sin_sign, b * cos_sign)
}
// ANCHOR_END: sincos

/// The inverse error function in float32 (Giles, "Approximating the erfinv function", 2010:
/// two polynomials in `w = -ln(1 - x^2)`), refined by one Newton step on `erf`. ±1 give ±inf,
/// outside [-1, 1] NaN, as on CPU.
#[inline(always)]
pub(crate) fn erfinv(x: f32) -> f32 {
    let xd = f64::from(x);
    let w = -((1.0 - xd) * (1.0 + xd)).ln();
    let p = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.810_226_36e-08;
        for c in [3.432_739_39e-07, -3.523_387_7e-06, -4.391_506_54e-06, 0.000_218_580_87, -0.001_253_725_03,
                  -0.004_177_681_64, 0.246_640_727, 1.501_409_41] {
            p = p * w + c;
        }
        p
    } else {
        let w = w.sqrt() - 3.0;
        let mut p = -0.000_200_214_257;
        for c in [0.000_100_950_558, 0.001_349_343_22, -0.003_673_428_44, 0.005_739_507_73, -0.007_622_461_3,
                  0.009_438_870_47, 1.001_674_06, 2.832_976_82] {
            p = p * w + c;
        }
        p
    };
    let mut y = p * xd;
    if y.abs() < 2.5 {
        // One Newton step: erf(y) - x = 0, erf'(y) = 2/sqrt(pi) exp(-y^2).
        let err = libm_erf(y) - xd;
        y -= err / (std::f64::consts::FRAC_2_SQRT_PI * (-y * y).exp());
    }
    if xd == 1.0 { f32::INFINITY } else if xd == -1.0 { f32::NEG_INFINITY } else if xd.abs() > 1.0 || x.is_nan() { f32::NAN } else { y as f32 }
}

/// erf in float64 (Abramowitz and Stegun 7.1.26 is too coarse for a Newton step): the series
/// below 2.5, the continued fraction's asymptote above.
fn libm_erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(x) = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1))
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        std::f64::consts::FRAC_2_SQRT_PI * sum
    } else {
        // erfc(x) ~ exp(-x^2) / (x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6))
        let z = 1.0 / (a * a);
        1.0 - (-a * a).exp() / (a * std::f64::consts::PI.sqrt()) * (1.0 - z / 2.0 + 0.75 * z * z - 1.875 * z * z * z)
    };
    r.copysign(x)
}

/// `a · b`, in eight partial sums (the compiler keeps them in one vector register; a single
/// running sum would be a chain of dependent adds).
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, ar) = a.as_chunks::<8>();
    let (bc, br) = b.as_chunks::<8>();
    for (x, y) in ac.iter().zip(bc) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + ar.iter().zip(br).map(|(x, y)| x * y).sum::<f32>()
}
