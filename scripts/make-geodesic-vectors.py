#!/usr/bin/env python3
"""Generate extra WGS84 geodesic test vectors focused on the hard cases.

Writes Tests/KQueryTests/Fixtures/geodesic-extra.csv (columns lat1,lon1,lat2,lon2,s12_m),
with distances from GeographicLib's Python port (`pip install geographiclib`) as the oracle.
Coordinates are written with repr() so they round-trip exactly to the same binary doubles;
s12 is written with 9 decimals (nanometres). Deterministic: fixed seed, fixed order.

Usage: python3 scripts/make-geodesic-vectors.py [output.csv]
"""

import math
import random
import sys
from pathlib import Path

from geographiclib.geodesic import Geodesic

SEED = 20240617
WGS84 = Geodesic.WGS84  # a = 6378137 m, f = 1/298.257223563


def log_uniform(rng, lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def signed(rng, x):
    return x if rng.random() < 0.5 else -x


def wrap_lon(x):
    """Reduce to [-180, 180] (keeps the generated inputs conventional)."""
    y = math.remainder(x, 360.0)
    return y


def clamp_lat(x):
    return max(-90.0, min(90.0, x))


def nearly_antipodal(rng, count):
    # Second point within 1e-6 .. 1 degree of the antipode of the first one.
    rows = []
    for i in range(count):
        lat1 = rng.uniform(-89.0, 89.0) if i % 4 else rng.choice([0.0, rng.uniform(-1, 1)])
        lon1 = rng.uniform(-180.0, 180.0)
        dlat = signed(rng, log_uniform(rng, 1e-6, 1.0)) if i % 3 else 0.0
        dlon = signed(rng, log_uniform(rng, 1e-6, 1.0)) if i % 5 else 0.0
        lat2 = clamp_lat(-lat1 + dlat)
        lon2 = wrap_lon(lon1 + 180.0 + dlon)
        rows.append((lat1, lon1, lat2, lon2))
    return rows


def near_poles(rng, count):
    rows = []
    for i in range(count):
        d1 = log_uniform(rng, 1e-9, 1.0)
        d2 = log_uniform(rng, 1e-9, 1.0)
        kind = i % 5
        if kind == 0:  # both near the same pole
            lat1, lat2 = 90.0 - d1, 90.0 - d2
        elif kind == 1:  # near opposite poles
            lat1, lat2 = 90.0 - d1, -90.0 + d2
        elif kind == 2:  # exactly at a pole and near a pole
            lat1, lat2 = rng.choice([90.0, -90.0]), signed(rng, 90.0 - d2)
        elif kind == 3:  # both near the south pole
            lat1, lat2 = -90.0 + d1, -90.0 + d2
        else:  # pole to anywhere
            lat1, lat2 = rng.choice([90.0, -90.0]), rng.uniform(-90.0, 90.0)
        lon1 = rng.uniform(-180.0, 180.0)
        lon2 = rng.uniform(-180.0, 180.0) if i % 2 else wrap_lon(lon1 + 180.0 - d1)
        rows.append((lat1, lon1, lat2, lon2))
    return rows


def equatorial_near_180(rng, count):
    # Points on or very near the equator, about 180 degrees apart in longitude. Around
    # dlon = (1 - f) * 180 = 179.3965 the shortest path stops following the equator.
    rows = []
    flat_limit = (1 - WGS84.f) * 180.0
    for i in range(count):
        kind = i % 4
        lon1 = rng.uniform(-180.0, 180.0)
        if kind == 0:
            lat1 = lat2 = 0.0
            dlon = rng.uniform(179.0, 180.0)
        elif kind == 1:
            lat1 = lat2 = 0.0
            dlon = flat_limit + signed(rng, log_uniform(rng, 1e-9, 1e-2))
        elif kind == 2:
            lat1 = signed(rng, log_uniform(rng, 1e-9, 1e-1))
            lat2 = signed(rng, log_uniform(rng, 1e-9, 1e-1))
            dlon = rng.uniform(179.0, 180.0)
        else:
            lat1 = signed(rng, log_uniform(rng, 1e-9, 1e-1))
            lat2 = 0.0
            dlon = 180.0 - log_uniform(rng, 1e-9, 1.0)
        lon2 = wrap_lon(lon1 + signed(rng, dlon))
        rows.append((lat1, lon1, lat2, lon2))
    return rows


def tiny_distances(rng, count):
    # Distances below about 1 m (1e-5 degree is ~1.1 m), including coincident points.
    rows = []
    for i in range(count):
        lat1 = rng.uniform(-90.0, 90.0) if i % 7 else rng.choice([90.0, -90.0, 0.0, 89.9999999])
        lon1 = rng.uniform(-180.0, 180.0)
        if i % 10 == 0:
            lat2, lon2 = lat1, lon1
        else:
            lat2 = clamp_lat(lat1 + signed(rng, log_uniform(rng, 1e-11, 5e-6)))
            lon2 = lon1 + signed(rng, log_uniform(rng, 1e-11, 5e-6))
        rows.append((lat1, lon1, lat2, lon2))
    return rows


def antimeridian(rng, count):
    rows = []
    for i in range(count):
        lat1 = rng.uniform(-85.0, 85.0)
        lat2 = clamp_lat(lat1 + rng.uniform(-2.0, 2.0)) if i % 2 else rng.uniform(-90.0, 90.0)
        lon1 = 180.0 - log_uniform(rng, 1e-9, 5.0)
        lon2 = -180.0 + log_uniform(rng, 1e-9, 5.0)
        if i % 3 == 0:
            lon1, lon2 = lon2, lon1
        if i % 8 == 0:
            lon1 = 180.0
            lon2 = -180.0 if i % 16 == 0 else lon2
        rows.append((lat1, lon1, lat2, lon2))
    return rows


def unreduced_longitudes(rng, count):
    # Longitudes outside [-180, 180]; the distance is the same as for the reduced values.
    rows = []
    for _ in range(count):
        lat1 = rng.uniform(-90.0, 90.0)
        lat2 = rng.uniform(-90.0, 90.0)
        lon1 = rng.uniform(-180.0, 180.0) + 360.0 * rng.randint(-3, 3)
        lon2 = rng.uniform(-180.0, 180.0) + 360.0 * rng.randint(-3, 3)
        rows.append((lat1, lon1, lat2, lon2))
    return rows


def main():
    rng = random.Random(SEED)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else (
        Path(__file__).resolve().parent.parent / "Tests" / "KQueryTests" / "Fixtures" / "geodesic-extra.csv")
    rows = []
    rows += nearly_antipodal(rng, 130)
    rows += near_poles(rng, 100)
    rows += equatorial_near_180(rng, 100)
    rows += tiny_distances(rng, 100)
    rows += antimeridian(rng, 50)
    rows += unreduced_longitudes(rng, 20)
    with out.open("w") as fh:
        fh.write("lat1,lon1,lat2,lon2,s12_m\n")
        for lat1, lon1, lat2, lon2 in rows:
            s12 = WGS84.Inverse(lat1, lon1, lat2, lon2, Geodesic.DISTANCE)["s12"]
            fh.write(f"{lat1!r},{lon1!r},{lat2!r},{lon2!r},{s12:.9f}\n")
    print(f"wrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    main()
