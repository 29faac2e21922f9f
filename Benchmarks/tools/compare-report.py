#!/usr/bin/env python3
"""The Markdown report (and --json) of Benchmarks/compare.sh.

    compare-report.py RESULTS.tsv [JSON_OUT]

RESULTS.tsv: one line per run, tab-separated:
  section latency tool run n "rate seconds ok not_ok detail" client_cpu_s emulator_cpu_s
  "accepted rejected streams connections reasons" "load_before load_after"
The conditions come from CMP_* environment variables (compare.sh exports them).
"""
import json
import os
import statistics
import sys


def env(name, default=""):
    return os.environ.get("CMP_" + name, default)


def parse(path):
    rows = []
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        section, latency, tool, run, n, result, cpu, emu_cpu, emu, loads = f
        rate, seconds, ok, not_ok, detail = (result.split(" ", 4) + [""] * 5)[:5]
        e = emu.split(" ")
        details = dict(kv.split("=", 1) for kv in detail.split(",") if "=" in kv)
        rows.append(dict(section=section, latency=int(latency), tool=tool, run=int(run), n=int(n),
                         rate=float(rate or 0), seconds=float(seconds or 0), ok=int(ok or 0), not_ok=int(not_ok or 0),
                         detail=detail, details=details, client_cpu_s=float(cpu or 0), emulator_cpu_s=float(emu_cpu or 0),
                         emulator=dict(accepted=e[0], rejected=e[1], streams=e[2], connections=e[3],
                                       reasons=e[4] if len(e) > 4 else "-"),
                         load_before=loads.split(" ")[0], load_after=loads.split(" ")[-1]))
    return rows


def g(x):
    return f"{x:,.0f}"


def main():
    rows = parse(sys.argv[1])
    json_out = sys.argv[2] if len(sys.argv) > 2 else ""
    conns, streams = int(env("CONNECTIONS")), int(env("STREAMS"))

    def runs(latency, tool, section=None):
        # "latency-ref" rows are 0 ms runs paired with the sweep's latency-L runs: they carry L
        # in their latency column and count only as that latency's reference.
        return [r for r in rows if r["latency"] == latency and r["tool"] == tool
                and (r["section"] == section if section else r["section"] != "latency-ref")]

    def median(latency, tool, key="rate", section=None):
        values = [r[key] for r in runs(latency, tool, section)]
        return statistics.median(values) if values else None

    def per_notification(latency, tool, seconds_of):
        values = [seconds_of(r) * 1e6 / r["ok"] for r in runs(latency, tool) if r["ok"]]
        return statistics.median(values) if values else None

    tools0 = []
    for r in rows:
        if r["latency"] == 0 and r["section"] != "latency-ref" and r["tool"] not in tools0:
            tools0.append(r["tool"])
    order = {"h2load": 0, "herald-1w": 1, "herald-2w": 9}
    tools0.sort(key=lambda t: order.get(t, 5))

    def describe(tool):
        if tool == "h2load":
            return "h2load", f"{conns} × {streams}, 1 thread, no queue"
        if tool.startswith("herald-"):
            w = int(tool[len("herald-"):-1])
            return (f"Herald, {w} worker{'s' if w > 1 else ''}",
                    f"drain a Redis backlog; {w} × {conns} connections × {streams} streams")
        s = int(tool[len("aioapns-"):])
        note = " (identical)" if s == streams else ""
        return "aioapns (peer)", f"{conns} connections × {s} in flight{note}"

    herald = median(0, "herald-1w")
    h2load = median(0, "h2load")
    peers = {t: median(0, t) for t in tools0 if t.startswith("aioapns-")}
    best_peer = max(peers, key=lambda t: peers[t]) if peers else None
    identical_peer = f"aioapns-{streams}" if f"aioapns-{streams}" in peers else None

    out = []
    p = out.append
    p("## Herald vs the HTTP/2 ceiling and a peer — one machine, one run")
    p("")
    p(f"- machine: {env('NPROC')} cores ({env('CPU_MODEL')}), shared by the emulator, the client, redis-server and "
      f"anything else running; load average before {env('LOAD_BEFORE')}, after {env('LOAD_AFTER')}; "
      f"{int(env('ELAPSED', '0')) // 60} min {int(env('ELAPSED', '0')) % 60} s")
    tokens = int(env('TOKENS', '1'))
    p(f"- notifications: POST /3/device/<64-hex token> to {g(tokens)} distinct token(s) "
      f"({'h2load cycling through as many paths, ' if tokens > 1 else ''}Herald's loadgen enqueueing to as many; "
      f"the peer sends one), `authorization: bearer` ES256 JWT (team TEAM000001, key "
      f"KEY0000001, verified by the emulator), `apns-topic: com.example.app`, `apns-push-type: alert`, "
      f"{env('PAYLOAD')}-byte JSON body; {conns} connections × {streams} concurrent streams per connection")
    p(f"- N: {g(int(env('N')))} per h2load / Herald run, {env('RUNS')} round(s) at latency 0 in rotated order "
      f"(after an uncounted warm-up of each); the peer {g(int(env('PEER_N')))} per run (after a warm-up of N/10), "
      f"stopping after {env('PEER_MAX_SECONDS')} s, in its own rounds after h2load's and Herald's; before each "
      f"run the emulator forgets the apns-ids it accepted")
    p(f"- emulator: `herald mock-apns` (TLS, HTTP/2, 1 stream until the first valid request, then {streams}); one instance "
      f"for every client at latency 0, one per latency in the sweep")
    p(f"- herald: {env('BIN')}{' (' + env('LABEL') + ')' if env('LABEL') else ''}; repository at {env('COMMIT')}; "
      f"{env('SWIFT')}; redis-server {env('REDIS')}; {env('H2LOAD')}"
      + (f"; peer {env('PEER')}" if env('PEER') else ""))
    p("")

    p("### Throughput at emulator latency 0")
    p("")
    p("| client | setting | runs | median /s | min – max /s | answered 200 / sent | client CPU µs/notif. | emulator CPU µs/notif. | Herald (1 worker) ÷ this |")
    p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for t in tools0:
        rs = runs(0, t)
        name, setting = describe(t)
        m = median(0, t)
        ok = sum(r["ok"] for r in rs)
        sent = sum(r["ok"] + r["not_ok"] for r in rs)
        cpu = per_notification(0, t, lambda r: r["client_cpu_s"])
        emu = per_notification(0, t, lambda r: r["emulator_cpu_s"])
        ratio = f"{herald / m:.2f}" if herald and m and t != "herald-1w" else "—"
        p(f"| {name} | {setting} | {len(rs)} | **{g(m)}** | {g(min(r['rate'] for r in rs))} – {g(max(r['rate'] for r in rs))} "
          f"| {g(ok)} / {g(sent)} | {cpu:.1f} | {emu:.1f} | {ratio} |" if m is not None and cpu is not None and emu is not None
          else f"| {name} | {setting} | {len(rs)} | failed | | | | | |")
    p("")
    summary = dict(herald_per_second=herald, h2load_per_second=h2load,
                   peer_per_second={t: peers[t] for t in peers})
    if herald and h2load:
        summary["herald_over_h2load"] = herald / h2load
        p(f"- **Herald ÷ h2load = {herald / h2load:.2f}** (target ≥ 0.6)")
    if best_peer and peers[best_peer]:
        summary["herald_over_best_peer"] = herald / peers[best_peer]
        p(f"- **Herald ÷ aioapns = {herald / peers[best_peer]:.1f}×** against aioapns' best setting tried "
          f"({describe(best_peer)[1]}; target ≥ 10×)"
          + (f"; {herald / peers[identical_peer]:.1f}× at the identical {conns} × {streams}" if identical_peer and identical_peer != best_peer and peers[identical_peer] else ""))
        if identical_peer:
            summary["herald_over_peer_identical"] = herald / peers[identical_peer] if peers[identical_peer] else None
    p("- client CPU: h2load and aioapns: the process (user+sys); Herald: the worker process(es) only — redis-server and "
      "the load generator are listed per run below. Emulator CPU: its /proc/PID/stat during the run.")
    p("")

    # Latency sweep.
    latencies = sorted({r["latency"] for r in rows if r["section"] == "latency"} | ({0} if rows else set()))
    if any(r["section"] == "latency" for r in rows):
        p("### Throughput as the emulator's latency grows")
        p("")
        paired = any(r["section"] == "latency-ref" for r in rows)
        p(f"Bound = min(CPU limit, connections × streams / RTT) with RTT = the emulator's added latency, "
          f"connections × streams = {conns} × {streams} = {conns * streams:,}; the CPU limit of each client is its "
          + ("own median rate at 0 ms in the runs paired with that latency's (same emulator, taken right "
             "before or after each; column '0 ms pair'), so that a drift of the machine's speed between "
             "sections does not enter the ratio." if paired else "own median rate at latency 0 above."))
        p("")
        p("| latency ms | C × M / RTT /s | h2load /s | h2load 0 ms pair /s | h2load ÷ bound | Herald /s | Herald 0 ms pair /s | Herald ÷ bound | Herald ÷ h2load |")
        p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        sweep = []
        for L in latencies:
            bound = conns * streams / (L / 1000) if L else float("inf")
            h, w = median(L, "h2load"), median(L, "herald-1w")
            # The CPU limit: the paired 0 ms runs where there are any, else the main rounds.
            hz = (median(L, "h2load", section="latency-ref") if L else None) or median(0, "h2load")
            wz = (median(L, "herald-1w", section="latency-ref") if L else None) or median(0, "herald-1w")
            hb = min(hz, bound) if hz else None
            wb = min(wz, bound) if wz else None
            sweep.append(dict(latency_ms=L, connection_stream_bound=None if L == 0 else bound, h2load=h, herald=w,
                              h2load_zero_ms_pair=hz, herald_zero_ms_pair=wz,
                              h2load_over_bound=h / hb if h and hb else None, herald_over_bound=w / wb if w and wb else None))
            p(f"| {L} | {'∞' if L == 0 else g(bound)} | {g(h) if h else '—'} | {g(hz) if hz else '—'} | {f'{h / hb:.2f}' if h and hb else '—'} "
              f"| {g(w) if w else '—'} | {g(wz) if wz else '—'} | {f'{w / wb:.2f}' if w and wb else '—'} | {f'{w / h:.2f}' if w and h else '—'} |")
        summary["latency_sweep"] = sweep
        p("")
        p("(target at 20 ms: Herald ≥ 0.8 × bound)")
        p("")

    # Workers.
    if runs(0, "herald-2w"):
        p("### 1 vs 2 worker processes (latency 0, same emulator, same rounds)")
        p("")
        p("| workers | connections in all | median /s | ÷ 1 worker | worker CPU µs/notif. | redis-server CPU µs/notif. | peak RSS per worker, MB (max) |")
        p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        base = median(0, "herald-1w")
        for w in (1, 2):
            t = f"herald-{w}w"
            m = median(0, t)
            cpu = per_notification(0, t, lambda r: r["client_cpu_s"])
            redis = per_notification(0, t, lambda r: float(r["details"].get("redis_cpu_s", 0)))
            rss = max(float(r["details"].get("peak_rss_mb", 0)) for r in runs(0, t))
            p(f"| {w} | {w * conns} | {g(m)} | {m / base:.2f} | {cpu:.1f} | {redis:.1f} | {rss:.1f} |")
        p("")

    p("### Every run")
    p("")
    p("| section | latency ms | run | client | /s | s | 200 | not 200 | client CPU s | emulator CPU s | emulator acc/rej/streams/conns | load 1-min before → after | detail |")
    p("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |")
    for r in rows:
        e = r["emulator"]
        latency_text = f"0 (pair of {r['latency']})" if r["section"] == "latency-ref" else r["latency"]
        p(f"| {r['section']} | {latency_text} | {r['run']} | {r['tool']} | {g(r['rate'])} | {r['seconds']:.2f} | {r['ok']} | {r['not_ok']} "
          f"| {r['client_cpu_s']:.2f} | {r['emulator_cpu_s']:.2f} | {e['accepted']}/{e['rejected']}/{e['streams']}/{e['connections']} "
          f"| {r['load_before']} → {r['load_after']} | {r['detail'].replace(',', ', ')} |")
    print("\n".join(out))

    if json_out:
        conditions = {k[4:].lower(): v for k, v in os.environ.items() if k.startswith("CMP_")}
        with open(json_out, "w") as f:
            json.dump(dict(conditions=conditions, summary=summary, runs=rows), f, indent=2)
        print(f"\n(wrote {json_out})")


if __name__ == "__main__":
    main()
