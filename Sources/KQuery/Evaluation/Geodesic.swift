#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Distances on the WGS84 ellipsoid (a = 6378137 m, f = 1/298.257223563).
///
/// `distance` solves the inverse geodesic problem with Karney's algorithm
/// (C. F. F. Karney, "Algorithms for geodesics", J. Geodesy 87, 43–55, 2013), the
/// method behind GeographicLib: series in the third flattening n to order 6, Newton's
/// method on the azimuth at the first point (with a bisection fallback), and the astroid
/// solution as the starting guess for nearly antipodal points. It converges for every
/// pair of points, including the antipodal cases where Vincenty's method fails. Against
/// GeographicLib (the algorithm's own error is about 15 nm) it agrees to about 1e-8 m,
/// i.e. to the last bit or two of s12. Only the length s12 is produced: no azimuths, area
/// or direct problem, and the hot path performs no allocation.
///
/// Input conventions (all three functions):
/// - Angles are in degrees. Longitudes may be any finite value (they are reduced
///   modulo 360 exactly).
/// - Latitudes outside [-90, 90] are **not** clamped: they are treated as invalid, like
///   GeographicLib does, so `distance` returns `.nan`, `isDistance` returns `false` and
///   `boundingBox` returns NaN bounds.
/// - Non-finite inputs (NaN, ±infinity) never trap or loop: `distance` returns `.nan`
///   and `isDistance` returns `false`.
/// - Altitude is not modelled; points are on the ellipsoid surface.
public enum Geodesic {
    // MARK: - Ellipsoid constants (all constant-folded by the optimizer)

    /// Equatorial radius in metres.
    @inline(__always) private static var a: Double { 6_378_137 }
    /// Flattening.
    @inline(__always) private static var f: Double { 1 / 298.257223563 }
    /// 1 - f, the polar/equatorial axis ratio.
    @inline(__always) private static var f1: Double { 1 - f }
    /// Second eccentricity squared.
    @inline(__always) private static var ep2: Double { f * (2 - f) / (f1 * f1) }
    /// Third flattening.
    @inline(__always) private static var n: Double { f / (2 - f) }
    /// Polar semi-axis in metres.
    @inline(__always) private static var b: Double { a * f1 }

    // Tolerances, as in GeographicLib.
    @inline(__always) private static var tiny: Double { Double.leastNormalMagnitude.squareRoot() }
    @inline(__always) private static var tol0: Double { Double.ulpOfOne }
    @inline(__always) private static var tol1: Double { 200 * tol0 }
    @inline(__always) private static var tol2: Double { tol0.squareRoot() }
    @inline(__always) private static var tolb: Double { tol0 }
    @inline(__always) private static var xthresh: Double { 1000 * tol2 }
    /// Threshold on sigma12 below which the short-line (spherical with mean radius) solution is used.
    @inline(__always) private static var etol2: Double { 0.1 * tol2 / (f * (1 - f / 2) / 2).squareRoot() }
    /// Newton iterations before falling back to bisection; total iteration cap.
    private static let maxit1 = 20
    private static let maxit2 = maxit1 + Double.significandBitCount + 1 + 10

    // MARK: - Public API

    /// Geodesic distance in metres between two points given in degrees.
    ///
    /// Returns `.nan` if any input is non-finite or a latitude lies outside [-90, 90].
    /// Coincident points give 0.
    public static func distance(latitude1: Double, longitude1: Double, latitude2: Double, longitude2: Double) -> Double {
        guard abs(latitude1) <= 90, abs(latitude2) <= 90, longitude1.isFinite, longitude2.isFinite else {
            return .nan  // also catches NaN latitudes (comparisons with NaN are false)
        }
        return inverse(latitude1, longitude1, latitude2, longitude2)
    }

    /// `distance(...) < radius`, strict.
    ///
    /// Most calls are settled by an exact inequality that costs a few dozen floating-point
    /// operations and no library calls; the full geodesic is computed only when that bound
    /// cannot decide.
    ///
    /// **Bound.** The ellipsoid is the image of the sphere of radius `a` under the linear map
    /// diag(1, 1, 1 − f), and a point of geodetic latitude φ corresponds to the sphere point of
    /// *reduced* (parametric) latitude β, tan β = (1 − f) tan φ, at the same longitude. A linear
    /// map stretches every tangent vector by a factor between its smallest and largest singular
    /// values, 1 − f and 1, so every curve's length on the ellipsoid lies between `b` and `a` times
    /// the length of its preimage on the unit sphere. Applying this to the preimage of the
    /// ellipsoidal geodesic and to the image of the spherical great circle gives, with σ the
    /// central angle between the reduced-latitude points,
    ///
    ///     b·σ ≤ s12 ≤ a·σ        (a/b = 1/(1 − f) ≈ 1.00336).
    ///
    /// That is a ±0.17 % band, three times narrower than the one from the ratio of the extreme
    /// radii of curvature on the geodetic-latitude sphere, (1 − f)⁻³ ≈ 1.0101 (±0.5 %).
    ///
    /// **Evaluation.** With p₁, p₂ the unit vectors, chord = |p₁ − p₂| and anti = |p₁ + p₂| are
    /// computed from sums of non-negative terms,
    /// |p₁ ∓ p₂|² = (cos β₁ − cos β₂)² + (sin β₁ ∓ sin β₂)² + 4 cos β₁ cos β₂ (sin² | cos²)(Δλ/2),
    /// so they are well conditioned at every separation, antipodes included. σ = 2·atan2(chord, anti),
    /// and the call-free enclosure chord ≤ σ ≤ 2·chord/anti (used for σ ≤ 90°) usually decides
    /// without evaluating the atan2.
    ///
    /// **Numerical slack.** sin β, cos β come from Taylor polynomials on [−45°, 45°] (truncation
    /// < 5e-17) and carry absolute errors ≲ 1e-15; chord, anti and σ then err by ≲ 2e-14 rad
    /// (≈ 0.1 µm on the Earth). Every bound is widened by 1e-12 relative plus 1e-12 rad absolute
    /// (≈ 6 µm): 50× that rounding error and 400× the ≈ 15 nm by which the exact `distance` may
    /// differ from the true geodesic, so the bound's verdict always equals
    /// `distance(...) < radius`. Only radii in the interval (b·σ, a·σ), about 0.34 % of the distance
    /// wide, reach the exact computation.
    ///
    /// Returns `false` for non-finite coordinates, latitudes outside [-90, 90], a NaN radius, or
    /// `radius <= 0`.
    public static func isDistance(
        latitude1: Double, longitude1: Double, latitude2: Double, longitude2: Double, lessThan radius: Double
    ) -> Bool {
        guard radius > 0, abs(latitude1) <= 90, abs(latitude2) <= 90, longitude1.isFinite, longitude2.isFinite else {
            return false
        }
        let (chord2, anti2) = auxiliaryChords(latitude1, longitude1, latitude2, longitude2)
        let chord = chord2.squareRoot(), anti = anti2.squareRoot()
        let slackRelative = 1e-12
        let slackAbsolute = 1e-12  // radians on the auxiliary sphere, ≈ 6.4 µm
        // Call-free bounds first: chord <= sigma = 2·atan(chord/anti) <= 2·chord/anti. The upper
        // one is only used for sigma <= 90° (anti >= √2), where the quotient is well conditioned.
        if b * (chord * (1 - slackRelative) - slackAbsolute) >= radius { return false }
        if chord2 <= 2 && a * (2 * chord / anti * (1 + slackRelative) + slackAbsolute) < radius { return true }
        let sigma = 2 * atan2(chord, anti)
        if a * (sigma * (1 + slackRelative) + slackAbsolute) < radius { return true }
        if b * (sigma * (1 - slackRelative) - slackAbsolute) >= radius { return false }
        return inverse(latitude1, longitude1, latitude2, longitude2) < radius
    }

    /// A latitude/longitude box guaranteed to contain every point within `radius` metres of the centre
    /// (conservative: slightly larger is fine, smaller never). Longitudes may wrap: when the box crosses
    /// the antimeridian, minLongitude > maxLongitude. Near a pole (or radius large enough) the box covers
    /// all longitudes (-180...180).
    ///
    /// Every point within geodesic distance `radius` lies within central angle radius/b of the centre
    /// on the reduced-latitude sphere (see `isDistance`), so the box is that spherical cap's box, mapped
    /// back to geodetic latitudes, widened by 1e-12 relative + 1e-12 rad in angle and 1e-9° on each side.
    /// When the cap reaches a pole the longitudes are -180...180 and the latitude range extends to
    /// that pole. Longitude bounds are in [-180, 180]. A negative radius is treated as 0; non-finite
    /// centre coordinates, a latitude outside [-90, 90] or a NaN radius give NaN bounds.
    public static func boundingBox(
        latitude: Double, longitude: Double, radius: Double
    ) -> (minLatitude: Double, maxLatitude: Double, minLongitude: Double, maxLongitude: Double) {
        guard abs(latitude) <= 90, longitude.isFinite, !radius.isNaN else {
            return (.nan, .nan, .nan, .nan)
        }
        let slackDegrees = 1e-9
        let sigma = max(radius, 0) / b * (1 + 1e-12) + 1e-12  // may be +infinity
        let halfPi = Double.pi / 2
        let (sphi, cphi) = sinCosDegrees(latitude)
        let beta0 = atan2(f1 * sphi, cphi)
        let betaMin = beta0 - sigma
        let betaMax = beta0 + sigma
        let minLatitude = betaMin <= -halfPi ? -90 : max(-90, geodeticLatitude(betaMin) - slackDegrees)
        let maxLatitude = betaMax >= halfPi ? 90 : min(90, geodeticLatitude(betaMax) + slackDegrees)
        if betaMin <= -halfPi || betaMax >= halfPi {
            return (minLatitude, maxLatitude, -180, 180)
        }
        // The cap does not contain a pole: sigma + |beta0| < pi/2, so sin(sigma) < cos(beta0).
        let ratio = min(1, sin(sigma) / cos(beta0))
        let halfWidth = asin(ratio) * (180 / Double.pi) + slackDegrees  // at most 90° + slack
        let lon0 = longitude.remainder(dividingBy: 360)  // exact, in [-180, 180]
        var minLongitude = lon0 - halfWidth
        var maxLongitude = lon0 + halfWidth
        if minLongitude < -180 { minLongitude += 360 }
        if maxLongitude > 180 { maxLongitude -= 360 }
        return (minLatitude, maxLatitude, minLongitude, maxLongitude)
    }

    // MARK: - Spherical bound helpers

    /// Squared chords |p₁ − p₂|² and |p₁ + p₂|² between the two points' images p₁, p₂ on the
    /// reduced-latitude unit sphere (they sum to 4; the central angle is 2·atan2 of their roots).
    /// Each is computed from non-negative terms, with absolute error below 1e-14.
    /// Inputs must be finite with |latitude| <= 90.
    @inline(__always)
    private static func auxiliaryChords(
        _ lat1: Double, _ lon1: Double, _ lat2: Double, _ lon2: Double
    ) -> (chord2: Double, anti2: Double) {
        let (sb1, cb1) = reducedLatitude(lat1)
        let (sb2, cb2) = reducedLatitude(lat2)
        // Longitude difference: exact reduction of out-of-range values, then one rounding
        // (absolute error <= 2.9e-14 degrees, i.e. 5e-16 rad).
        var l1 = lon1, l2 = lon2
        if abs(l1) > 180 { l1 = l1.remainder(dividingBy: 360) }
        if abs(l2) > 180 { l2 = l2.remainder(dividingBy: 360) }
        // sin²(Δλ/2) has period 360° and is even and symmetric about 90°: fold Δλ/2 into [0, 90].
        var half = abs(l2 - l1) / 2  // in [0, 180]
        if half > 90 { half = 180 - half }  // exact (Sterbenz)
        let h: Double  // sin²(Δλ/2)
        if half <= 45 {
            let s = sinCosSmall(half * (Double.pi / 180)).sin
            h = s * s
        } else {
            let c = sinCosSmall((90 - half) * (Double.pi / 180)).cos  // 90 - half is exact
            h = c * c
        }
        // |p1 ∓ p2|² = (cos β1 − cos β2)² + (sin β1 ∓ sin β2)² + 4 cos β1 cos β2 · (sin² | cos²)(Δλ/2)
        let p = 4 * cb1 * cb2
        let dc = (cb1 - cb2) * (cb1 - cb2)
        let chord2 = dc + (sb1 - sb2) * (sb1 - sb2) + p * h
        let anti2 = dc + (sb1 + sb2) * (sb1 + sb2) + p * (1 - h)
        return (chord2, anti2)
    }

    /// (sin β, cos β) of the reduced latitude for a geodetic latitude in degrees, |latitude| <= 90,
    /// each with absolute error below 1e-15.
    @inline(__always)
    private static func reducedLatitude(_ latitude: Double) -> (Double, Double) {
        let x = abs(latitude)
        var s: Double, c: Double
        if x <= 45 {
            (s, c) = sinCosSmall(x * (Double.pi / 180))
        } else {
            (c, s) = sinCosSmall((90 - x) * (Double.pi / 180))  // 90 - x is exact (Sterbenz)
        }
        s = Double(signOf: latitude, magnitudeOf: f1 * s)
        let r = (s * s + c * c).squareRoot()  // in [1 - f, 1]: no overflow or underflow
        return (s / r, c / r)
    }

    /// sin x and cos x for |x| <= π/4 by their Taylor polynomials (through x¹⁵ and x¹⁶; the
    /// truncation errors are below 5e-17 and 2e-18), so each result has an absolute error of a
    /// few 1e-17 plus rounding (a few ulps). Branch- and call-free, unlike libm's sin/cos.
    @inline(__always)
    private static func sinCosSmall(_ x: Double) -> (sin: Double, cos: Double) {
        let z = x * x
        var s = -1.0 / 1_307_674_368_000  // -1/15!
        s = s * z + 1.0 / 6_227_020_800
        s = s * z - 1.0 / 39_916_800
        s = s * z + 1.0 / 362_880
        s = s * z - 1.0 / 5_040
        s = s * z + 1.0 / 120
        s = s * z - 1.0 / 6
        var c = 1.0 / 20_922_789_888_000  // 1/16!
        c = c * z - 1.0 / 87_178_291_200
        c = c * z + 1.0 / 479_001_600
        c = c * z - 1.0 / 3_628_800
        c = c * z + 1.0 / 40_320
        c = c * z - 1.0 / 720
        c = c * z + 1.0 / 24
        c = c * z - 0.5
        return (x + x * (z * s), 1 + z * c)
    }

    /// Geodetic latitude in degrees for a reduced latitude in radians, |beta| < pi/2.
    private static func geodeticLatitude(_ beta: Double) -> Double {
        atan2(sin(beta), f1 * cos(beta)) * (180 / Double.pi)
    }

    // MARK: - Angle utilities (exact reductions as in GeographicLib)

    /// Error-free transformation: s = fl(u + v), and u + v = s + t exactly.
    @inline(__always)
    private static func twoSum(_ u: Double, _ v: Double) -> (s: Double, t: Double) {
        let s = u + v
        var up = s - v
        var vpp = s - up
        up -= u
        vpp -= v
        return (s, s == 0 ? s : 0 - (up + vpp))
    }

    /// IEEE remainder of x by 360 (exact), skipping the library call in the common ranges.
    @inline(__always)
    private static func remainder360(_ x: Double) -> Double {
        let y = abs(x)
        if y <= 180 { return x }
        // For 180 < |x| < 540 the quotient rounds to ±1, and x ∓ 360 is exact (Sterbenz).
        if y < 540 { return x - Double(signOf: x, magnitudeOf: 360) }
        return x.remainder(dividingBy: 360)
    }

    /// y - x reduced to [-180, 180], as a rounded value d plus its exact error term t.
    @inline(__always)
    private static func angleDifference(_ x: Double, _ y: Double) -> (d: Double, t: Double) {
        let first = twoSum(remainder360(-x), remainder360(y))
        var (d, t) = twoSum(remainder360(first.s), first.t)
        if d == 0 || abs(d) == 180 {
            d = Double(signOf: t == 0 ? y - x : -t, magnitudeOf: d)
        }
        return (d, t)
    }

    /// Rounds tiny angles so that values below about 1/2^57 underflow to zero (avoids near-singular cases).
    @inline(__always)
    private static func roundAngle(_ x: Double) -> Double {
        let z = 1.0 / 16
        var y = abs(x)
        if y < z { y = z - (z - y) }
        return Double(signOf: x, magnitudeOf: y)
    }

    /// Applies the quadrant rotation q (mod 4) to (sin r, cos r).
    @inline(__always)
    private static func rotateQuadrant(_ q: Int, _ s: Double, _ c: Double, signOf x: Double) -> (Double, Double) {
        var (s, c) = (s, c)
        switch q & 3 {
        case 1: (s, c) = (c, -s)
        case 2: (s, c) = (-s, -c)
        case 3: (s, c) = (-c, s)
        default: break
        }
        c += 0  // -0 -> +0
        if s == 0 { s = Double(signOf: x, magnitudeOf: s) }
        return (s, c)
    }

    /// sin and cos of x degrees, |x| <= 90 (exact at multiples of 90).
    @inline(__always)
    private static func sinCosDegrees(_ x: Double) -> (Double, Double) {
        let q = Int((x / 90).rounded(.toNearestOrEven))
        let r = (x - 90 * Double(q)) * (Double.pi / 180)
        return rotateQuadrant(q, sin(r), cos(r), signOf: x)
    }

    /// sin and cos of (x + t) degrees, x in [-180, 180] and t a tiny correction.
    @inline(__always)
    private static func sinCosDegrees(_ x: Double, plus t: Double) -> (Double, Double) {
        let q = Int((x / 90).rounded(.toNearestOrEven))
        let r = roundAngle(x - 90 * Double(q) + t) * (Double.pi / 180)
        return rotateQuadrant(q, sin(r), cos(r), signOf: x)
    }

    /// sqrt(x² + y²). All arguments here are O(1), so the squares cannot overflow; libm's
    /// (slower) hypot is only needed when they might lose precision to underflow.
    @inline(__always)
    private static func hypotenuse(_ x: Double, _ y: Double) -> Double {
        let r2 = x * x + y * y
        return r2 >= 0x1p-960 ? r2.squareRoot() : hypot(x, y)  // NaN also goes to hypot
    }

    @inline(__always)
    private static func normalize(_ x: Double, _ y: Double) -> (Double, Double) {
        let r = hypotenuse(x, y)
        return (x / r, y / r)
    }

    @inline(__always)
    private static func sq(_ x: Double) -> Double { x * x }

    // MARK: - Series (order 6 in n and eps, coefficients from GeographicLib's expansions)

    private typealias Series6 = (Double, Double, Double, Double, Double, Double)
    private typealias Series5 = (Double, Double, Double, Double, Double)

    /// Sum of c_l sin(2 l x), l = 1...6, by Clenshaw summation, given sin x and cos x.
    @inline(__always)
    private static func sinSeries(_ sx: Double, _ cx: Double, _ c: Series6) -> Double {
        let ar = 2 * (cx - sx) * (cx + sx)  // 2 cos 2x
        var y1 = c.5
        var y0 = ar * y1 + c.4
        y1 = ar * y0 - y1 + c.3
        y0 = ar * y1 - y0 + c.2
        y1 = ar * y0 - y1 + c.1
        y0 = ar * y1 - y0 + c.0
        return 2 * sx * cx * y0
    }

    /// Sum of c_l sin(2 l x), l = 1...5, by Clenshaw summation, given sin x and cos x.
    @inline(__always)
    private static func sinSeries(_ sx: Double, _ cx: Double, _ c: Series5) -> Double {
        let ar = 2 * (cx - sx) * (cx + sx)
        var y0 = c.4
        var y1 = ar * y0 + c.3
        y0 = ar * y1 - y0 + c.2
        y1 = ar * y0 - y1 + c.1
        y0 = ar * y1 - y0 + c.0
        return 2 * sx * cx * y0
    }

    /// A1 - 1 (distance integral scale).
    @inline(__always)
    private static func a1m1(_ eps: Double) -> Double {
        let e2 = eps * eps
        let t = e2 * (e2 * (e2 + 4) + 64) / 256
        return (t + eps) / (1 - eps)
    }

    /// Coefficients C1_l of the distance integral.
    @inline(__always)
    private static func c1(_ eps: Double) -> Series6 {
        let e2 = eps * eps, e3 = e2 * eps, e4 = e2 * e2, e5 = e4 * eps, e6 = e4 * e2
        return (
            eps * ((6 - e2) * e2 - 16) / 32,
            e2 * ((64 - 9 * e2) * e2 - 128) / 2048,
            e3 * (9 * e2 - 16) / 768,
            e4 * (3 * e2 - 5) / 512,
            -7 * e5 / 1280,
            -7 * e6 / 2048
        )
    }

    /// A2 - 1 (reduced length integral scale).
    @inline(__always)
    private static func a2m1(_ eps: Double) -> Double {
        let e2 = eps * eps
        let t = e2 * (e2 * (-11 * e2 - 28) - 192) / 256
        return (t - eps) / (1 + eps)
    }

    /// Coefficients C2_l of the reduced length integral.
    @inline(__always)
    private static func c2(_ eps: Double) -> Series6 {
        let e2 = eps * eps, e3 = e2 * eps, e4 = e2 * e2, e5 = e4 * eps, e6 = e4 * e2
        return (
            eps * ((e2 + 2) * e2 + 16) / 32,
            e2 * ((35 * e2 + 64) * e2 + 384) / 2048,
            e3 * (15 * e2 + 80) / 768,
            e4 * (7 * e2 + 35) / 512,
            63 * e5 / 1280,
            77 * e6 / 2048
        )
    }

    /// A3 (longitude integral scale), coefficients are polynomials in n (folded at compile time).
    @inline(__always)
    private static func a3(_ eps: Double) -> Double {
        let k0 = -3.0 / 128
        let k1 = (-2 * n - 3) / 64
        let k2 = ((-n - 3) * n - 1) / 16
        let k3 = ((3 * n - 1) * n - 2) / 8
        let k4 = (n - 1) / 2
        return ((((k0 * eps + k1) * eps + k2) * eps + k3) * eps + k4) * eps + 1
    }

    /// Coefficients C3_l of the longitude integral.
    @inline(__always)
    private static func c3(_ eps: Double) -> Series5 {
        let x0 = 3.0 / 128, x1 = (2 * n + 5) / 128, x2 = ((3 - n) * n + 3) / 64
        let x3 = (1 - n * n) / 8, x4 = (1 - n) / 4
        let x5 = 5.0 / 256, x6 = (n + 3) / 128, x7 = ((-3 * n - 2) * n + 3) / 64, x8 = ((n - 3) * n + 2) / 32
        let x9 = 7.0 / 512, x10 = (9 - 10 * n) / 384, x11 = ((5 * n - 9) * n + 5) / 192
        let x12 = 7.0 / 512, x13 = (7 - 14 * n) / 512
        let x14 = 21.0 / 2560
        let e2 = eps * eps, e3 = e2 * eps, e4 = e2 * e2, e5 = e4 * eps
        return (
            eps * ((((x0 * eps + x1) * eps + x2) * eps + x3) * eps + x4),
            e2 * (((x5 * eps + x6) * eps + x7) * eps + x8),
            e3 * ((x9 * eps + x10) * eps + x11),
            e4 * (x12 * eps + x13),
            e5 * x14
        )
    }

    /// eps = (sqrt(1 + k²) - 1) / (sqrt(1 + k²) + 1), k² = ep2 cos² alpha0.
    @inline(__always)
    private static func epsilon(_ k2: Double) -> Double {
        k2 / (2 * (1 + (1 + k2).squareRoot()) + k2)
    }

    // MARK: - Inverse problem

    /// Reduced length m12 / b (for Newton's derivative and the meridian check), given eps.
    @inline(__always)
    private static func reducedLength(
        _ eps: Double, _ sig12: Double,
        _ ssig1: Double, _ csig1: Double, _ dn1: Double,
        _ ssig2: Double, _ csig2: Double, _ dn2: Double
    ) -> Double {
        let ca = c1(eps), cb = c2(eps)
        let a1 = a1m1(eps), a2 = a2m1(eps)
        let m0x = a1 - a2
        let p1 = 1 + a1, p2 = 1 + a2
        let cj: Series6 = (
            p1 * ca.0 - p2 * cb.0, p1 * ca.1 - p2 * cb.1, p1 * ca.2 - p2 * cb.2,
            p1 * ca.3 - p2 * cb.3, p1 * ca.4 - p2 * cb.4, p1 * ca.5 - p2 * cb.5
        )
        let j12 = m0x * sig12 + (sinSeries(ssig2, csig2, cj) - sinSeries(ssig1, csig1, cj))
        return dn2 * (csig1 * ssig2) - dn1 * (ssig1 * csig2) - csig1 * csig2 * j12
    }

    /// Distance s12 / b along the geodesic from sigma1 to sigma2, given eps.
    @inline(__always)
    private static func scaledLength(
        _ eps: Double, _ sig12: Double, _ ssig1: Double, _ csig1: Double, _ ssig2: Double, _ csig2: Double
    ) -> Double {
        let ca = c1(eps)
        let b1 = sinSeries(ssig2, csig2, ca) - sinSeries(ssig1, csig1, ca)
        return (1 + a1m1(eps)) * (sig12 + b1)
    }

    /// The positive root k of k^4 + 2k^3 - (x^2 + y^2 - 1)k^2 - 2y^2 k - y^2 = 0 (Karney 2013, eq. 55).
    private static func astroid(_ x: Double, _ y: Double) -> Double {
        let p = sq(x)
        let q = sq(y)
        let r = (p + q - 1) / 6
        guard !(q == 0 && r <= 0) else { return 0 }
        let s = p * q / 4
        let r2 = sq(r)
        let r3 = r * r2
        let disc = s * (s + 2 * r3)
        var u = r
        if disc >= 0 {
            var t3 = s + r3
            t3 += t3 < 0 ? -disc.squareRoot() : disc.squareRoot()
            let t = cbrt(t3)
            u += t + (t != 0 ? r2 / t : 0)
        } else {
            let ang = atan2((-disc).squareRoot(), -(s + r3))
            u += 2 * r * cos(ang / 3)
        }
        let v = (sq(u) + q).squareRoot()
        let uv = u < 0 ? q / (v - u) : u + v
        let w = (uv - q) / (2 * v)
        return uv / ((uv + sq(w)).squareRoot() + w)
    }

    private struct Start {
        var sig12: Double  // >= 0 when the short-line solution is final
        var salp1: Double
        var calp1: Double
        var dnm: Double
    }

    /// Starting azimuth for Newton's method, or the final answer for short lines.
    private static func inverseStart(
        _ sbet1: Double, _ cbet1: Double, _ sbet2: Double, _ cbet2: Double,
        _ lam12: Double, _ slam12: Double, _ clam12: Double
    ) -> Start {
        var result = Start(sig12: -1, salp1: 0, calp1: 0, dnm: .nan)
        let sbet12 = sbet2 * cbet1 - cbet2 * sbet1
        let cbet12 = cbet2 * cbet1 + sbet2 * sbet1
        let sbet12a = sbet2 * cbet1 + cbet2 * sbet1
        let shortline = cbet12 >= 0 && sbet12 < 0.5 && cbet2 * lam12 < 0.5
        var somg12: Double, comg12: Double
        if shortline {
            var sbetm2 = sq(sbet1 + sbet2)
            sbetm2 /= sbetm2 + sq(cbet1 + cbet2)
            result.dnm = (1 + ep2 * sbetm2).squareRoot()
            let omg12 = lam12 / (f1 * result.dnm)
            somg12 = sin(omg12)
            comg12 = cos(omg12)
        } else {
            somg12 = slam12
            comg12 = clam12
        }
        var salp1 = cbet2 * somg12
        var calp1 = comg12 >= 0
            ? sbet12 + cbet2 * sbet1 * sq(somg12) / (1 + comg12)
            : sbet12a - cbet2 * sbet1 * sq(somg12) / (1 - comg12)
        let ssig12 = hypotenuse(salp1, calp1)
        let csig12 = sbet1 * sbet2 + cbet1 * cbet2 * comg12

        if shortline && ssig12 < etol2 {
            result.sig12 = atan2(ssig12, csig12)  // final: s12 = sig12 * b * dnm
            return result
        } else if csig12 >= 0 || ssig12 >= 6 * abs(n) * Double.pi * sq(cbet1) {
            // Zeroth-order spherical approximation is adequate.
        } else {
            // Nearly antipodal: scale to the astroid problem (f > 0 branch).
            let lam12x = atan2(-slam12, -clam12)
            let k2 = sq(sbet1) * ep2
            let eps = epsilon(k2)
            let lamscale = f * cbet1 * a3(eps) * Double.pi
            let betscale = lamscale * cbet1
            let x = lam12x / lamscale
            let y = sbet12a / betscale
            if y > -tol1 && x > -1 - xthresh {
                salp1 = min(1, -x)
                calp1 = -(1 - sq(salp1)).squareRoot()
            } else {
                let k = astroid(x, y)
                let omg12a = lamscale * (-x * k / (1 + k))
                somg12 = sin(omg12a)
                comg12 = -cos(omg12a)
                salp1 = cbet2 * somg12
                calp1 = sbet12a - cbet2 * sbet1 * sq(somg12) / (1 - comg12)
            }
        }
        if salp1 > 0 {
            (result.salp1, result.calp1) = normalize(salp1, calp1)
        } else {  // salp1 <= 0 (or NaN, which cannot arise from finite inputs)
            result.salp1 = 1
            result.calp1 = 0
        }
        return result
    }

    private struct Lambda {
        var lam12: Double  // longitude error for this alpha1
        var sig12: Double
        var ssig1: Double, csig1: Double
        var ssig2: Double, csig2: Double
        var eps: Double
        var dlam12: Double  // derivative d lam12 / d alpha1 (NaN if not requested)
    }

    /// Solves the hybrid problem: given alpha1, the longitude difference error and its derivative.
    @inline(__always)
    private static func lambda12(
        _ sbet1: Double, _ cbet1: Double, _ dn1: Double,
        _ sbet2: Double, _ cbet2: Double, _ dn2: Double,
        _ salp1: Double, _ calp1In: Double,
        _ slam120: Double, _ clam120: Double, derivative: Bool
    ) -> Lambda {
        var calp1 = calp1In
        if sbet1 == 0 && calp1 == 0 { calp1 = -tiny }  // break degeneracy of equatorial line
        let salp0 = salp1 * cbet1
        let calp0 = hypotenuse(calp1, salp1 * sbet1)
        let (ssig1, csig1) = normalize(sbet1, calp1 * cbet1)
        let somg1 = salp0 * sbet1
        let comg1 = calp1 * cbet1

        // alpha2 from Clairaut's relation; calp2 computed to avoid cancellation.
        let calp2: Double
        if cbet2 != cbet1 || abs(sbet2) != -sbet1 {
            let d = cbet1 < -sbet1 ? (cbet2 - cbet1) * (cbet1 + cbet2) : (sbet1 - sbet2) * (sbet1 + sbet2)
            calp2 = (sq(calp1 * cbet1) + d).squareRoot() / cbet2
        } else {
            calp2 = abs(calp1)
        }
        let somg2 = salp0 * sbet2
        let comg2 = calp2 * cbet2
        let (ssig2, csig2) = normalize(sbet2, comg2)

        let sig12 = atan2(max(0, csig1 * ssig2 - ssig1 * csig2) + 0, csig1 * csig2 + ssig1 * ssig2)
        let somg12 = max(0, comg1 * somg2 - somg1 * comg2) + 0
        let comg12 = comg1 * comg2 + somg1 * somg2
        // eta = omg12 - lam120
        let eta = atan2(somg12 * clam120 - comg12 * slam120, comg12 * clam120 + somg12 * slam120)
        let eps = epsilon(sq(calp0) * ep2)
        let cc = c3(eps)
        let b312 = sinSeries(ssig2, csig2, cc) - sinSeries(ssig1, csig1, cc)
        let domg12 = -f * a3(eps) * salp0 * (sig12 + b312)
        let lam12 = eta + domg12

        var dlam12 = Double.nan
        if derivative {
            if calp2 == 0 {
                dlam12 = -2 * f1 * dn1 / sbet1
            } else {
                dlam12 = reducedLength(eps, sig12, ssig1, csig1, dn1, ssig2, csig2, dn2) * f1 / (calp2 * cbet2)
            }
        }
        return Lambda(
            lam12: lam12, sig12: sig12,
            ssig1: ssig1, csig1: csig1, ssig2: ssig2, csig2: csig2, eps: eps, dlam12: dlam12
        )
    }

    /// Inverse geodesic problem, distance only. Inputs: finite, |lat| <= 90.
    private static func inverse(_ lat1In: Double, _ lon1: Double, _ lat2In: Double, _ lon2: Double) -> Double {
        // Longitude difference, made non-negative (the distance is symmetric under reflection).
        var (lon12, lon12s) = angleDifference(lon1, lon2)
        if lon12.sign == .minus {
            lon12 = -lon12
            lon12s = -lon12s
        }
        let lam12 = lon12 * (Double.pi / 180)
        let (slam12, clam12) = sinCosDegrees(lon12, plus: lon12s)
        lon12s = (180 - lon12) - lon12s  // supplementary longitude difference

        // Order the points so that |lat1| >= |lat2|, then make lat1 <= 0.
        var lat1 = roundAngle(lat1In)
        var lat2 = roundAngle(lat2In)
        if abs(lat1) < abs(lat2) { swap(&lat1, &lat2) }
        if lat1.sign == .plus {  // latsign = copysign(1, -lat1)
            lat1 = -lat1
            lat2 = -lat2
        }

        // Reduced latitudes beta; cos beta clamped away from zero at the poles.
        var (sbet1, cbet1) = sinCosDegrees(lat1)
        (sbet1, cbet1) = normalize(f1 * sbet1, cbet1)
        cbet1 = max(tiny, cbet1)
        var (sbet2, cbet2) = sinCosDegrees(lat2)
        (sbet2, cbet2) = normalize(f1 * sbet2, cbet2)
        cbet2 = max(tiny, cbet2)
        // Make equal (or opposite) latitudes exactly equal in beta, as GeographicLib does.
        if cbet1 < -sbet1 {
            if cbet2 == cbet1 { sbet2 = Double(signOf: sbet2, magnitudeOf: sbet1) }
        } else if abs(sbet2) == -sbet1 {
            cbet2 = cbet1
        }
        let dn1 = (1 + ep2 * sq(sbet1)).squareRoot()
        let dn2 = (1 + ep2 * sq(sbet2)).squareRoot()

        // Meridional geodesic (also: point 1 at a pole).
        if lat1 == -90 || slam12 == 0 {
            let calp1 = clam12
            let ssig1 = sbet1, csig1 = calp1 * cbet1
            let ssig2 = sbet2, csig2 = cbet2  // calp2 = 1
            let sig12 = atan2(max(0, csig1 * ssig2 - ssig1 * csig2) + 0, csig1 * csig2 + ssig1 * ssig2)
            let s12x = scaledLength(n, sig12, ssig1, csig1, ssig2, csig2)
            let m12x = reducedLength(n, sig12, ssig1, csig1, dn1, ssig2, csig2, dn2)
            // m12 < 0 means the meridian is not the shortest path (possible when nearly antipodal).
            if sig12 < tol2 || m12x >= 0 {
                if sig12 < 3 * tiny || (sig12 < tol0 && (s12x < 0 || m12x < 0)) {
                    return 0  // coincident (to rounding)
                }
                return 0 + s12x * b
            }
        }

        // Equatorial geodesic (both points on the equator and not too far apart).
        if sbet1 == 0 && lon12s >= f * 180 {
            return 0 + a * lam12
        }

        // General case.
        let start = inverseStart(sbet1, cbet1, sbet2, cbet2, lam12, slam12, clam12)
        if start.sig12 >= 0 {
            return 0 + start.sig12 * b * start.dnm
        }

        var salp1 = start.salp1, calp1 = start.calp1
        var numit = 0
        var tripn = false, tripb = false
        var salp1a = tiny, calp1a = 1.0  // bracket [alp1a, alp1b] for bisection
        var salp1b = tiny, calp1b = -1.0
        var lam: Lambda
        while true {
            lam = lambda12(
                sbet1, cbet1, dn1, sbet2, cbet2, dn2, salp1, calp1, slam12, clam12,
                derivative: numit < maxit1)
            let v = lam.lam12
            if tripb || !(abs(v) >= (tripn ? 8 : 1) * tol0) || numit == maxit2 { break }
            // Update the bracket.
            if v > 0 && (numit > maxit1 || calp1 / salp1 > calp1b / salp1b) {
                salp1b = salp1
                calp1b = calp1
            } else if v < 0 && (numit > maxit1 || calp1 / salp1 < calp1a / salp1a) {
                salp1a = salp1
                calp1a = calp1
            }
            numit += 1
            if numit < maxit1 && lam.dlam12 > 0 {
                let dalp1 = -v / lam.dlam12
                if abs(dalp1) < Double.pi {
                    let sdalp1 = sin(dalp1), cdalp1 = cos(dalp1)
                    let nsalp1 = salp1 * cdalp1 + calp1 * sdalp1
                    if nsalp1 > 0 {
                        calp1 = calp1 * cdalp1 - salp1 * sdalp1
                        salp1 = nsalp1
                        (salp1, calp1) = normalize(salp1, calp1)
                        tripn = abs(v) <= 16 * tol0
                        continue
                    }
                }
            }
            // Newton failed or overshot: bisect.
            (salp1, calp1) = normalize((salp1a + salp1b) / 2, (calp1a + calp1b) / 2)
            tripn = false
            tripb = abs(salp1a - salp1) + (calp1a - calp1) < tolb || abs(salp1 - salp1b) + (calp1 - calp1b) < tolb
        }
        let s12x = scaledLength(lam.eps, lam.sig12, lam.ssig1, lam.csig1, lam.ssig2, lam.csig2)
        return 0 + s12x * b
    }
}
