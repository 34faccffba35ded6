#!/usr/bin/python3
"""A cgpkit device written from docs/protocol.md alone (plus the two .proto files).

Two halves:

* ``Device``: the device mechanism of docs/protocol.md §5 as a pure class.  ``handle`` takes the
  bytes of a ``cgp.v1.DeviceRequest`` and returns the bytes of the ``cgp.v1.DeviceReply``:
  decision order (§5.2), plan (§5.3), charge and filter (§5.4), release with an exact discrete
  Gaussian (§5.5), replays (§5.6).  State lives in memory only: this is a conformance reference,
  not a phone (§6 rule 2 asks a real device for a durable ledger).
* a network device (``main``): one bidirectional ``/cgp.v1.DeviceGateway/Connect`` stream
  (§1-§3), answering every request through ``Device.handle``.

Run it with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf); the protobuf modules
are generated at run time with the system ``protoc``.
"""

import argparse
import atexit
import hashlib
import importlib.util
import math
import os
import queue
import random
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from fractions import Fraction

# ---- Constants the document gives ----------------------------------------------------------

MAX_MESSAGE_BYTES = 1 << 20          # §1 kMaxMessageBytes
MAX_ID_BYTES = 128                   # §1 kMaxIdBytes
PROTOCOL_VERSION = 1                 # §1 kProtocolVersion
MAX_DIMENSION = 4096                 # §5.1 / §5.2
MAX_COORDINATE = 2.0 ** 30           # §5.2: public coordinates within ±2^30
MAX_HOLES = 1000                     # §5.2
MAX_POLYGON_VERTICES = 10000         # §5.2
MAX_ERROR_MESSAGE_BYTES = 400        # §2 kMaxReplyErrorMessage
MIN_RHO_SHIFT = -18                  # §5.3: rho >= C·2^-18
GRID_CLAMP = 2 ** 56                 # §5.5 step 3
DISTANCE_CLAMP = 2.0 ** 31           # §5.5 step 1: L = min(M, 2^31)
REPLY_RETENTION_BYTES = 8 << 20      # §2 replays: replies kept up to 8 MiB ...
REPLY_RETENTION_SECONDS = 7 * 86400  # ... and 7 days
WELCOME_TIMEOUT_S = 10.0             # §3 Welcome watchdog
SDK_VERSION = "cgpkit-reference-device.py/1"
METHOD = "/cgp.v1.DeviceGateway/Connect"

# ReplyStatus / ErrorCode numbers (cgp.proto); the generated enums give the same values, but the
# pure mechanism should not need protoc to be importable for plan()/device_charge().
ANSWERED, REFUSED_BUDGET, REJECTED_INVALID = 1, 2, 3
ERROR_CODES = (
    "OK NOT_FINITE NOT_POSITIVE OUT_OF_RANGE DIMENSION_MISMATCH EMPTY_POLYGON "
    "DEGENERATE_POLYGON SELF_INTERSECTING_POLYGON TOO_LARGE MALFORMED_MESSAGE MISSING_FIELD "
    "UNKNOWN_COMPONENT INVALID_ARGUMENT REQUEST_CONFLICT LEDGER_FAILURE COMPONENT_NOT_SET "
    "BUFFER_TOO_SMALL REPLY_PRUNED LEDGER_IN_USE INTERNAL_ERROR INCOMPLETE_QUERY UNAVAILABLE "
    "UNAUTHENTICATED DEADLINE_EXCEEDED ALREADY_EXISTS UNKNOWN_WATCH").split()
E = {name: number for number, name in enumerate(ERROR_CODES)}

# ---- Protobuf modules, generated at run time -----------------------------------------------

_PB = None


def _default_proto_paths():
    """The proto roots near this script: the source tree, or an install's share/cgpkit/proto."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "..", "..", "common", "proto"),
                  os.path.join(here, "..", "..", "protocol", "proto"),
                  os.path.join(here, "..", "proto"),
                  os.path.join(here, "..", "share", "cgpkit", "proto"),
                  os.path.join(here, "..", "..", "share", "cgpkit", "proto")]
    return [os.path.normpath(c) for c in candidates
            if os.path.isdir(os.path.join(c, "cgp", "v1"))]


def load_protos(proto_paths=None):
    """Compile cgp.proto and device_gateway.proto with protoc; return the cgp_pb2 module."""
    global _PB
    if _PB is not None:
        return _PB
    paths = list(proto_paths or []) or _default_proto_paths()
    if not paths:
        raise SystemExit("reference_device: no proto directory found; pass --proto-path")
    protoc = "/usr/bin/protoc" if os.access("/usr/bin/protoc", os.X_OK) else shutil.which("protoc")
    if not protoc:
        raise SystemExit("reference_device: protoc not found")
    out = tempfile.mkdtemp(prefix="cgp-proto-")
    atexit.register(shutil.rmtree, out, True)
    # device_gateway.proto is compiled too, only to prove that the two files are all a device
    # needs (§1); the method name is all we use of it.
    cmd = [protoc] + ["-I" + p for p in paths] + [
        "--python_out=" + out, "cgp/v1/cgp.proto", "cgp/v1/device_gateway.proto"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit("reference_device: protoc failed: " + done.stderr.strip())
    # Loaded under a private name by path, so that no other `cgp` package on sys.path can
    # shadow the generated one.
    spec = importlib.util.spec_from_file_location(
        "_cgp_v1_cgp_pb2", os.path.join(out, "cgp", "v1", "cgp_pb2.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _PB = module
    return module


# ---- Doubles -------------------------------------------------------------------------------

def next_up(x):
    return math.nextafter(x, math.inf)


def next_down(x):
    return math.nextafter(x, -math.inf)


def device_charge(rho):
    """§5.4: pad_up(rho + rho·2^-9 + rho·2^-20) in doubles, left to right."""
    x = rho + rho * 2.0 ** -9 + rho * 2.0 ** -20
    return next_up(x + abs(x) * 16.0 * 2.0 ** -52)


def plan(rho, capacity):
    """§5.3 with K = 1: (grid exponent e, S = σ² in grid units), or ValueError if ρ is too small.

    σ̃ and e₁ follow the doubles; e₂ and S are exact on the rationals.
    """
    if not rho >= capacity * 2.0 ** MIN_RHO_SHIFT:
        raise ValueError("rho below capacity·2^-18")
    sigma = 1.0 / math.sqrt(2.0 * rho)
    if not (math.isfinite(sigma) and sigma > 0.0):   # 2ρ overflowed: no usable noise scale
        raise ValueError("rho gives no usable noise scale")
    e1 = math.frexp(sigma)[1] - 1 - 24          # frexp: sigma = m·2^k, m in [0.5, 1)
    # e₂: the largest e with 2^(2e) <= 2^-42 / (2C).  Start from a float estimate and settle it
    # with exact comparisons.
    bound = Fraction(1, 2 ** 42) / (2 * Fraction(capacity))

    def fits(e):
        return (Fraction(2) ** (2 * e)) <= bound
    e2 = math.floor((math.log2(capacity) + 43) / -2.0)
    while not fits(e2):
        e2 -= 1
    while fits(e2 + 1):
        e2 += 1
    e = min(e1, e2)
    # S: least positive integer with S·u² >= 1/(2ρ)  <=>  S = ceil(2^(-2e) / (2ρ)).
    target = Fraction(2) ** (-2 * e) / (2 * Fraction(rho))
    s = max(1, -((-target.numerator) // target.denominator))
    return e, s


# ---- Exact discrete Gaussian (Canonne, Kamath & Steinke 2020) ------------------------------
# Integer arithmetic only; every coin comes from the OS CSPRNG through `secrets`.

def _bernoulli(num, den):
    """Bernoulli(num/den), 0 <= num <= den."""
    return secrets.randbelow(den) < num


def _bernoulli_exp_small(num, den):
    """CKS Algorithm 1 for γ = num/den in [0, 1]: Bernoulli(exp(-γ))."""
    k = 1
    while _bernoulli(num, den * k):      # A ~ Bernoulli(γ/k)
        k += 1
    return k % 2 == 1


def _bernoulli_exp(num, den):
    """CKS Algorithm 1 for any γ = num/den >= 0."""
    whole, rest = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_small(1, 1):
            return False
    return _bernoulli_exp_small(rest, den)


def _discrete_laplace(t):
    """CKS Algorithm 2 with s = 1: P[X = x] ∝ exp(-|x|/t), t a positive integer."""
    while True:
        u = secrets.randbelow(t)
        if not _bernoulli_exp_small(u, t):
            continue
        v = 0
        while _bernoulli_exp_small(1, 1):
            v += 1
        x = u + t * v
        negative = secrets.randbelow(2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def discrete_gaussian(sigma2):
    """CKS Algorithm 3: a sample of N_Z(0, sigma2) for a positive integer sigma2 (no tail cut)."""
    t = math.isqrt(sigma2) + 1                  # ⌊σ⌋ + 1, exact for an integer σ²
    den = 2 * sigma2 * t * t
    while True:
        y = _discrete_laplace(t)
        # Accept with probability exp(-(|y| - σ²/t)² / (2σ²)) = exp(-(|y|·t - σ²)² / (2σ²t²)).
        if _bernoulli_exp((abs(y) * t - sigma2) ** 2, den):
            return y


# ---- Geometry ------------------------------------------------------------------------------
# Validity (§5.2) is decided exactly: all coordinates are scaled to integers by one common power
# of two, so that orientation tests are integer arithmetic.  The release (§5.5) uses doubles.

class _Invalid(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def _orient(a, b, c):
    v = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return (v > 0) - (v < 0)


def _within_box(p, a, b):
    return (min(a[0], b[0]) <= p[0] <= max(a[0], b[0])
            and min(a[1], b[1]) <= p[1] <= max(a[1], b[1]))


def _segments_meet(a, b, c, d):
    """Whether closed segments ab and cd share a point."""
    o1, o2, o3, o4 = _orient(a, b, c), _orient(a, b, d), _orient(c, d, a), _orient(c, d, b)
    if o1 * o2 < 0 and o3 * o4 < 0:
        return True
    return ((o1 == 0 and _within_box(c, a, b)) or (o2 == 0 and _within_box(d, a, b))
            or (o3 == 0 and _within_box(a, c, d)) or (o4 == 0 and _within_box(b, c, d)))


def _candidate_pairs(boxes):
    """Index pairs (i, j), i < j in sort order, whose bounding boxes overlap (a sweep on x)."""
    order = sorted(range(len(boxes)), key=lambda k: boxes[k][0])
    for pos, i in enumerate(order):
        x1, y0, y1 = boxes[i][1], boxes[i][2], boxes[i][3]
        for j in order[pos + 1:]:
            if boxes[j][0] > x1:
                break
            if boxes[j][2] <= y1 and boxes[j][3] >= y0:
                yield i, j


def _edge_box(a, b):
    return (min(a[0], b[0]), max(a[0], b[0]), min(a[1], b[1]), max(a[1], b[1]))


def _locate(p, ring):
    """+1 strictly inside the ring, 0 on it, -1 outside (exact, even-odd)."""
    inside = False
    n = len(ring)
    for i in range(n):
        a, b = ring[i - 1], ring[i]
        o = _orient(a, b, p)
        if o == 0 and _within_box(p, a, b):
            return 0
        if (a[1] > p[1]) != (b[1] > p[1]) and (o > 0) == (b[1] > a[1]):
            inside = not inside
    return 1 if inside else -1


def _check_ring(ring, name):
    """A ring of >= 3 distinct consecutive vertices: area, then simplicity (OGC)."""
    n = len(ring)
    a0, a1 = ring[0], ring[1]
    if all(_orient(a0, a1, c) == 0 for c in ring[2:]):
        raise _Invalid(E["DEGENERATE_POLYGON"], name + ": the ring has no area")
    for i in range(n):
        # Consecutive edges meet at their common vertex only: no spike folding back.
        p, v, q = ring[i - 1], ring[i], ring[(i + 1) % n]
        if _orient(p, v, q) == 0 and (
                (v[0] - p[0]) * (q[0] - v[0]) + (v[1] - p[1]) * (q[1] - v[1])) < 0:
            raise _Invalid(E["SELF_INTERSECTING_POLYGON"], name + ": the ring touches itself")
    edges = [(ring[i], ring[(i + 1) % n]) for i in range(n)]
    for i, j in _candidate_pairs([_edge_box(*e) for e in edges]):
        i, j = min(i, j), max(i, j)
        if j == i + 1 or (i == 0 and j == n - 1):
            continue
        if _segments_meet(*edges[i], *edges[j]):
            raise _Invalid(E["SELF_INTERSECTING_POLYGON"], name + ": the ring crosses itself")
    area2 = sum(ring[i - 1][0] * ring[i][1] - ring[i][0] * ring[i - 1][1] for i in range(n))
    if area2 == 0:
        raise _Invalid(E["DEGENERATE_POLYGON"], name + ": the ring has no area")


def _contacts(edge, other_edges, other_boxes):
    """Parameters t in [0, 1] where `edge` meets the other ring; None on a shared segment."""
    p, q = edge
    box = _edge_box(p, q)
    ts = []
    for (a, b), ob in zip(other_edges, other_boxes):
        if ob[0] > box[1] or ob[1] < box[0] or ob[2] > box[3] or ob[3] < box[2]:
            continue
        if not _segments_meet(p, q, a, b):
            continue
        dx, dy = q[0] - p[0], q[1] - p[1]
        ex, ey = b[0] - a[0], b[1] - a[1]
        cross = dx * ey - dy * ex
        if cross == 0:
            # Collinear and meeting: a shared point at an end, or a shared stretch.
            length2 = dx * dx + dy * dy
            ta = Fraction((a[0] - p[0]) * dx + (a[1] - p[1]) * dy, length2)
            tb = Fraction((b[0] - p[0]) * dx + (b[1] - p[1]) * dy, length2)
            lo, hi = max(min(ta, tb), 0), min(max(ta, tb), 1)
            if hi > lo:
                return None
            ts.append(lo)
        else:
            ts.append(Fraction((a[0] - p[0]) * ey - (a[1] - p[1]) * ex, cross))
    return ts


def _side_of(ring, other, want):
    """Whether every point of `ring` off `other` is on side `want` (+1 inside, -1 outside).

    Rings may touch at points (OGC); a shared stretch of boundary fails.  Each edge that meets
    `other` is cut at the contact points and each piece tested; the other edges lie on the side
    of their neighbours, so without any contact one vertex decides.
    """
    other_edges = [(other[i], other[(i + 1) % len(other)]) for i in range(len(other))]
    other_boxes = [_edge_box(*e) for e in other_edges]
    touched = False
    for i in range(len(ring)):
        p, q = ring[i], ring[(i + 1) % len(ring)]
        ts = _contacts((p, q), other_edges, other_boxes)
        if ts is None:
            return False
        if not ts:
            continue
        touched = True
        cuts = sorted(set([Fraction(0), Fraction(1)] + ts))
        for t0, t1 in zip(cuts, cuts[1:]):
            t = (t0 + t1) / 2
            m = (p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1]))
            if _locate(m, other) != want:
                return False
    if touched:
        return True
    return _locate(ring[0], other) == want


def _clean_ring(xy):
    pts = [(xy[k], xy[k + 1]) for k in range(0, len(xy), 2)]
    out = []
    for p in pts:
        if not out or out[-1] != p:
            out.append(p)
    while len(out) > 1 and out[-1] == out[0]:
        out.pop()
    return out


def validate_polygon(polygon):
    """§5.2 polygon rules in their order; returns the cleaned rings (outer first) as doubles."""
    rings_xy = ([list(polygon.outer.xy)] if polygon.HasField("outer") else []) + [
        list(h.xy) for h in polygon.holes]
    # The size limits come first, before any per-vertex work.
    if len(polygon.holes) > MAX_HOLES:
        raise _Invalid(E["TOO_LARGE"], "region.polygon.holes: more than 1000 holes")
    if sum(len(xy) for xy in rings_xy) > 2 * MAX_POLYGON_VERTICES:
        raise _Invalid(E["TOO_LARGE"], "region.polygon: more than 10000 vertices")
    if not polygon.HasField("outer"):
        raise _Invalid(E["MISSING_FIELD"], "region.polygon.outer is missing")
    names = ["region.polygon.outer"] + [
        "region.polygon.holes[%d]" % k for k in range(len(polygon.holes))]
    for xy, name in zip(rings_xy, names):
        if len(xy) % 2:
            raise _Invalid(E["DIMENSION_MISMATCH"], name + ".xy: an odd number of coordinates")
    for xy, name in zip(rings_xy, names):
        _check_coordinates(xy, name + ".xy")
    rings = [_clean_ring(xy) for xy in rings_xy]
    for ring, name in zip(rings, names):
        if len(ring) < 3:
            raise _Invalid(E["EMPTY_POLYGON"], name + ": fewer than 3 distinct vertices")
    # Exact integer copies: one common power-of-two scale for every coordinate.
    scale = max(Fraction(c).denominator for ring in rings for p in ring for c in p)
    exact = [[(_scaled(p[0], scale), _scaled(p[1], scale)) for p in ring] for ring in rings]
    for ring, name in zip(exact, names):
        _check_ring(ring, name)
    outer, holes = exact[0], exact[1:]
    for k, hole in enumerate(holes):
        if not _side_of(hole, outer, +1):
            raise _Invalid(E["DEGENERATE_POLYGON"], names[k + 1] + ": not inside the outer ring")
    boxes = [(min(p[0] for p in h), max(p[0] for p in h), min(p[1] for p in h),
              max(p[1] for p in h)) for h in holes]
    for i, j in _candidate_pairs(boxes):
        if not (_side_of(holes[i], holes[j], -1) and _side_of(holes[j], holes[i], -1)):
            raise _Invalid(E["DEGENERATE_POLYGON"],
                           "%s and %s overlap or nest" % (names[i + 1], names[j + 1]))
    return rings


def _scaled(value, scale):
    f = Fraction(value) * scale
    return f.numerator   # the denominator is 1: scale is the largest power of two needed


def _check_coordinates(values, name):
    for v in values:
        if not math.isfinite(v):
            raise _Invalid(E["NOT_FINITE"], name + ": a coordinate is not finite")
    for v in values:
        if abs(v) > MAX_COORDINATE:
            raise _Invalid(E["OUT_OF_RANGE"], name + ": a coordinate beyond ±2^30")


def _segment_distance(px, py, ax, ay, bx, by):
    dx, dy = bx - ax, by - ay
    length2 = dx * dx + dy * dy
    t = 0.0 if length2 == 0 else ((px - ax) * dx + (py - ay) * dy) / length2
    t = min(1.0, max(0.0, t))
    return math.hypot(px - (ax + t * dx), py - (ay + t * dy))


def _polygon_signed_distance(x, rings):
    px, py = x
    dist = math.inf
    inside = False
    for ring in rings:
        n = len(ring)
        for i in range(n):
            (ax, ay), (bx, by) = ring[i - 1], ring[i]
            dist = min(dist, _segment_distance(px, py, ax, ay, bx, by))
            if (ay > py) != (by > py):
                if px < ax + (py - ay) * (bx - ax) / (by - ay):
                    inside = not inside
    if dist == 0.0:
        return 0.0
    return -dist if inside else dist


def _box_signed_distance(x, lo, hi):
    outside = [max(l - v, 0.0) + max(v - h, 0.0) for v, l, h in zip(x, lo, hi)]
    if any(o > 0.0 for o in outside):
        return math.hypot(*outside)
    return -min(min(v - l, h - v) for v, l, h in zip(x, lo, hi))


# ---- The device ----------------------------------------------------------------------------

def _bits(x):
    return struct.pack("<d", x)


def _canonical(message, out):
    """A canonical form of a message's field values (§5.6): every field by number, doubles bit
    for bit, sub-message presence kept; unknown fields and encoding choices are left out."""
    for fd in sorted(message.DESCRIPTOR.fields, key=lambda f: f.number):
        out.append(struct.pack("<I", fd.number))
        if fd.label == fd.LABEL_REPEATED:
            values = list(getattr(message, fd.name))
            out.append(struct.pack("<Q", len(values)))
        elif fd.message_type is not None:
            if not message.HasField(fd.name):
                out.append(b"\0")
                continue
            out.append(b"\1")
            values = [getattr(message, fd.name)]
        else:
            values = [getattr(message, fd.name)]
        for v in values:
            if fd.message_type is not None:
                _canonical(v, out)
            elif fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT):
                out.append(_bits(v))
            elif fd.type in (fd.TYPE_STRING, fd.TYPE_BYTES):
                raw = v.encode("utf-8") if isinstance(v, str) else v
                out.append(struct.pack("<Q", len(raw)) + raw)
            elif fd.type == fd.TYPE_BOOL:
                out.append(b"\1" if v else b"\0")
            else:
                out.append(struct.pack("<q", int(v)))


def _normalized(request):
    """§5.6: the content a replay is matched on — a frame of projection 0 is no frame, and
    polygon rings are compared as §5.2 cleans them."""
    r = type(request)()
    r.CopyFrom(request)
    if r.HasField("frame") and r.frame.projection == 0:
        r.ClearField("frame")
    if r.WhichOneof("statistic") == "signed_distance_to_region":
        region = r.signed_distance_to_region.region
        if region.WhichOneof("shape") == "polygon":
            for ring in [region.polygon.outer] + list(region.polygon.holes):
                if len(ring.xy) % 2 == 0:
                    cleaned = _clean_ring(list(ring.xy))
                    del ring.xy[:]
                    for x, y in cleaned:
                        ring.xy.extend([x, y])
    return r


def request_digest(request):
    parts = []
    _canonical(_normalized(request), parts)
    return hashlib.sha256(b"".join(parts)).digest()


class Device:
    """The §5 mechanism.  handle() is the only way a reply is made (§6)."""

    def __init__(self, capacity, sticky_halt=False, pace=True, clock=time.time):
        capacity = float(capacity)
        if not (math.isfinite(capacity) and 2.0 ** -100 <= capacity <= 2.0 ** 100):
            raise ValueError("capacity must be a finite double in [2^-100, 2^100]")
        self.pb = load_protos()
        self.capacity = capacity
        self.sticky_halt = bool(sticky_halt)
        self.spent = 0.0
        self.halted = False
        self.components = {}          # id -> (dimension, values or None)
        self.answered = {}            # (query_id, round) -> [digest, reply bytes or None, time]
        self.kept_bytes = 0
        self.pace = pace
        self.clock = clock

    # -- state --

    def register(self, component_id, values=None, dimension=None):
        """Register a component; `values` None registers it without a value (COMPONENT_NOT_SET)."""
        if values is not None:
            values = [float(v) for v in values]
            dimension = len(values)
            if not all(math.isfinite(v) for v in values):
                raise ValueError("component values must be finite")
        if dimension is None or not 1 <= dimension <= MAX_DIMENSION:
            raise ValueError("component dimension must be within 1..4096")
        self.components[component_id] = (dimension, values)

    def remaining(self):
        """§5.4: C − s rounded down, 0 if halted or not positive."""
        if self.halted:
            return 0.0
        r = self.capacity - self.spent
        # "Rounded down": if the double difference overshoots the exact one, step down.
        if Fraction(r) > Fraction(self.capacity) - Fraction(self.spent):
            r = next_down(r)
        return r if r > 0.0 else 0.0

    # -- requests --

    def handle(self, request_bytes):
        pb = self.pb
        request = None
        try:
            if len(request_bytes) > MAX_MESSAGE_BYTES:
                raise _Invalid(E["TOO_LARGE"], "request: more than 1 MiB")
            try:
                request = pb.DeviceRequest.FromString(bytes(request_bytes))
            except Exception:  # DecodeError, or any parser refusal: the bytes are not a request
                raise _Invalid(E["MALFORMED_MESSAGE"],
                               "request: the bytes do not parse as cgp.v1.DeviceRequest")
            public = self._check_fields(request)
            replay = self._replay(request)
            if replay is not None:
                return replay
            return self._decide(request, public)
        except _Invalid as invalid:
            # §5.4 says a rejection carries remaining_budget 0, but the conformance vectors
            # (and so the C++ device) carry remaining() on every reply: we follow the vectors.
            # remaining() is public (capacity and charges), so this leaks nothing.
            return self._reply(request, REJECTED_INVALID, error=invalid.code,
                               message=invalid.message, remaining=self.remaining())

    def _check_fields(self, r):
        """§5.2 rule 2; returns the request's public coordinates (for rules 6-7)."""
        if not r.HasField("id"):
            raise _Invalid(E["MISSING_FIELD"], "id is missing")
        qid = r.id.query_id.encode("utf-8")
        if not qid:
            raise _Invalid(E["MISSING_FIELD"], "id.query_id is empty")
        if len(qid) > MAX_ID_BYTES:
            raise _Invalid(E["TOO_LARGE"], "id.query_id: more than 128 bytes")
        if r.id.round == 0:
            raise _Invalid(E["OUT_OF_RANGE"], "id.round must be >= 1")
        cid = r.component_id.encode("utf-8")
        if not cid:
            raise _Invalid(E["MISSING_FIELD"], "component_id is empty")
        if len(cid) > MAX_ID_BYTES:
            raise _Invalid(E["TOO_LARGE"], "component_id: more than 128 bytes")
        kind = r.WhichOneof("statistic")
        if kind is None:
            raise _Invalid(E["MISSING_FIELD"], "statistic: none of location, distance_to_point,"
                           " signed_distance_to_region")
        public = {"kind": kind}
        if kind == "distance_to_point":
            point = list(r.distance_to_point.point)
            _check_vector(point, "distance_to_point.point")
            public["point"] = point
        elif kind == "signed_distance_to_region":
            sd = r.signed_distance_to_region
            shape = sd.region.WhichOneof("shape") if sd.HasField("region") else None
            if shape is None:
                raise _Invalid(E["MISSING_FIELD"], "signed_distance_to_region.region: no shape")
            public["shape"] = shape
            if shape == "box":
                lo, hi = list(sd.region.box.lo), list(sd.region.box.hi)
                _check_vector(lo, "region.box.lo", check_values=False)
                if len(hi) != len(lo):
                    raise _Invalid(E["DIMENSION_MISMATCH"], "region.box.hi: not as long as lo")
                _check_coordinates(lo + hi, "region.box")
                if not all(a < b for a, b in zip(lo, hi)):
                    raise _Invalid(E["DEGENERATE_POLYGON"], "region.box: lo[k] < hi[k] fails")
                public["lo"], public["hi"] = lo, hi
            elif shape == "ball":
                center, radius = list(sd.region.ball.center), sd.region.ball.radius
                _check_vector(center, "region.ball.center")
                if not math.isfinite(radius):
                    raise _Invalid(E["NOT_FINITE"], "region.ball.radius is not finite")
                if not radius > 0.0:
                    raise _Invalid(E["NOT_POSITIVE"], "region.ball.radius must be > 0")
                if any(Fraction(abs(c)) + Fraction(radius) > Fraction(MAX_COORDINATE)
                       for c in center):
                    raise _Invalid(E["OUT_OF_RANGE"], "region.ball: |center| + radius > 2^30")
                public["center"], public["radius"] = center, radius
            else:
                public["rings"] = validate_polygon(sd.region.polygon)
        if not math.isfinite(r.rho):
            raise _Invalid(E["NOT_FINITE"], "rho is not finite")
        if not r.rho > 0.0:
            raise _Invalid(E["NOT_POSITIVE"], "rho must be > 0")
        if r.HasField("frame"):
            f = r.frame
            if f.projection not in (0, 1, 2):
                raise _Invalid(E["INVALID_ARGUMENT"], "frame.projection is unknown")
            if f.projection != 0:
                if not (math.isfinite(f.origin_lon) and math.isfinite(f.origin_lat)):
                    raise _Invalid(E["NOT_FINITE"], "frame.origin is not finite")
                if not (-180.0 <= f.origin_lon <= 180.0 and -90.0 < f.origin_lat < 90.0):
                    raise _Invalid(E["OUT_OF_RANGE"], "frame.origin_lon/origin_lat out of range")
                if f.projection == 2 and f.origin_lat != 0.0:
                    raise _Invalid(E["OUT_OF_RANGE"], "frame.origin_lat must be 0 (mercator)")
        return public

    def _replay(self, r):
        """§5.2 rule 3 / §5.6."""
        key = (r.id.query_id, r.id.round)
        entry = self.answered.get(key)
        if entry is None:
            return None
        if entry[0] != request_digest(r):
            raise _Invalid(E["REQUEST_CONFLICT"], "id: answered before for another request")
        self._prune()
        if entry[1] is None:
            raise _Invalid(E["REPLY_PRUNED"], "id: answered before; the reply is past retention")
        return entry[1]

    def _prune(self):
        """Retention of reply bytes (§2): 8 MiB and 7 days, oldest first; digests stay."""
        now = self.clock()
        for entry in self.answered.values():          # insertion order = answer order
            if entry[1] is None:
                continue
            if (self.kept_bytes <= REPLY_RETENTION_BYTES
                    and now - entry[2] <= REPLY_RETENTION_SECONDS):
                break
            self.kept_bytes -= len(entry[1])
            entry[1] = None

    def _decide(self, r, public):
        component = self.components.get(r.component_id)
        if component is None:                                         # rule 4
            raise _Invalid(E["UNKNOWN_COMPONENT"], "component_id: no such component")
        dimension, x = component
        if x is None:
            raise _Invalid(E["COMPONENT_NOT_SET"], "component_id: the component has no value")
        # Rule 5 (frame): components here are set in the app's own units, so they claim no
        # frame and every request's frame is accepted (lon/lat projection is out of scope).
        kind = public["kind"]                                         # rule 6
        needed = {"point": "distance_to_point.point", "lo": "region.box.lo",
                  "center": "region.ball.center"}
        for field, name in needed.items():
            if field in public and len(public[field]) != dimension:
                raise _Invalid(E["DIMENSION_MISMATCH"],
                               "%s: %d coordinates for a %d-d component"
                               % (name, len(public[field]), dimension))
        if "rings" in public and dimension != 2:
            raise _Invalid(E["DIMENSION_MISMATCH"], "region.polygon: needs a 2-d component")
        try:                                                          # rule 7
            e, s = plan(r.rho, self.capacity)
        except ValueError:
            raise _Invalid(E["OUT_OF_RANGE"], "rho: below the device's minimum capacity·2^-18")
        box = math.ldexp(1.0, e + 48)                  # M; e + 48 <= 948, so finite
        coords = public.get("point", []) + public.get("lo", []) + public.get("hi", []) + [
            c for ring in public.get("rings", []) for p in ring for c in p]
        if any(abs(c) > box for c in coords) or any(
                Fraction(abs(c)) + Fraction(public["radius"]) > Fraction(box)
                for c in public.get("center", [])):
            raise _Invalid(E["OUT_OF_RANGE"], "rho: a coordinate of the request beyond the "
                           "plan's box ±2^%d" % (e + 48))
        charge = device_charge(r.rho)                                 # rule 8
        if self.halted or next_up(self.spent + charge) > self.capacity:
            if self.sticky_halt:
                self.halted = True
            return self._reply(r, REFUSED_BUDGET, remaining=self.remaining())
        # Rule 9.  The charge is taken before anything is released (§6 rule 1): a failure
        # inside the release then costs budget rather than leaking an uncharged answer.
        self.spent = next_up(self.spent + charge)
        started = time.monotonic()
        values = self._release(kind, public, x, e, s, box)
        reply = self._reply(r, ANSWERED, values=values, charged=charge,
                            remaining=self.remaining())
        self.answered[(r.id.query_id, r.id.round)] = [request_digest(r), reply, self.clock()]
        self.kept_bytes += len(reply)
        self._prune()
        if self.pace:
            self._pad(started, len(values), dimension, coords, public)
        return reply

    def _release(self, kind, public, x, e, s, box):
        """§5.5: clamp, statistic, grid, exact discrete Gaussian noise, values."""
        if kind == "location":
            clamped = [min(box, max(-box, v)) for v in x]
            ys = clamped
        else:
            limit = min(box, DISTANCE_CLAMP)
            clamped = [min(limit, max(-limit, v)) for v in x]
            if kind == "distance_to_point":
                ys = [math.hypot(*[a - b for a, b in zip(clamped, public["point"])])]
            elif public["shape"] == "box":
                ys = [_box_signed_distance(clamped, public["lo"], public["hi"])]
            elif public["shape"] == "ball":
                ys = [math.hypot(*[a - b for a, b in zip(clamped, public["center"])])
                      - public["radius"]]
            else:
                ys = [_polygon_signed_distance(clamped, public["rings"])]
        values = []
        for y in ys:
            g = _grid_round(y, e)
            total = g + discrete_gaussian(s)
            values.append(math.ldexp(float(total), e))    # float(int) rounds to nearest
        return values

    def _pad(self, started, n_values, dimension, coords, public):
        """§5.5 pacing: 200 µs + 25 µs per value + 50 ns per input coordinate and polygon edge,
        from public data only.  Python cannot promise the floor is never overrun."""
        edges = sum(len(ring) for ring in public.get("rings", []))
        window = 200e-6 + 25e-6 * n_values + 50e-9 * (dimension + len(coords) + edges)
        left = started + window - time.monotonic()
        if left > 0:
            time.sleep(left)

    def _reply(self, request, status, error=0, message="", values=(), charged=0.0,
               remaining=0.0):
        pb = self.pb
        reply = pb.DeviceReply(status=status, error=error)
        if request is not None and request.HasField("id"):
            reply.id.CopyFrom(request.id)
        if message:
            raw = message.encode("utf-8")[:MAX_ERROR_MESSAGE_BYTES]
            reply.error_message = raw.decode("utf-8", "ignore")
        reply.values.extend(values)
        reply.charged_rho = charged
        reply.remaining_budget = remaining
        return reply.SerializeToString()


def _check_vector(values, name, check_values=True):
    if len(values) > MAX_DIMENSION:
        raise _Invalid(E["TOO_LARGE"], name + ": more than 4096 coordinates")
    if not values:
        raise _Invalid(E["MISSING_FIELD"], name + ": no coordinate")
    if check_values:
        _check_coordinates(values, name)


def _grid_round(y, e):
    """§5.5 step 3: round(clamp(y/u, ±2^56)), halves away from zero, NaN to -2^56."""
    if math.isnan(y):
        return -GRID_CLAMP
    v = math.ldexp(y, -e)                     # exact: u is a power of two
    v = min(float(GRID_CLAMP), max(-float(GRID_CLAMP), v))
    a = abs(v)
    whole = math.floor(a)
    g = int(whole) + (1 if a - whole >= 0.5 else 0)  # a - whole is exact for a double
    return -g if v < 0 else g


# ---- The network device --------------------------------------------------------------------

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _log(**fields):
    parts = []
    for k, v in fields.items():
        s = str(v)
        parts.append("%s=%s" % (k, s if s and " " not in s and '"' not in s else '"%s"'
                                % s.replace('"', "'")))
    sys.stderr.write("reference-device " + " ".join(parts) + "\n")
    sys.stderr.flush()


class _Session:
    """One Connect stream: Hello, Welcome, then requests answered in arrival order."""

    def __init__(self, args, device, pb, grpc):
        self.args, self.device, self.pb, self.grpc = args, device, pb, grpc
        self.outgoing = queue.Queue()
        self.call = None
        self.welcomed = False
        self.cause = None             # why we ended the session ourselves, if we did
        self.lock = threading.Lock()

    def _requests(self):
        while True:
            item = self.outgoing.get()
            if item is None:
                return
            yield item

    def cancel(self, cause):
        with self.lock:
            if self.cause is None:
                self.cause = cause
            if self.call is not None:
                self.call.cancel()

    def close(self):
        """Goodbye then half-close: the coordinator finishes the stream with OK (§2)."""
        goodbye = self.pb.DeviceToCoordinator(goodbye=self.pb.Goodbye(reason="shutting down"))
        self.outgoing.put(goodbye.SerializeToString())
        self.outgoing.put(None)

    def run(self, channel):
        pb, grpc = self.pb, self.grpc
        hello = pb.Hello(device_id=self.args.device_id, credential=self.args.credential,
                         protocol_version=PROTOCOL_VERSION, sdk_version=SDK_VERSION)
        self.outgoing.put(pb.DeviceToCoordinator(hello=hello).SerializeToString())
        connect = channel.stream_stream(METHOD, request_serializer=lambda b: b,
                                        response_deserializer=pb.CoordinatorToDevice.FromString)
        with self.lock:
            self.call = connect(self._requests())
            if self.cause is not None:
                self.call.cancel()
        watchdog = threading.Timer(WELCOME_TIMEOUT_S, self._no_welcome)
        watchdog.daemon = True
        watchdog.start()
        try:
            for message in self.call:
                body = message.WhichOneof("body")
                if body == "welcome":
                    if self.welcomed:
                        self.cancel("a second welcome in one session")
                        break
                    self.welcomed = True
                    watchdog.cancel()
                    _log(event="welcome", device=self.args.device_id,
                         protocol_version=message.welcome.protocol_version)
                elif body == "request":
                    self._answer(message.request)
                elif body == "start_watch":
                    self._refuse_watch(message.start_watch)
                elif body == "goodbye":
                    self.outgoing.put(None)
                    break
            code, details = self.call.code(), self.call.details()
        except grpc.RpcError as error:
            code, details = error.code(), error.details()
        finally:
            watchdog.cancel()
            self.outgoing.put(None)
        return code, details or ""

    def _no_welcome(self):
        if not self.welcomed:
            self.cancel("no Welcome within 10 s")

    def _answer(self, request):
        reply = self.device.handle(request.SerializeToString())
        if self.args.fault == "unset-remaining":
            # A broken implementation, for the runner's own test: §5.4's MUST left out.
            broken = self.pb.DeviceReply.FromString(reply)
            broken.ClearField("remaining_budget")
            reply = broken.SerializeToString()
        # The reply bytes go out unchanged as field 2 of DeviceToCoordinator (§2).
        self.outgoing.put(b"\x12" + _varint(len(reply)) + reply)
        parsed = self.pb.DeviceReply.FromString(reply)
        _log(event="reply", device=self.args.device_id, query=request.id.query_id,
             round=request.id.round, kind=request.WhichOneof("statistic"),
             rho=float(request.rho).hex(), status=parsed.status,
             error=ERROR_CODES[parsed.error] if parsed.error < len(ERROR_CODES) else parsed.error,
             charged_rho=parsed.charged_rho.hex(), remaining_budget=parsed.remaining_budget.hex(),
             values=len(parsed.values))

    def _refuse_watch(self, spec):
        # Watches (device-side Above Threshold) are out of scope for this reference device.
        started = self.pb.WatchStarted(
            watch_id=spec.watch_id, status=3, error=E["INVALID_ARGUMENT"],
            error_message="watches are not supported by the reference device",
            remaining_budget=self.device.remaining())
        self.outgoing.put(self.pb.DeviceToCoordinator(watch_started=started).SerializeToString())
        _log(event="watch-refused", device=self.args.device_id, watch=spec.watch_id)


def _final(code_name, details):
    """§3: errors after which cgp-device stops instead of redialling."""
    if code_name == "UNAUTHENTICATED":
        return True
    if code_name in ("INVALID_ARGUMENT", "FAILED_PRECONDITION"):
        return any(w in details for w in ("device_id", "sdk_version", "protocol_version"))
    return "frame" in details


def _parse_component(text):
    name, _, values = text.partition("=")
    if not name or not values:
        raise argparse.ArgumentTypeError("--component wants ID=V1,V2,...")
    return name, [float(v) for v in values.split(",")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="coordinator HOST:PORT")
    parser.add_argument("--device-id", required=True)
    parser.add_argument("--credential-file", required=True)
    parser.add_argument("--budget", required=True, type=float, help="capacity C (ρ of CGP)")
    parser.add_argument("--sticky-halt", action="store_true")
    parser.add_argument("--component", action="append", default=[], type=_parse_component,
                        metavar="ID=V1,V2,...")
    parser.add_argument("--once", action="store_true", help="one session, no redial")
    parser.add_argument("--fault", choices=["unset-remaining"],
                        help="break the protocol on purpose (tests of the conformance runner)")
    parser.add_argument("--tls-root", help="PEM root certificate (default: plaintext)")
    parser.add_argument("--proto-path", action="append", default=[],
                        help="proto root holding cgp/v1/*.proto (repeatable)")
    args = parser.parse_args(argv)

    stopping = threading.Event()
    current = {"session": None}

    def on_signal(signum, frame):
        stopping.set()
        session = current["session"]
        if session is not None:
            session.close()
            # A stream the coordinator does not end within 1 s is cancelled.
            timer = threading.Timer(1.0, session.cancel, args=("signal",))
            timer.daemon = True
            timer.start()

    # First thing, so that a signal during start-up (imports, protoc) also ends with 0.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    import grpc  # only the network device needs it
    pb = load_protos(args.proto_path)
    with open(args.credential_file, "rb") as f:
        # §1: on the wire the credential is the file's text without its trailing newline(s).
        args.credential = f.read().rstrip(b"\r\n")
    device = Device(args.budget, args.sticky_halt)
    for name, values in args.component:
        device.register(name, values)

    options = [("grpc.keepalive_time_ms", 60000), ("grpc.keepalive_timeout_ms", 20000),
               ("grpc.http2.max_pings_without_data", 0),
               ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
               ("grpc.initial_reconnect_backoff_ms", 100),
               ("grpc.max_reconnect_backoff_ms", 5000)]
    result = {"rc": 0}

    def loop():
        backoff = 0.1
        while not stopping.is_set():
            if args.tls_root:
                with open(args.tls_root, "rb") as f:
                    creds = grpc.ssl_channel_credentials(root_certificates=f.read())
                channel = grpc.secure_channel(args.target, creds, options=options)
            else:
                channel = grpc.insecure_channel(args.target, options=options)
            session = _Session(args, device, pb, grpc)
            current["session"] = session
            if stopping.is_set():      # a signal between the loop's test and the line above
                session.close()
            began = time.monotonic()
            try:
                code, details = session.run(channel)
            finally:
                channel.close()
            if session.cause == "no Welcome within 10 s":
                code_name, details = "DEADLINE_EXCEEDED", session.cause
            else:
                code_name = code.name if code is not None else "UNKNOWN"
            _log(event="session-end", device=args.device_id, status=code_name,
                 details=details or session.cause or "")
            if stopping.is_set():
                return
            if _final(code_name, details):
                result["rc"] = 1
                return
            if args.once:
                ended_well = code_name in ("OK", "CANCELLED") and session.cause is None
                result["rc"] = 0 if ended_well else 1
                return
            # §3: 100 ms after a quick failure, doubling to 5 s; 100 ms again after a session of
            # at least 5 s; ±20% jitter on every wait.
            if time.monotonic() - began >= 5.0:
                backoff = 0.1
            stopping.wait(backoff * random.uniform(0.8, 1.2))
            backoff = min(2 * backoff, 5.0)

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)          # short joins keep the main thread free for signals
    return 0 if stopping.is_set() else result["rc"]


if __name__ == "__main__":
    sys.exit(main())
