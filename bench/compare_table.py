#!/usr/bin/env python3
"""compare_table.py OUTDIR: the Markdown tables of bench/compare.sh.

Reads OUTDIR/meta.txt, OUTDIR/run*/ (one JSON file per consumer and mode)
and OUTDIR/al-concurrency.json; every figure is the median over the runs
that produced it, with the spread (min–max) beside it (a consumer that
failed in a run is left out of that run). Latency "over floor" is taken
per round against the C raw-socket reader of the same round (the two
alternate, after a warm-up); a target counts as met or missed only when
every round agrees, otherwise it is "not resolved". CPU ratios compare
consumers of the same wire format: the OpenAI-format peer against
agentloop's OpenAI figure.
"""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
runs = sorted(glob.glob(os.path.join(out, "run*")))


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def per_run(fn):
    vals = []
    for d in runs:
        try:
            vals.append(fn(d))
        except (TypeError, KeyError, ZeroDivisionError):
            vals.append(None)
    return vals


def fmt(x, nd=2):
    if x is None:
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{nd}f}"


def signed(x):
    return "—" if x is None else ("+" if x >= 0 else "−") + fmt(abs(x), 1)


def spread(xs, nd=2, sign=False):
    """median (min–max) of the values that exist."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    f = (lambda v: signed(v)) if sign else (lambda v: fmt(v, nd))
    if len(xs) == 1 or min(xs) == max(xs):
        return f(statistics.median(xs))
    return f"{f(statistics.median(xs))} ({f(min(xs))} – {f(max(xs))})"


def resolved(xs, limit):
    """met / missed only when every value agrees."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    if max(xs) <= limit:
        return "met"
    if min(xs) > limit:
        return "**missed**"
    return "not resolved (the rounds fall on both sides)"


meta = {}
with open(os.path.join(out, "meta.txt")) as f:
    for line in f:
        k, _, v = line.rstrip("\n").partition("=")
        meta[k] = v

al_tp = lambda d: load(os.path.join(d, "al-throughput.json"))
al_lat = lambda d: load(os.path.join(d, "al-latency.json"))
al_disp = lambda d: load(os.path.join(d, "al-dispatch.json"))
peer = lambda d, name: load(os.path.join(d, name + ".json"))
peer_ru = lambda d, name: load(os.path.join(d, name + ".ru"))

c_floor_p50 = per_run(lambda d: al_lat(d)["floor"]["p50_us"])
c_floor_p99 = per_run(lambda d: al_lat(d)["floor"]["p99_us"])
al_cpu_runs = per_run(lambda d: al_tp(d)["agent"]["cpu_us_per_event"])
al_cpu = med(al_cpu_runs)
al_tp_oa = lambda d: load(os.path.join(d, "al-throughput-openai.json"))
al_cpu_oa_runs = per_run(lambda d: al_tp_oa(d)["agent"]["cpu_us_per_event"])
al_cpu_oa = med(al_cpu_oa_runs)


def rounds(key):
    """Every round's value of a latency spread field, over all runs."""
    vals = []
    for d in runs:
        j = al_lat(d)
        if j and key in j:
            vals.extend(j[key]["runs"])
    return vals


def over(vals, floor):
    return med([v - f if v is not None and f is not None else None
                for v, f in zip(vals, floor)])


nruns = meta.get("runs", "?").split()[0]
print(f"Measured {meta.get('date', '?')} with `bench/compare.sh` "
      f"({nruns} runs; every figure is the median over the runs, with "
      "its spread (min – max) where the table shows it).")
print()
print(f"- machine: {meta.get('host', '?')}")
print(f"- load: before `{meta.get('uptime_before', '?').strip()}`; "
      f"after `{meta.get('uptime_after', '?').strip()}`")
loads = [meta[k] for k in sorted(meta) if k.startswith("load_run")]
if loads:
    print(f"- 1-minute load average at the start of each run: {', '.join(loads)} "
          "(2 cores; other builds share them)")
print(f"- {meta.get('agentloop', 'agentloop ?')}")
if "node" in meta:
    print(f"- peers: Node {meta['node']}, @anthropic-ai/sdk "
          f"{meta.get('@anthropic-ai/sdk')}, openai {meta.get('openai')}, "
          f"ai {meta.get('ai')} with @ai-sdk/anthropic "
          f"{meta.get('@ai-sdk/anthropic')}")
print(f"- settings: runs={meta.get('runs', '')}")
print()

# ---- streaming: CPU, latency, memory ----------------------------------------
# (label, CPU runs, p50 runs, p99 runs, rss, is_floor, wire format)
rows = []
rows.append(("raw socket + memchr, C (floor)",
             per_run(lambda d: al_tp(d)["floor"]["cpu_us_per_event"]),
             c_floor_p50, c_floor_p99, None, True, "anthropic"))
rows.append(("**agentloop** (agent subscriber)", al_cpu_runs,
             per_run(lambda d: al_lat(d)["agent"]["p50_us"]),
             per_run(lambda d: al_lat(d)["agent"]["p99_us"]),
             med(per_run(lambda d: al_tp(d)["max_rss_kb"])), False,
             "anthropic"))
if al_cpu_oa is not None:
    rows.append(("**agentloop**, OpenAI wire format", al_cpu_oa_runs,
                 [None], [None],
                 med(per_run(lambda d: al_tp_oa(d)["max_rss_kb"])), False,
                 "openai"))
names = [("node-floor", "raw socket, Node (net.Socket)", "anthropic"),
         ("anthropic-raw", "Anthropic SDK, raw stream iterator", "anthropic"),
         ("anthropic-stream", "Anthropic SDK, messages.stream()", "anthropic"),
         ("openai", "OpenAI SDK, chat.completions stream", "openai"),
         ("vercel", "Vercel AI SDK streamText", "anthropic")]
for key, label, wire in names:
    cpu_runs = per_run(lambda d: peer(d, key + "-cpu")["cpu_stream_us"] /
                       peer(d, key + "-cpu")["events"])
    if med(cpu_runs) is None:
        continue
    rows.append((label, cpu_runs,
                 per_run(lambda d: peer(d, key + "-lat")["latency_us"]["p50"]),
                 per_run(lambda d: peer(d, key + "-lat")["latency_us"]["p99"]),
                 med(per_run(lambda d: peer_ru(d, key + "-cpu")["maxrss_kb"])),
                 False, wire))

print("| consumer | wire format | CPU µs per text event, median (min – max) "
      "| × agentloop, same format | latency p50 / p99 µs "
      "| over the C floor p50 / p99 µs | peak RSS |")
print("|---|---|---|---|---|---|---|")
for label, cpu_runs, p50, p99, rss, is_floor, wire in rows:
    cpu = med(cpu_runs)
    ref = al_cpu_oa if wire == "openai" else al_cpu
    ratio = cpu / ref if cpu is not None and ref else None
    if is_floor:
        lat = f"{fmt(med(p50), 1)} / {fmt(med(p99), 1)} absolute"
        overf = "—"
    elif med(p50) is None:
        lat = "not measured"
        overf = "—"
    else:
        lat = f"{fmt(med(p50), 1)} / {fmt(med(p99), 1)}"
        overf = f"{signed(over(p50, c_floor_p50))} / {signed(over(p99, c_floor_p99))}"
    print(f"| {label} | {wire} | {spread(cpu_runs, 3)} "
          f"| {fmt(ratio, 2) + '×' if ratio else '—'} "
          f"| {lat} | {overf} | {fmt(rss / 1024, 1) + ' MB' if rss else '—'} |")
print()
print("CPU: the consumer process's CPU from just before the request to the "
      "last event (agentloop: getrusage; Node: process.cpuUsage), divided by "
      "the text events of one flat-out stream; agentloop's figure is the "
      "median of alternating rounds after a warm-up, and the ratio divides "
      "by agentloop on the same wire format. Latency: server send stamp → "
      "the consumer's text callback, events paced 1 ms apart (the latency "
      "peers and the floors speak the Anthropic format). Peak RSS: "
      "ru_maxrss of the flat-out run's process.")
print()

# ---- tools ----------------------------------------------------------------------
print("| consumer | tool start after its block's stop, p50 / p90 µs "
      "| reply end after the block's stop, p50 ms | started before the reply ended |")
print("|---|---|---|---|")
for series, label in (("in_process", "**agentloop**, in-process tool"),
                      ("spawned", "**agentloop**, spawned tool (bash `true`)")):
    s50 = med(per_run(lambda d: al_disp(d)["series"][series]["us"]["dispatch"]["p50"]))
    s90 = med(per_run(lambda d: al_disp(d)["series"][series]["us"]["dispatch"]["p90"]))
    e50 = med(per_run(lambda d: al_disp(d)["series"][series]["us"]["reply_end"]["p50"]))
    before = med(per_run(lambda d: al_disp(d)["series"][series]["started_before_reply_end"] /
                         al_disp(d)["series"][series]["calls"]))
    print(f"| {label} | {fmt(s50, 1)} / {fmt(s90, 1)} | {fmt(e50 / 1e3 if e50 else None, 1)} "
          f"| {fmt(before * 100 if before is not None else None, 0)}% |")
tool_names = [("anthropic-runner", "Anthropic SDK tool runner (streaming)"),
              ("anthropic-runner-eager", "Anthropic SDK tool runner, runToolsEagerly"),
              ("anthropic-stream-eager", "Anthropic SDK messages.stream(), on contentBlock"),
              ("openai-runner", "OpenAI SDK runTools (streaming)"),
              ("openai-stream-eager", "OpenAI SDK stream, on arguments.done"),
              ("vercel", "Vercel AI SDK streamText + execute")]
for key, label in tool_names:
    s50 = med(per_run(lambda d: peer(d, key + "-tool")["tool_start_us"]["p50"]))
    if s50 is None:
        continue
    s90 = med(per_run(lambda d: peer(d, key + "-tool")["tool_start_us"]["p90"]))
    e50 = med(per_run(lambda d: peer(d, key + "-tool")["reply_end_us"]["p50"]))
    before = med(per_run(lambda d: peer(d, key + "-tool")["started_before_reply_end"] /
                         peer(d, key + "-tool")["iterations"]))
    print(f"| {label} | {fmt(s50, 1)} / {fmt(s90, 1)} | {fmt(e50 / 1e3 if e50 else None, 1)} "
          f"| {fmt(before * 100 if before is not None else None, 0)}% |")
print()
print("Every tool reply is: a text block, the tool_use block, then a text tail "
      "streamed for ~100 ms (50 deltas 2 ms apart); the start is measured from the send stamp of the "
      "tool block's content_block_stop (OpenAI: its last tool_calls chunk).")
print()

# ---- targets ------------------------------------------------------------------
conc = load(os.path.join(out, "al-concurrency.json"))
lat50 = over(per_run(lambda d: al_lat(d)["agent"]["p50_us"]), c_floor_p50)
lat99 = over(per_run(lambda d: al_lat(d)["agent"]["p99_us"]), c_floor_p99)
sp = med(per_run(lambda d: al_disp(d)["series"]["spawned"]["us"]["dispatch"]["p50"]))
ip = med(per_run(lambda d: al_disp(d)["series"]["in_process"]["us"]["dispatch"]["p50"]))
ipb = med(per_run(lambda d: al_disp(d)["series"]["in_process"]["us"]["block_completed"]["p50"]))


def verdict(x, limit):
    return "—" if x is None else ("met" if x <= limit else "**missed**")


print("| target | measured | |")
print("|---|---|---|")
r50 = rounds("over_floor_p50_per_round")
r99 = rounds("over_floor_p99_per_round")
print(f"| CPU per text event ≤ 0.15 µs (Anthropic format) | {spread(al_cpu_runs, 3)} µs "
      f"| {resolved(al_cpu_runs, 0.15)} |")
print(f"| latency over the floor ≤ +5 µs p50 | {spread(r50, 1, True)} µs "
      f"({len(r50)} rounds) | {resolved(r50, 5)} |")
print(f"| latency over the floor ≤ +25 µs p99 | {spread(r99, 1, True)} µs "
      f"({len(r99)} rounds) | {resolved(r99, 25)} |")
print(f"| tool start ≤ 1 ms p50, spawned | {fmt(sp, 1)} µs | {verdict(sp, 1000)} |")
print(f"| tool start ≤ 0.05 ms p50, in-process | {fmt(ip, 1)} µs (of which the block's "
      f"own delivery {fmt(ipb, 1)} µs) | {verdict(ip, 50)} |")
fconc = load(os.path.join(out, "floor-concurrency.json"))
if conc:
    k = conc["streams"]
    # When the machine did not deliver K x R, judge the share the full
    # rate needs (CPU per event x K x R), not the share of a slower run.
    share = conc.get("client_share_at_full_rate", conc["client_cpu_share"])
    print(f"| {k:,} streams × 20 events/s: ≤ 50% of a core | "
          f"{share * 100:.1f}% at the full rate ({conc['client_cpu_share'] * 100:.1f}% "
          f"measured at {conc.get('delivered_fraction', 1) * 100:.0f}% of it) "
          f"| {verdict(share, 0.5)} |")
    print(f"| … p99 ≤ 5 ms | {conc['latency']['p99_us'] / 1e3:.2f} ms "
          f"| {verdict(conc['latency']['p99_us'], 5000)} |")
    print(f"| ≤ 16 KB RSS per open plaintext stream | {conc['rss_per_stream_kb']:.1f} KB "
          f"| {verdict(conc['rss_per_stream_kb'], 16)} |")
    print()
    print("| concurrency, one run each | delivered of K × R | client CPU µs/event "
          "| client share | share at the full rate | server share | p50 / p99 ms "
          "| RSS per stream |")
    print("|---|---|---|---|---|---|---|---|")
    for label, c in (("**agentloop** agents, one shared client", conc),
                     ("raw-socket floor readers", fconc)):
        if not c:
            continue
        print(f"| {label} | {c['delivered_fraction'] * 100:.0f}% | {c['cpu_us_per_event']:.2f} "
              f"| {c['client_cpu_share'] * 100:.1f}% | {c['client_share_at_full_rate'] * 100:.1f}% "
              f"| {c['server_cpu_share'] * 100:.1f}% "
              f"| {c['latency']['p50_us'] / 1e3:.2f} / {c['latency']['p99_us'] / 1e3:.2f} "
              f"| {c['rss_per_stream_kb']:.1f} KB |")
    print()
    print(f"{k:,} streams at 20 events/s, {conc['window_s']:.1f} s window; errors "
          f"{conc['errors']}; {conc['nofile']}.")
