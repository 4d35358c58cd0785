#!/usr/bin/env python3
"""Reads `go test -json` on stdin and prints what a person wants to see.

One line per package as it ends (ok or FAIL, time, tests run and skipped),
a line when a package known to be slow starts and when any package has
run a while without ending, the output of failed tests, and at the end the
counts: Go tests run, skipped (grouped by the reason they give) and failed,
and pytest's summary line where client/python's suite ran.

    go test -json ./... | scripts/test-summary.py

Exits 1 when a test or a package failed. Lines that are not JSON (build
errors) pass through.
"""

import json
import re
import sys
import threading
import time

# Packages that run long without a line; said when they start.
SLOW = {
    "integration": "about 200 s: tests through real FUSE mounts",
    "cmd/s3gdsfs": "about 35 s: the built command, its mounts and make install",
    "client/python/gotest": "pytest on a mount, when the Python environment is there",
}
STILL_RUNNING_AFTER = 60  # seconds before a package without a result is named

SKIP_REASON = re.compile(r"^\s+\S+\.go:\d+: (.*)$")
PYTEST_SUMMARY = re.compile(r"\b\d+ (passed|failed|skipped|error)s?\b.* in [\d.]+s")
PYTEST_SKIP = re.compile(r"^\s*SKIPPED \[\d+\] (.*)$")


def short(pkg):
    return pkg.split("/", 3)[3] if pkg.count("/") >= 3 else pkg


def main():
    lock = threading.Lock()
    started = {}  # package -> start time, while running
    named = set()
    counts = {"run": 0, "pass": 0, "skip": 0, "fail": 0}
    per_pkg = {}
    skips = {}  # reason -> [test]
    failed = []  # (package, test, output)
    failed_pkgs = []
    output = {}  # (package, test) -> lines
    pytest_lines, pytest_skips = [], []

    def watch():
        while True:
            time.sleep(5)
            with lock:
                now = time.time()
                for pkg, t0 in started.items():
                    if pkg not in named and now - t0 > STILL_RUNNING_AFTER:
                        named.add(pkg)
                        print(f"...  {short(pkg)} still running ({now - t0:.0f} s so far)", flush=True)

    threading.Thread(target=watch, daemon=True).start()
    for raw in sys.stdin:
        try:
            ev = json.loads(raw)
        except ValueError:
            sys.stdout.write(raw)
            continue
        if not isinstance(ev, dict):
            sys.stdout.write(raw)
            continue
        act, pkg, test = ev.get("Action"), ev.get("Package", ""), ev.get("Test")
        with lock:
            if act == "build-output":
                sys.stdout.write(ev.get("Output", ""))
            elif act == "start":
                started[pkg] = time.time()
                if short(pkg) in SLOW:
                    print(f"...  {short(pkg)} started ({SLOW[short(pkg)]})", flush=True)
            elif act == "output":
                line = ev.get("Output", "")
                output.setdefault((pkg, test), []).append(line)
                if pkg.endswith("client/python/gotest"):
                    if PYTEST_SUMMARY.search(line):
                        pytest_lines.append(line.strip().strip("=").strip())
                    m = PYTEST_SKIP.match(line)
                    if m:
                        pytest_skips.append(m.group(1).strip())
            elif test and act in ("pass", "skip", "fail"):
                p = per_pkg.setdefault(pkg, {"run": 0, "skip": 0, "fail": 0})
                if "/" not in test:  # subtests count within their test
                    counts["run"] += 1
                    counts[act] += 1
                    p["run"] += 1
                    if act != "pass":
                        p[act] += 1
                lines = output.pop((pkg, test), [])
                if act == "skip" and "/" not in test:
                    reason = "no reason given"
                    for line in reversed(lines):
                        m = SKIP_REASON.match(line)
                        if m:
                            reason = m.group(1).strip()
                            break
                    skips.setdefault(reason, []).append(f"{short(pkg)}.{test}")
                elif act == "fail":
                    failed.append((pkg, test, lines))
            elif not test and act in ("pass", "fail", "skip"):
                started.pop(pkg, None)
                p = per_pkg.get(pkg, {"run": 0, "skip": 0, "fail": 0})
                word = {"pass": "ok  ", "fail": "FAIL", "skip": "--  "}[act]
                took = ev.get("Elapsed")
                extra = f"{p['run']} tests" if p["run"] else "no tests"
                if p["skip"]:
                    extra += f", {p['skip']} skipped"
                if p["fail"]:
                    extra += f", {p['fail']} failed"
                when = f"{took:.1f}s" if took is not None else ""
                print(f"{word} {short(pkg):<32} {when:>7}  {extra}", flush=True)
                if act == "fail":
                    failed_pkgs.append(pkg)
                    if not p["fail"]:  # a build failure, a panic or a timeout
                        sys.stdout.write("".join(output.pop((pkg, None), [])))
                output.pop((pkg, None), None)

    print()
    for pkg, test, lines in failed:
        print(f"--- FAIL {short(pkg)}.{test}")
        sys.stdout.write("".join(lines[-60:]))
    print(f"Go tests: {counts['run']} run, {counts['pass']} passed, {counts['skip']} skipped, {counts['fail']} failed"
          + (f"; {len(failed_pkgs)} packages failed" if failed_pkgs else ""))
    for reason, tests in sorted(skips.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(tests[:4]) + (f", and {len(tests) - 4} more" if len(tests) > 4 else "")
        print(f"  skipped {len(tests)}: {reason}\n      {shown}")
    if pytest_lines:
        print(f"pytest: {pytest_lines[-1]}")
        groups = {}
        for s in pytest_skips:
            reason = s.split(": ", 1)[-1]
            groups[reason] = groups.get(reason, 0) + 1
        for reason, n in sorted(groups.items(), key=lambda kv: -kv[1]):
            print(f"  skipped {n}: {reason}")
    return 1 if failed or failed_pkgs else 0


if __name__ == "__main__":
    sys.exit(main())
