#!/usr/bin/env python3
"""Compare two Herald builds (or one build under two settings) with `herald loadgen`, in ABBA order.

    python3 Benchmarks/tools/ab_loadgen.py --a OLD/herald --b NEW/herald [--blocks 4] -- LOADGEN ARGS
    python3 Benchmarks/tools/ab_loadgen.py --a herald --b herald --env-b HERALD_X=1 -- --rate 80000 ...
    python3 Benchmarks/tools/ab_loadgen.py --self-test

Why ABBA. On a shared machine the speed drifts within minutes, and a run can be slower or faster
for being the first or the second of two back to back. Alternating A B A B then hands every
"second" position to B: one such comparison of two identical builds showed B ahead in 9 pairs of
9. Each block here runs A B B A: the runs are paired as (A, B) and (B, A), so each build is
first in half of the pairs, and a drift over the block weighs on both alike.

What it reports (Markdown on stdout, progress on stderr): per metric the median of each build,
the median of the per-pair ratios B ÷ A, the pairs B won, lost and tied, and a two-sided sign
test (the chance of a split at least that uneven if neither build were better). The same test on
"the second run of the pair won" says whether position mattered on this machine during the
comparison; ABBA balances it either way. A sign test needs no assumption about the shape of the
noise, and with few pairs it cannot reach small p: 4 pairs of 4 give p = 0.125, 6 of 6 p = 0.031.
Comparing a build with itself (the same binary as --a and --b) measures the noise floor.

Every run must answer every notification: a run that lost or duplicated one, or timed out, stops
the comparison (its `herald loadgen` output is kept in --out).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

# (label, unit, higher is better, extract from a loadgen --json report)
METRICS = [
    ("throughput", "/s", True, lambda r: r.get("notifications_per_second")),
    ("latency p50", "ms", False, lambda r: (r.get("latency") or {}).get("p50_ms")),
    ("latency p99", "ms", False, lambda r: (r.get("latency") or {}).get("p99_ms")),
    ("worker CPU per 100k", "s", False,
     lambda r: (r.get("workers") or {}).get("cpu_seconds_per_100k_notifications")),
    ("emulator CPU", "s", False, lambda r: (r.get("other_processes") or {}).get("emulator_cpu_seconds")),
    ("redis-server CPU", "s", False, lambda r: (r.get("other_processes") or {}).get("redis_server_cpu_seconds")),
    ("worker waiting for a CPU", "s", False, lambda r: (r.get("workers") or {}).get("cpu_wait_seconds")),
]


def log(message):
    print(message, file=sys.stderr, flush=True)


def schedule(blocks):
    """Run order: A B B A per block. Returns a list of 'A'/'B'."""
    return ["A", "B", "B", "A"] * blocks


def pairs(order):
    """Adjacent runs paired: (0, 1), (2, 3), … Each pair holds one A and one B.
    Returns (index of A, index of B, whether B ran second)."""
    result = []
    for first in range(0, len(order) - 1, 2):
        second = first + 1
        if order[first] == "A":
            result.append((first, second, True))
        else:
            result.append((second, first, False))
    return result


def sign_test(wins, losses):
    """Two-sided sign test: P(a split at least this uneven | p = 1/2), ties excluded."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def median(values):
    values = sorted(values)
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def compare(reports, order, metric):
    """Per-pair comparison of one metric: medians, median ratio B/A, wins/losses/ties for B, p."""
    label, unit, higher_better, extract = metric
    a_values, b_values, ratios = [], [], []
    wins = losses = ties = 0
    second_won = second_lost = 0
    for a_index, b_index, b_second in pairs(order):
        a, b = extract(reports[a_index]), extract(reports[b_index])
        if a is None or b is None:
            continue
        a_values.append(a)
        b_values.append(b)
        if a > 0:
            ratios.append(b / a)
        if a == b:
            ties += 1
            continue
        b_better = (b > a) == higher_better
        wins += b_better
        losses += not b_better
        # Did the run that came second in its pair do better?
        if b_better == b_second:
            second_won += 1
        else:
            second_lost += 1
    return {
        "label": label, "unit": unit, "higher_better": higher_better,
        "a_median": median(a_values), "b_median": median(b_values), "ratio_median": median(ratios),
        "wins": wins, "losses": losses, "ties": ties, "p": sign_test(wins, losses),
        "second_won": second_won, "second_lost": second_lost, "p_position": sign_test(second_won, second_lost),
        "pairs": len(a_values),
    }


def number(value, unit):
    if value is None:
        return "—"
    if unit == "/s":
        return f"{value:,.0f}"
    return f"{value:.3g}" if value < 100 else f"{value:,.1f}"


def report(results, args, reports, started, ended, labels):
    first = reports[0].get("conditions", {}) if reports else {}
    out = []
    out.append("## A/B comparison with `herald loadgen` (ABBA)\n")
    out.append(f"- A: `{args.a}`{' with ' + ' '.join(args.env_a) if args.env_a else ''} ({args.label_a})")
    out.append(f"- B: `{args.b}`{' with ' + ' '.join(args.env_b) if args.env_b else ''} ({args.label_b})")
    out.append(f"- loadgen arguments: `{' '.join(args.loadgen) or '(defaults)'}`")
    out.append(f"- {args.blocks} block(s) of A B B A: {2 * args.blocks} runs of each, {2 * args.blocks} pairs; "
               f"{started} to {ended} UTC")
    out.append(f"- machine: {first.get('cores', '?')} cores, {first.get('cpu_model', '?')}, {first.get('kernel', '?')}; "
               f"load average {first.get('load_average_start', '?')} at the first run's start")
    out.append("")
    out.append(f"| metric | A median | B median | B ÷ A (median of pairs) | B better / worse / tied | p (sign test) | second of pair better / worse |")
    out.append("| --- | ---: | ---: | ---: | --- | ---: | --- |")
    for r in results:
        if r["pairs"] == 0:
            continue
        better = "higher" if r["higher_better"] else "lower"
        out.append(f"| {r['label']} ({r['unit']}, {better} is better) | {number(r['a_median'], r['unit'])} | "
                   f"{number(r['b_median'], r['unit'])} | {'—' if r['ratio_median'] is None else format(r['ratio_median'], '.3f')} | {r['wins']} / {r['losses']} / {r['ties']} | "
                   f"{r['p']:.3g} | {r['second_won']} / {r['second_lost']} (p {r['p_position']:.3g}) |")
    out.append("")
    out.append("Every run, in order:\n")
    out.append("| # | build | throughput /s | p50 ms | p99 ms | worker CPU per 100k s | emulator CPU s | redis-server CPU s |")
    out.append("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for index, (build, r) in enumerate(zip(labels, reports)):
        cells = [number(m[3](r), m[1]) for m in METRICS[:6]]
        out.append(f"| {index + 1} | {build} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("A p above 0.05 means these pairs cannot tell the builds apart; a small p for \"second of pair "
               "better\" means the machine favoured one position (ABBA balances it).")
    return "\n".join(out)


def run_one(binary, env_settings, loadgen_args, json_path, text_path, timeout):
    env = dict(os.environ)
    for setting in env_settings:
        name, _, value = setting.partition("=")
        env[name] = value
    command = [binary, "loadgen", *loadgen_args, "--json", json_path]
    with open(text_path, "w") as text:
        try:
            process = subprocess.Popen(command, stdout=text, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        except OSError as error:
            raise SystemExit(f"could not run {binary}: {error}")
        try:
            status = process.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as reason:
            # SIGTERM first: loadgen then stops the redis-server, emulator and workers it started.
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if isinstance(reason, KeyboardInterrupt):
                raise
            raise SystemExit(f"{binary} loadgen ran longer than --timeout {timeout} s; see {text_path}")
    try:
        with open(json_path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        data = None
    return status, data


def self_test():
    assert schedule(2) == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert pairs(schedule(1)) == [(0, 1, True), (3, 2, False)]
    assert abs(sign_test(0, 10) - 0.001953125) < 1e-12
    assert abs(sign_test(1, 5) - 0.21875) < 1e-12
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0
    assert abs(sign_test(4, 0) - 0.125) < 1e-12
    # B faster in every pair whatever its position: B wins all, position is even.
    order = schedule(2)
    fake = [{"notifications_per_second": 100.0 if b == "A" else 110.0} for b in order]
    r = compare(fake, order, METRICS[0])
    assert (r["wins"], r["losses"], r["second_won"], r["second_lost"]) == (4, 0, 2, 2), r
    assert abs(r["ratio_median"] - 1.1) < 1e-9
    # The second run of every pair faster, whatever the build: no build wins, position does.
    fake = [{"notifications_per_second": 100.0 + 10 * (i % 2)} for i in range(8)]
    r = compare(fake, order, METRICS[0])
    assert (r["wins"], r["losses"], r["second_won"], r["second_lost"]) == (2, 2, 4, 0), r
    # Lower is better for latency; a missing value leaves the pair out.
    fake = [{"latency": {"p99_ms": 5.0 if b == "A" else 4.0}} for b in order]
    fake[0] = {"latency": None}
    r = compare(fake, order, METRICS[2])
    assert (r["wins"], r["losses"], r["pairs"]) == (3, 0, 3), r
    print("ab_loadgen self-test: ok")


def main():
    parser = argparse.ArgumentParser(description="A/B comparison of two Herald builds with herald loadgen, in ABBA order.")
    parser.add_argument("--a", help="herald binary A (the baseline)")
    parser.add_argument("--b", help="herald binary B (the change; may be the same binary as A with --env-b)")
    parser.add_argument("--env-a", action="append", default=[], metavar="NAME=VALUE", help="environment for A's runs (repeatable)")
    parser.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE", help="environment for B's runs (repeatable)")
    parser.add_argument("--label-a", default="A", help="name of A in the report (default A)")
    parser.add_argument("--label-b", default="B", help="name of B in the report (default B)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks of A B B A (default 4: 8 runs of each)")
    parser.add_argument("--out", help="directory for every run's report and JSON (default: a temporary one, removed)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one run may take (default 1800)")
    parser.add_argument("--self-test", action="store_true", help="check the statistics and the schedule, then exit")
    parser.add_argument("loadgen", nargs=argparse.REMAINDER, help="-- then herald loadgen's arguments (not --json)")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not args.a or not args.b:
        parser.error("--a and --b are required (or --self-test)")
    if not 1 <= args.blocks <= 100:
        parser.error("--blocks must be 1 to 100")
    if args.timeout < 1:
        parser.error("--timeout must be at least 1 second")
    for setting in args.env_a + args.env_b:
        if "=" not in setting or setting.startswith("="):
            parser.error(f"--env-a/--env-b take NAME=VALUE, not {setting!r}")
    if args.loadgen and args.loadgen[0] == "--":
        args.loadgen = args.loadgen[1:]
    if "--json" in args.loadgen:
        parser.error("the comparison writes each run's --json itself; leave it out")
    for binary in (args.a, args.b):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            parser.error(f"{binary} is not an executable file")

    out_dir = args.out or tempfile.mkdtemp(prefix="herald-ab-")
    os.makedirs(out_dir, exist_ok=True)
    order = schedule(args.blocks)
    reports = []
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    try:
        for index, build in enumerate(order):
            binary, env = (args.a, args.env_a) if build == "A" else (args.b, args.env_b)
            stem = os.path.join(out_dir, f"run-{index + 1:02d}-{build}")
            log(f"run {index + 1} of {len(order)}: {build} ({args.label_a if build == 'A' else args.label_b})")
            status, data = run_one(binary, env, args.loadgen, stem + ".json", stem + ".txt", args.timeout)
            if data is None:
                raise SystemExit(f"run {index + 1} ({build}) wrote no report (exit {status}); see {stem}.txt")
            outcomes = data.get("outcomes") or {}
            if status != 0 or outcomes.get("lost") or outcomes.get("duplicated") or data.get("timed_out"):
                raise SystemExit(f"run {index + 1} ({build}) failed: exit {status}, lost {outcomes.get('lost')}, "
                                 f"duplicated {outcomes.get('duplicated')}, timed out {data.get('timed_out')}; see {stem}.txt")
            reports.append(data)
    finally:
        if not args.out and len(reports) == len(order):
            shutil.rmtree(out_dir, ignore_errors=True)
    ended = time.strftime("%H:%M", time.gmtime())
    results = [compare(reports, order, metric) for metric in METRICS]
    labels = [f"{build} ({args.label_a if build == 'A' else args.label_b})" for build in order]
    print(report(results, args, reports, started, ended, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
