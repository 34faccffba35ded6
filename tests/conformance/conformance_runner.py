#!/usr/bin/python3
"""Conformance checks for a cgpkit device (docs/protocol.md §8).

  vectors  run a device module (default: reference_device.py beside this file) over
           protocol/conformance/device_vectors.json, in process;
  live     run a real cgp-coordinator, N reference devices over gRPC, one range count through
           cgp-analyst, and check that every device answered and was charged device_charge(ρ).

Run with /usr/bin/python3 (Debian's python3-grpcio and python3-protobuf).
"""

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def load_device_module(path):
    spec = importlib.util.spec_from_file_location("_cgp_device_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same_double(a, b):
    """Bit-for-bit equality (so 0.0 and -0.0 differ, and NaNs compare by payload)."""
    return struct.pack("<d", a) == struct.pack("<d", b)


# ---- vectors -------------------------------------------------------------------------------

def check_case(module, pb, capacity, device, case):
    """Run one case on `device`; return a list of (field, expected, got) mismatches."""
    expect = case["expect"]
    request_bytes = bytes.fromhex(case["request_hex"])
    reply = pb.DeviceReply.FromString(device.handle(request_bytes))
    bad = []

    def check(field, want, got, equal=None):
        if not (equal(want, got) if equal else want == got):
            bad.append((field, want, got))

    status = pb.ReplyStatus.Name(reply.status) if reply.status in pb.ReplyStatus.values() \
        else str(reply.status)
    error = pb.ErrorCode.Name(reply.error) if reply.error in pb.ErrorCode.values() \
        else str(reply.error)
    check("status", expect["status"], status)
    check("error", expect["error"], error)
    check("charged_rho", expect["charged_rho"], reply.charged_rho.hex(),
          lambda w, g: same_double(float.fromhex(w), float.fromhex(g)))
    check("remaining_budget", expect["remaining_budget"], reply.remaining_budget.hex(),
          lambda w, g: same_double(float.fromhex(w), float.fromhex(g)))
    check("values", expect["values"], len(reply.values))
    if expect["status"] == "ANSWERED" and status == "ANSWERED":
        rho = pb.DeviceRequest.FromString(request_bytes).rho
        e, s = module.plan(rho, capacity)
        check("grid_exponent", expect["grid_exponent"], e)
        check("sigma2_grid", expect["sigma2_grid"], str(s))
        # Every released value is an integer multiple of the grid 2^grid_exponent (§5.5).
        unit = Fraction(2) ** expect["grid_exponent"]
        off_grid = [v for v in reply.values if (Fraction(v) / unit).denominator != 1]
        if off_grid:
            bad.append(("values-on-grid", "multiples of 2^%d" % expect["grid_exponent"],
                        "%d off the grid, e.g. %s" % (len(off_grid), off_grid[0].hex())))
    return bad


def run_vectors(args):
    module = load_device_module(args.device)
    pb = module.load_protos(args.proto_path or None)
    with open(args.vectors) as f:
        vectors = json.load(f)
    if vectors.get("format") != "cgpkit-device-conformance/1":
        print("conformance: unknown format %r" % vectors.get("format"))
        return 1
    total = passed = 0
    for group in vectors["groups"]:
        capacity = float.fromhex(group["capacity"])
        device = module.Device(capacity, group["sticky_halt"])
        for component in group["components"]:
            device.register(component["id"], [float.fromhex(v) for v in component["value"]])
        for case in group["cases"]:
            total += 1
            try:
                bad = check_case(module, pb, capacity, device, case)
            except Exception as error:  # a crashing device fails the case, not the run
                bad = [("exception", "a reply", "%s: %s" % (type(error).__name__, error))]
            for field, want, got in bad:
                print("FAIL %s/%s %s expected %s got %s"
                      % (group["name"], case["name"], field, want, got))
            passed += not bad
    print("conformance: %d/%d vectors passed" % (passed, total))
    return 0 if total > 0 and passed == total else 1  # an empty file proves nothing


# ---- live ----------------------------------------------------------------------------------

class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self, cap=None):
        left = max(0.0, self.end - time.monotonic())
        return left if cap is None else min(cap, left)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_tool(cmd, deadline, cap=30.0):
    """Run a short-lived tool with a timeout; return (rc, stdout, stderr)."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=deadline.left(cap))
    return done.returncode, done.stdout, done.stderr


def wait_for_line(path, pattern, deadline, cap, process=None):
    """Poll a log file for a regex; return the match or None (timeout, or the process died)."""
    end = time.monotonic() + deadline.left(cap)
    regex = re.compile(pattern)
    while time.monotonic() < end:
        with open(path, errors="replace") as f:
            m = regex.search(f.read())
        if m:
            return m
        if process is not None and process.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def stop(processes, grace=5.0):
    """SIGTERM every process still running, wait, then SIGKILL what is left."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + grace
    for p in processes:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    return [p.returncode for p in processes]


def run_live(args):
    module = load_device_module(os.path.join(HERE, "reference_device.py"))
    deadline = Deadline(args.timeout)
    # A fresh directory each run (inside --work-dir if given, kept then): enrol and credential
    # refuse to overwrite what an earlier run left.
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cgp-conformance-", dir=args.work_dir)
    processes = []
    logs = []
    checks = []

    def check(what, ok, detail=""):
        checks.append(ok)
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, (": " + detail) if detail else ""))

    try:
        return _live(args, module, deadline, work, processes, logs, check, checks)
    except subprocess.TimeoutExpired as error:
        print("FAIL timed out: %s" % error)
        return 1
    finally:
        codes = stop(processes)
        for log in logs:
            log.close()
        if processes:
            print("stopped %d processes (exit codes %s)" % (len(processes), codes))
        if args.work_dir or args.keep:
            print("work directory kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def _live(args, module, deadline, work, processes, logs, check, checks):
    coordinator, analyst = args.coordinator, args.analyst
    budget, rho, n = args.budget, args.rho, args.devices
    devices_csv = os.path.join(work, "devices.csv")
    analyst_key = os.path.join(work, "analyst.key")
    secrets_csv = os.path.join(work, "secrets.csv")

    rc, out, err = run_tool([coordinator, "credential", "--out", analyst_key], deadline)
    check("analyst credential written", rc == 0, err.strip())
    rc, out, err = run_tool([coordinator, "enrol", "--devices", devices_csv, "--count", str(n),
                             "--prefix", "ref-", "--secrets-out", secrets_csv], deadline)
    check("%d devices enrolled" % n, rc == 0, err.strip())
    if rc != 0:
        return 1
    credentials = []
    with open(secrets_csv) as f:
        for line in f:
            line = line.strip()
            if line and "," in line and not line.startswith("#"):
                device_id, credential = line.split(",", 1)
                if device_id != "id":
                    credentials.append((device_id, credential))
    check("secrets for every device", len(credentials) == n, "%d lines" % len(credentials))

    # The coordinator on an explicit free port (a race with another binder is possible but
    # harmless: the coordinator then refuses to start and the run fails loudly).
    port = free_port()
    target = "127.0.0.1:%d" % port
    coordinator_log = os.path.join(work, "coordinator.log")
    logs.append(open(coordinator_log, "w"))
    processes.append(subprocess.Popen(
        [coordinator, "serve", "--listen", target, "--devices", devices_csv,
         "--analyst-credential", analyst_key, "--budget", repr(budget),
         "--deadline-ms", "10000", "--no-state"],
        stdout=logs[-1], stderr=subprocess.STDOUT))
    listening = wait_for_line(coordinator_log, r"event=listening\b[^\n]*", deadline, 20,
                              processes[0])
    check("coordinator listening on %s" % target, listening is not None,
          listening.group(0) if listening else open(coordinator_log).read()[-2000:])
    if listening is None:
        return 1

    # N reference devices, each a 2-D "location" at a distinct point: a third well inside the
    # queried box [0, 1000]², a third within a few metres of its edge (their noisy answers stay
    # ambiguous, so iterative elimination asks them again: charges over several rounds), the
    # rest far outside.
    device_logs = []
    for k, (device_id, credential) in enumerate(credentials):
        key = os.path.join(work, device_id + ".key")
        with open(key, "w") as f:
            f.write(credential + "\n")
        if k < n // 3:
            x, y = 100.0 + 10.0 * k, 200.0
        elif k < 2 * n // 3:
            x, y = 998.0 + k, 500.0
        else:
            x, y = 5000.0 + 10.0 * k, 5000.0
        path = os.path.join(work, device_id + ".log")
        device_logs.append(path)
        logs.append(open(path, "w"))
        if args.device_command:  # another implementation, from its own command line
            command = shlex.split(args.device_command.format(
                target=target, device_id=device_id, credential_file=key, budget=repr(budget),
                x=repr(x), y=repr(y)))
        else:
            command = [sys.executable, os.path.join(HERE, "reference_device.py"), "--target",
                       target, "--device-id", device_id, "--credential-file", key, "--budget",
                       repr(budget), "--component", "location=%r,%r" % (x, y)] + sum(
                           (["--proto-path", p] for p in args.proto_path), [])
        processes.append(subprocess.Popen(command, stdout=logs[-1], stderr=subprocess.STDOUT))

    base = [analyst, "--coordinator", target, "--credential", analyst_key]
    rc, out, err = run_tool(base + ["status", "--wait-connected", str(n), "--timeout",
                                    "%.0f" % max(1, deadline.left(30))], deadline, 40)
    check("all %d devices connected (cgp-analyst status --wait-connected)" % n, rc == 0,
          (out + err).strip().replace("\n", " ")[:400])
    if rc != 0:
        for path in device_logs[:2]:
            print("--- %s\n%s" % (path, open(path).read()[-1500:]))
        return 1

    query_id = "conformance-live-%d" % os.getpid()
    rc, out, err = run_tool(base + ["range", "--box", "0,0,1000,1000", "--rho", repr(rho),
                                    "--method", args.method, "--id", query_id, "--per-user"],
                            deadline, 60)
    check("range query ran (cgp-analyst exit 0)", rc == 0, err.strip()[-400:])
    print("analyst output: %s" % out.strip().replace("\n", " ")[:1500])
    try:
        result = json.loads(out)
    except ValueError:
        check("range result is JSON", False, out[:200])
        return 1

    # Coverage: every device answered, none refused, rejected, unanswered or not reached.
    coverage = result.get("coverage", {})
    lists = {k: result.get(k) for k in ("refused", "rejected", "unanswered", "not_reached")}
    check("coverage: %d users, all answered, none refused/rejected/unanswered" % n,
          coverage.get("users") == n and coverage.get("answered") == n
          and all(coverage.get(k) == 0 for k in ("refused", "rejected", "unanswered"))
          and all(v == [] for v in lists.values()),
          json.dumps({"coverage": coverage, **lists}))

    if args.device_command:
        return _live_foreign(args, n, rho, result, coordinator_log, query_id, processes, check,
                             checks)

    # What each device's own replies say: the ρ it was asked and what it charged, per round.
    asked = {}
    pattern = re.compile(r"event=reply device=(\S+) query=(\S+) round=(\d+) kind=(\S+) "
                         r"rho=(\S+) status=(\d+) error=(\S+) charged_rho=(\S+) "
                         r"remaining_budget=(\S+)")
    for path in device_logs:
        for m in pattern.finditer(open(path, errors="replace").read()):
            if m.group(2) == query_id:
                asked.setdefault(m.group(1), []).append(
                    (int(m.group(3)), float.fromhex(m.group(5)), int(m.group(6)),
                     float.fromhex(m.group(8)), float.fromhex(m.group(9))))
    answered_ok = all(all(r[2] == 1 for r in rows) for rows in asked.values())
    check("every device's replies were ANSWERED", len(asked) == n and answered_ok,
          "%d devices replied" % len(asked))

    # Each reply's charge is device_charge(ρ_r) of the ρ_r the device was asked (§5.4).  The
    # analyst's --rho is a charge cap per user, not the ρ on the wire: the coordinator asks a
    # slightly smaller ρ per round (rho_within_charge), so ρ_r is taken from the device's log.
    for device_id, rows in sorted(asked.items()):
        for round_, rho_r, _, charged, _ in rows:
            want = module.device_charge(rho_r)
            check("%s round %d: charged_rho %s = device_charge(ρ=%s)"
                  % (device_id, round_, charged.hex(), rho_r.hex()), same_double(charged, want),
                  "device_charge gives %s" % want.hex())
    kinds = sorted({m.group(4) for path in device_logs
                    for m in pattern.finditer(open(path, errors="replace").read())})
    print("the query asked %s" % ", ".join(kinds))

    # The result's charges: `charged` is by user index, the enrolment file's line order.
    enrolled = []
    with open(devices_csv) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                enrolled.append(line.split(",", 1)[0])
    charged = result.get("charged")
    check("the result lists a charge per enrolled user",
          isinstance(charged, list) and len(charged) == len(enrolled), repr(charged)[:200])
    if not isinstance(charged, list) or len(charged) != len(enrolled):
        return 1
    total = 0.0
    for index, device_id in enumerate(enrolled):
        rows = sorted(asked.get(device_id, []))
        want = 0.0
        for row in rows:
            want += module.device_charge(row[1])
        total += want
        check("%s: its charge %s is within the analyst's cap --rho %r"
              % (device_id, want.hex(), rho), want <= rho)
        check("result charged[%d] (%s) = Σ device_charge(ρ_r) = %s"
              % (index, device_id, want.hex()), same_double(float(charged[index]), want),
              "result says %s" % float(charged[index]).hex())
        # The device's own remaining_budget after the query, as §5.4 derives it from the
        # capacity and these charges: the device and the coordinator agree on what was spent.
        if rows:
            spent = 0.0
            for row in rows:
                spent = module.next_up(spent + module.device_charge(row[1]))
            probe = module.Device(budget)
            probe.spent = spent
            check("%s remaining_budget %s = remaining() after the charged %s"
                  % (device_id, rows[-1][4].hex(), want.hex()),
                  same_double(rows[-1][4], probe.remaining()),
                  "§5.4 gives %s" % probe.remaining().hex())
    reported_total = result.get("total_charged_rho")
    check("result total_charged_rho %r = Σ charges %r" % (reported_total, total),
          isinstance(reported_total, (int, float)) and _close(reported_total, total))
    query_line = re.search(r"event=query id=%s [^\n]*" % re.escape(query_id),
                           open(coordinator_log, errors="replace").read())
    check("coordinator log: query answered=%d/%d" % (n, n),
          query_line is not None and ("answered=%d/%d" % (n, n)) in query_line.group(0),
          query_line.group(0) if query_line else "no event=query line")

    # Clean stop: SIGTERM to every device, then the coordinator; all must exit 0.
    devices = processes[1:]
    codes = stop(devices)
    check("reference devices exit 0 on SIGTERM", all(c == 0 for c in codes), str(codes))
    codes = stop(processes[:1])
    check("coordinator exits 0 on SIGTERM", codes == [0], str(codes))
    print("live: %d/%d checks passed" % (sum(checks), len(checks)))
    return 0 if all(checks) else 1


def _live_foreign(args, n, rho, result, coordinator_log, query_id, processes, check, checks):
    """The checks that need nothing from the device but the wire: its log is its own.

    Each user's charge in the result is what its device reported (charged_rho), so a device
    that charges by another rule shows here as a charge of 0 or above the analyst's cap.
    """
    charged = result.get("charged")
    check("the result lists a charge per enrolled user",
          isinstance(charged, list) and len(charged) == n, repr(charged)[:200])
    for index, value in enumerate(charged if isinstance(charged, list) else []):
        check("result charged[%d] = %r is > 0 and within the analyst's cap --rho %r"
              % (index, value, rho), 0 < float(value) <= rho)
    query_line = re.search(r"event=query id=%s [^\n]*" % re.escape(query_id),
                           open(coordinator_log, errors="replace").read())
    check("coordinator log: query answered=%d/%d" % (n, n),
          query_line is not None and ("answered=%d/%d" % (n, n)) in query_line.group(0),
          query_line.group(0) if query_line else "no event=query line")
    unusable = re.findall(
        r"event=(?:reply-unusable|reply-rejected|reply-missing|reply-unmatched|device-exhausted)"
        r"[^\n]*", open(coordinator_log, errors="replace").read())
    check("coordinator log: no reply it could not use, no device retired", not unusable,
          "; ".join(unusable[:5]))
    stop(processes[1:])
    codes = stop(processes[:1])
    check("coordinator exits 0 on SIGTERM", codes == [0], str(codes))
    print("live: %d/%d checks passed" % (sum(checks), len(checks)))
    return 0 if all(checks) else 1


def _close(a, b, rel=1e-15):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300) * 4


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("vectors", help="check a device against the conformance vectors")
    v.add_argument("--vectors", default=os.path.join(
        REPO, "protocol", "conformance", "device_vectors.json"))
    v.add_argument("--device", default=os.path.join(HERE, "reference_device.py"),
                   help="a module exposing Device, plan and load_protos")
    v.add_argument("--proto-path", action="append", default=[])
    live = sub.add_parser("live", help="reference devices against a real coordinator")
    live.add_argument("--coordinator", required=True, help="path of cgp-coordinator")
    live.add_argument("--analyst", required=True, help="path of cgp-analyst")
    live.add_argument("--devices", type=int, default=6)
    live.add_argument("--device-command",
                      help="run another device implementation instead of the reference one: a "
                           "command line with {target} {device_id} {credential_file} {budget} "
                           "{x} {y} (its 2-D location component)")
    live.add_argument("--work-dir")
    live.add_argument("--keep", action="store_true", help="keep the temporary work dir")
    live.add_argument("--budget", type=float, default=1.0)
    live.add_argument("--rho", type=float, default=0.01)
    live.add_argument("--method", default="PM1",
                      help="PM1 (default) asks signed_distance_to_region; PM0 asks location")
    live.add_argument("--timeout", type=float, default=110.0, help="whole run, seconds")
    live.add_argument("--proto-path", action="append", default=[])
    args = parser.parse_args(argv)
    if args.command == "vectors":
        return run_vectors(args)
    return run_live(args)


if __name__ == "__main__":
    sys.exit(main())
