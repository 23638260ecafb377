#!/usr/bin/env bash
# benchmarks/run-nodes.sh — acx across 2 nodes x 2 ranks of the test bed
# (scripts/nodes-up: network namespaces on this machine, TCP between them,
# shared memory within one) with the inter-node links limited to a fixed
# bandwidth, at each of several bandwidths, side by side in one run:
#
#   * all-reduce of 1..64 MiB through acx (acx-bench-allreduce) against
#     plain MPI_Allreduce in the same loop (--compare-raw), 4 ranks;
#   * the training step (acx-bench-train, synthetic MLP, --only acx) under
#     NO_SHARD, FULL_SHARD and HYBRID_SHARD, 4 ranks: HYBRID_SHARD shards
#     within each node over shared memory and all-reduces 1/2 of the
#     gradient across the link, FULL_SHARD gathers and reduce-scatters the
#     whole model across it (docs/multi-node.md);
#   * what the model needs: the link's bandwidth (a 16 MiB broadcast from
#     a rank on node 1 to one on node 2) and latency (an 8-byte all-reduce
#     between them), shared memory's bandwidth (a 16 MiB all-reduce of 2
#     ranks on one node); and the step times benchmarks/model-scaling.py
#     predicts from them and from the compute-only step the training runs
#     measured.
#
#   benchmarks/run-nodes.sh [BUILD_DIR] [--out DIR] [--rates "1gbit 100mbit"]
#       [--dims 1024,2048,2048,256] [--steps 6] [--sizes 1M:64M] [--iters 3]
#       [--name PREFIX] [--quick]
#
# BUILD_DIR  a built tree (default build/): acx-bench-allreduce, -bcast and
#            acx-bench-train (`make benchmarks/acx-bench-train`); nothing is
#            built here.
# --rates L  the link bandwidths, tc rates (default "1gbit 100mbit"); the bed
#            is made anew for each (nodes-up --rate) and removed after it.
# --dims D   the synthetic MLP (default 1024,2048,2048,256: 6.8 M parameters,
#            27 MB of fp32 gradients — large enough that the links, not the
#            shared cores, decide the step at 100mbit).
# --steps S  timed training steps per strategy (default 6, in 2 rounds, after
#            1 warm-up step; acx-bench-train's step_ms is the median).
# --sizes R  all-reduce sizes, acx-bench-allreduce's -m (default 1M:64M).
# --iters I  timed all-reduces per size and side (default 3; 1 warm-up).
# --name P   the bed's prefix (default acxbench, so a test bed acxnode* or a
#            test's acx<pid>n* is left alone).
# --quick    a smoke run in seconds: 1gbit only, a small MLP, 2 steps, 1..2
#            MiB; the numbers mean nothing.
# --out DIR  writes DIR/nodes.md (the section), DIR/nodes-allreduce.dat,
#            DIR/nodes-train.dat, DIR/nodes-links.dat and every run's output
#            under DIR/nodes/; without it a temporary directory, and nodes.md
#            is printed.
#
# Root only (namespaces, tc). Exit status: 0 ok; 1 a run failed; 2 usage;
# 77 the bed cannot be made here (nodes-up's reason on stderr). The bed is
# removed on every way out (trap). Each measurement is preceded and
# followed by the load average, written into the report: the machine's
# cores are shared with whatever else runs.
set -euo pipefail

me=run-nodes.sh
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=
out=
rates="1gbit 100mbit"
dims=1024,2048,2048,256
steps=6
sizes=1M:64M
iters=3
prefix=acxbench
quick=0
need() { [ $# -ge 2 ] || { echo "$me: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
    --out) need "$@"; out=$2; shift 2 ;;
    --rates) need "$@"; rates=$2; shift 2 ;;
    --dims) need "$@"; dims=$2; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    --sizes) need "$@"; sizes=$2; shift 2 ;;
    --iters) need "$@"; iters=$2; shift 2 ;;
    --name) need "$@"; prefix=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h | --help) sed -n '2,49s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "$me: unknown option '$1'" >&2; exit 2 ;;
    *)
        [ -z "$build" ] || { echo "$me: unexpected argument '$1'" >&2; exit 2; }
        build=$1; shift ;;
    esac
done
if [ "$quick" = 1 ]; then
    rates=1gbit dims=256,512,512,64 steps=2 sizes=1M:2M iters=1
fi
case $steps in *[!0-9]* | '' | 0 | 1) echo "$me: invalid --steps value '$steps' (expected an integer >= 2)" >&2; exit 2 ;; esac
case $iters in *[!0-9]* | '' | 0) echo "$me: invalid --iters value '$iters' (expected an integer >= 1)" >&2; exit 2 ;; esac
case $dims in
[0-9]*,[0-9]*,[0-9]*,[0-9]*) ;;
*) echo "$me: invalid --dims value '$dims' (expected IN,H1,H2,OUT)" >&2; exit 2 ;;
esac
[ -n "$rates" ] || { echo "$me: --rates is empty" >&2; exit 2; }
for r in $rates; do
    case $r in
    [0-9]*bit) ;;
    *) echo "$me: invalid --rates value '$r' (expected tc rates such as 1gbit, 100mbit)" >&2; exit 2 ;;
    esac
done
build=${build:-$top/build}
bench=$build/benchmarks
for b in acx-bench-allreduce acx-bench-bcast acx-bench-train; do
    [ -x "$bench/$b" ] || { echo "$me: $bench/$b not built (make benchmarks/$b)" >&2; exit 1; }
done
command -v mpirun >/dev/null 2>&1 || { echo "$me: mpirun not found" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "$me: python3 not found (the report and the model need it)" >&2; exit 1; }

print_md=0
if [ -z "$out" ]; then
    out=$(mktemp -d)
    print_md=1
fi
mkdir -p "$out/nodes"
runs=$out/nodes
made=0

# shellcheck disable=SC2317 # (called by the trap)
cleanup() {
    rc=$?
    if [ "$made" = 1 ]; then
        "$top/scripts/nodes-down" --name "$prefix" >&2 || { echo "$me: nodes-down --name $prefix failed" >&2; rc=1; }
        made=0
    fi
    [ "$print_md" = 0 ] || rm -rf "$out"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

load() { cut -d' ' -f1 /proc/loadavg; }

# quote ARGS...: one string that sh -c splits back into ARGS (nodes-exec
# has ssh's calling convention: its words are joined and run by sh -c)
quote() {
    local q='' a
    for a in "$@"; do q="$q '${a//\'/\'\\\'\'}'"; done
    printf '%s\n' "${q# }"
}

# on_bed NAME HOSTS NP PROGRAM ARGS...: mpirun inside node 1 across HOSTS;
# stdout to $runs/NAME.txt, stderr to $runs/NAME.err, the load average
# before and after to $runs/NAME.load
on_bed() {
    local name=$1 hosts=$2 np=$3 rc=0
    shift 3
    echo "$me: [$(date -u +%H:%M:%S), load $(load)] $name: mpirun --host $hosts -np $np $(basename "$1") ${*:2}" >&2
    local l0
    l0=$(load)
    timeout -k 10 900 "$top/scripts/nodes-exec" "${prefix}1" \
        "$(quote mpirun --host "$hosts" -np "$np" "$@")" >"$runs/$name.txt" 2>"$runs/$name.err" || rc=$?
    echo "$l0 $(load)" >"$runs/$name.load"
    if [ "$rc" -ne 0 ]; then
        tail -n 20 "$runs/$name.err" >&2
        echo "$me: $name failed (exit $rc)" >&2
        return 1
    fi
}

h1=${prefix}1 h2=${prefix}2
t0=$(date +%s)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
failed=0
for rate in $rates; do
    rc=0
    "$top/scripts/nodes-up" 2 --rate "$rate" --name "$prefix" 2>"$runs/nodes-up-$rate.err" || rc=$?
    if [ "$rc" -eq 77 ]; then
        echo "$me: skipped: $(cat "$runs/nodes-up-$rate.err")" >&2
        exit 77
    elif [ "$rc" -ne 0 ]; then
        cat "$runs/nodes-up-$rate.err" >&2
        # a bed of this prefix left over by a killed run: nodes-up refuses
        # to touch it, and so does this script
        echo "$me: scripts/nodes-up 2 --rate $rate --name $prefix exited $rc" >&2
        exit 1
    fi
    made=1
    eval "$("$top/scripts/nodes-env" "$prefix")"

    # the links: bandwidth and latency between the nodes, shared memory in one
    on_bed "link-bw-$rate" "$h1:1,$h2:1" 2 "$bench/acx-bench-bcast" -m 16M:16M -i 3 -x 1 \
        --json "$runs/link-bw-$rate.json" || failed=1
    on_bed "link-lat-$rate" "$h1:1,$h2:1" 2 "$bench/acx-bench-allreduce" -m 8:8 -i 500 -x 50 \
        --json "$runs/link-lat-$rate.json" || failed=1
    on_bed "shm-bw-$rate" "$h1:2" 2 "$bench/acx-bench-allreduce" -m 16M:16M -i 5 -x 2 --busbw \
        --json "$runs/shm-bw-$rate.json" || failed=1
    # acx against plain MPI_Allreduce, 2 nodes x 2 ranks
    on_bed "allreduce-$rate" "$h1:2,$h2:2" 4 "$bench/acx-bench-allreduce" -m "$sizes" \
        --compare-raw -f -i "$iters" -x 1 --json "$runs/allreduce-$rate.json" || failed=1
    # the training step per strategy; log_level info: acx_init's topology
    # line (node k/2) and the sharded strategy's plan go to the .err file
    for s in NO_SHARD FULL_SHARD HYBRID_SHARD; do
        on_bed "train-$s-$rate" "$h1:2,$h2:2" 4 "$bench/acx-bench-train" --model synthetic \
            --dims "$dims" --sharding-strategy "$s" --only acx --steps "$steps" --rounds 2 \
            --warmup 1 --check-steps 0 --np 4 --json "$runs/train-$s-$rate.json" \
            --acx-log_level=info || failed=1
    done
    "$top/scripts/nodes-down" --name "$prefix" >&2
    made=0
done
t1=$(date +%s)

# ---- the data files, the model's prediction and the report ----
python3 - "$out" "$runs" "$rates" "$dims" "$top/benchmarks/model-scaling.py" "$started" \
    "$((t1 - t0))" "$steps" "$iters" "$quick" <<'PY'
import json, os, re, subprocess, sys

out, runs, rates, dims, model, started, secs, steps, iters, quick = sys.argv[1:]
rates = rates.split()
dims = [int(x) for x in dims.split(",")]
P = sum(dims[i] * dims[i + 1] + dims[i + 1] for i in range(3))
largest = max(dims[i] * dims[i + 1] + dims[i + 1] for i in range(3))


def jload(name):
    try:
        with open(os.path.join(runs, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def loads(name):
    try:
        with open(os.path.join(runs, name + ".load")) as f:
            return f.read().split()
    except OSError:
        return ["?", "?"]


def row0(j, key):
    try:
        return float(j["results"][0][key])
    except (TypeError, KeyError, IndexError, ValueError):
        return None


links, ar, train, pred = {}, {}, {}, {}
for r in rates:
    bw = row0(jload(f"link-bw-{r}.json"), "avg_us")
    lat = row0(jload(f"link-lat-{r}.json"), "median_us")
    shm = row0(jload(f"shm-bw-{r}.json"), "busbw_gbps")
    links[r] = {"link_MBps": 16 * 2**20 / bw if bw else None, "lat_us": lat, "shm_GBps": shm,
                "load": loads(f"link-bw-{r}") + loads(f"shm-bw-{r}")}
    j = jload(f"allreduce-{r}.json")
    ar[r] = j["results"] if j else []
    for s in ("NO_SHARD", "FULL_SHARD", "HYBRID_SHARD"):
        t = jload(f"train-{s}-{r}.json")
        topo = ""
        try:
            with open(os.path.join(runs, f"train-{s}-{r}.err")) as f:
                m = re.findall(r"local rank \d+/(\d+), node (\d+)/(\d+) on ([^;\s]+)", f.read())
                f.seek(0)
                plan = sorted(set(re.findall(r"shard: \S+: \d+ unit\(s\) sharded over [^;]*", f.read())))
            topo = ",".join(sorted({f"{h}:node{k}/{n}:{l}" for l, k, n, h in m}))
            if plan:
                topo += " (" + "; ".join(plan) + ")"
        except OSError:
            pass
        train[r, s] = (t, loads(f"train-{s}-{r}"), topo)
    # the model's prediction, from what this rate measured
    no = train[r, "NO_SHARD"][0]
    L = links[r]
    if no and L["link_MBps"] and L["lat_us"] is not None and L["shm_GBps"]:
        comp = no.get("compute_only_step_ms")
        opt = (no.get("acx_optimizer_share") or 0) * no["step_ms"]
        cmd = [sys.executable, model, "--testbed", "--params", str(P), "--mixed-precision", "no",
               "--reduce-dtype", "fp32", "--units", "3", "--inter-bw", str(L["link_MBps"] / 1e3),
               "--inter-lat", str(L["lat_us"]), "--intra-bw", str(L["shm_GBps"]),
               "--intra-lat", "5", "--compute-ms", str(comp), "--optimizer-ms", str(opt)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        with open(os.path.join(runs, f"model-{r}.txt"), "w") as f:
            f.write(" ".join(cmd) + "\n" + res.stdout + res.stderr)
        for line in res.stdout.splitlines():
            w = line.split()
            if len(w) == 4 and w[0] in ("NO_SHARD", "FULL_SHARD", "HYBRID_SHARD"):
                pred[r, w[0]] = (float(w[1]), float(w[2]), float(w[3]))

with open(os.path.join(out, "nodes-links.dat"), "w") as f:
    f.write("# rate link_MBps link_latency_us shm_allreduce_busbw_GBps load_before load_after\n")
    for r in rates:
        L = links[r]
        f.write(f"{r} {L['link_MBps'] or '-'} {L['lat_us'] or '-'} {L['shm_GBps'] or '-'} "
                f"{L['load'][0]} {L['load'][-1]}\n")
with open(os.path.join(out, "nodes-allreduce.dat"), "w") as f:
    f.write("# rate size acx_avg_us raw_avg_us acx_median_us raw_median_us acx_over_raw\n")
    for r in rates:
        for x in ar[r]:
            f.write(f"{r} {x['size']} {x['avg_us']} {x['raw_avg_us']} {x.get('median_us', '-')} "
                    f"{x.get('raw_median_us', '-')} {x['acx_over_raw']}\n")
with open(os.path.join(out, "nodes-train.dat"), "w") as f:
    f.write("# rate strategy step_ms step_ms_p10 step_ms_p90 compute_only_step_ms "
            "acx_wait_share predicted_ms predicted_comm_ms link_MB_per_node load_before load_after\n")
    for r in rates:
        for s in ("NO_SHARD", "FULL_SHARD", "HYBRID_SHARD"):
            t, ld, _ = train[r, s]
            p = pred.get((r, s), ("-", "-", "-"))
            if t:
                f.write(f"{r} {s} {t['step_ms']} {t['step_ms_p10']} {t['step_ms_p90']} "
                        f"{t.get('compute_only_step_ms')} {t.get('acx_wait_share')} "
                        f"{p[0]} {p[1]} {p[2]} {ld[0]} {ld[1]}\n")


def excess(t):
    """step - compute-only: what is not the replicated step's arithmetic
    (communication, acx's bookkeeping, less the optimizer work sharding
    saves); less sensitive to the machine's load than the step itself."""
    c = t and t.get("compute_only_step_ms")
    return t["step_ms"] - c if c else None


def f1(x, d=1):
    return "-" if x is None else f"{x:.{d}f}"


md = []
w = md.append
w("## Two nodes: HYBRID_SHARD against FULL_SHARD over slow links")
w("")
w(f"benchmarks/run-nodes.sh: 2 nodes x 2 ranks of the test bed (scripts/nodes-up: network "
  f"namespaces on this machine, Open MPI over TCP between them, shared memory within one), the "
  f"links limited with tc tbf to {', '.join(rates)}; {started}, {secs} s in all; "
  f"{os.cpu_count()} cores shared by all 4 ranks (and whatever else ran: load averages below).")
if quick == "1":
    w("")
    w("*--quick: a smoke run; the numbers mean nothing.*")
w("")
w("### The links")
w("")
w("| rate | link MB/s (16 MiB broadcast, 1 rank per node) | link latency us (8 B all-reduce, median) "
  "| shared memory GB/s (16 MiB all-reduce busbw, 2 ranks, 1 node) | load before → after |")
w("| --- | ---: | ---: | ---: | --- |")
for r in rates:
    L = links[r]
    w(f"| {r} | {f1(L['link_MBps'])} | {f1(L['lat_us'])} | {f1(L['shm_GBps'], 2)} | "
      f"{L['load'][0]} → {L['load'][-1]} |")
w("")
w(f"### All-reduce, 4 ranks on 2 nodes: acx against MPI_Allreduce (same loop, {iters} "
  "timed calls per size, mean)")
w("")
hdr = "| size |"
sep = "| ---: |"
for r in rates:
    hdr += f" acx ms @{r} | MPI ms @{r} | acx/MPI @{r} |"
    sep += " ---: | ---: | ---: |"
w(hdr)
w(sep)
sizes = sorted({x["size"] for r in rates for x in ar[r]})
for sz in sizes:
    line = f"| {sz / 2**20:g} MiB |"
    for r in rates:
        x = next((x for x in ar[r] if x["size"] == sz), None)
        if x is None:
            line += " - | - | - |"
        else:
            line += f" {x['avg_us'] / 1e3:.1f} | {x['raw_avg_us'] / 1e3:.1f} | {x['acx_over_raw']:.3f} |"
    w(line)
w("")
w("load before → after: " + "; ".join(f"{r}: {' → '.join(loads('allreduce-' + r))}" for r in rates))
w("")
w(f"### Training step, 4 ranks on 2 nodes (synthetic MLP {'-'.join(map(str, dims))}, "
  f"{P / 1e6:.2f} M parameters, {4 * P / 1e6:.1f} MB fp32; batch 64 per rank; median of {steps} steps)")
w("")
w("| rate | strategy | step ms (median) | p10–p90 | compute-only ms | step − compute-only ms "
  "| acx wait share | model ms | model comm ms | model MB per node link | load before → after |")
w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for r in rates:
    for s in ("NO_SHARD", "FULL_SHARD", "HYBRID_SHARD"):
        t, ld, topo = train[r, s]
        p = pred.get((r, s))
        if not t:
            w(f"| {r} | {s} | failed | | | | | | | | {ld[0]} → {ld[1]} |")
            continue
        w(f"| {r} | {s} | {t['step_ms']:.0f} | {t['step_ms_p10']:.0f}–{t['step_ms_p90']:.0f} | "
          f"{f1(t.get('compute_only_step_ms'), 0)} | {f1(excess(t), 0)} | "
          f"{f1(t.get('acx_wait_share'), 2)} | "
          f"{f1(p and p[0], 0)} | {f1(p and p[1], 0)} | {f1(p and p[2])} | {ld[0]} → {ld[1]} |")
w("")
w("| rate | HYBRID/FULL step, measured | HYBRID/FULL step, model | HYBRID/FULL step − compute-only, "
  "measured | HYBRID/FULL comm, model | NO_SHARD/FULL step, measured |")
w("| --- | ---: | ---: | ---: | ---: | ---: |")
for r in rates:
    h, fu, no = (train[r, s][0] for s in ("HYBRID_SHARD", "FULL_SHARD", "NO_SHARD"))
    ph, pf = pred.get((r, "HYBRID_SHARD")), pred.get((r, "FULL_SHARD"))
    eh, ef = excess(h), excess(fu)
    w(f"| {r} | {f1(h and fu and h['step_ms'] / fu['step_ms'], 3)} | "
      f"{f1(ph and pf and ph[0] / pf[0], 3)} | {f1(eh and ef and eh / ef, 3)} | "
      f"{f1(ph and pf and ph[1] / pf[1], 3)} | "
      f"{f1(no and fu and no['step_ms'] / fu['step_ms'], 3)} |")
w("")
topos = {train[r, s][2] for r in rates for s in ("NO_SHARD", "FULL_SHARD", "HYBRID_SHARD")}
w("Topology acx detected (host:node/num_nodes:local size, from acx_init's info line, and the "
  "sharded strategies' plan): " + "; ".join(sorted(t for t in topos if t)) + ".")
w("model: benchmarks/model-scaling.py --testbed with this rate's measured link bandwidth and "
  "latency, shared-memory bandwidth, NO_SHARD's compute-only step and optimizer time, no overlap "
  f"(the exact commands: nodes/model-RATE.txt).")
with open(os.path.join(out, "nodes.md"), "w") as f:
    f.write("\n".join(md) + "\n")
PY
if [ "$print_md" = 1 ]; then cat "$out/nodes.md"; else echo "$me: wrote $out/nodes.md and the .dat files (runs in $runs)" >&2; fi
exit "$failed"
