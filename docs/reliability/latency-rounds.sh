#!/usr/bin/env bash
# Heartbeat latency side by side (docs/reliability/latency.md): servers started once and left
# running, `fleetwire-loadgen` bursts sent to each in turn, the order reversed every other round.
#
#   docs/reliability/latency-rounds.sh ROUNDS NAME=KIND:BINARY [NAME=KIND:BINARY ...]
#
# KIND is `fleetwire` (run as `BINARY controller --plain-http`, an empty data dir of its own;
# BINARY may be a command such as `env TOKIO_WORKER_THREADS=1 /path/fleetwire`)
# or `ppn` (PPN's `service-vm-fleet`, which always listens on 0.0.0.0:9203, so at most one).
# Everything runs in a network namespace of its own (`unshare -n`, root), so the fixed port
# never meets another PPN on the machine. Environment:
#   LOADGEN   the `fleetwire-loadgen` binary (default: the one beside the first fleetwire,
#             `cargo build --release -p fleetwire-loadgen`)
#   NODES     simulated nodes (10000); NODES_<NAME> for server NAME alone
#   DURATION  measured phase (10s)
#   LOADGEN_ARGS  more loadgen flags (default `--fleet-every 0s --fleet-samples 0`: PPN's
#             `GET /v1/fleet` is another document, and its reads evict the nodes whose
#             heartbeat timestamps are older than 30 s, as the load generator's are)
#   CONTROLLER_ARGS  more flags for every fleetwire controller
#   OUT       directory for the raw loadgen outputs (default: a temporary one)
#   NICE      niceness of the servers and the load generator (default -10: on a machine shared
#             with builds, the measured processes then get the cores as on an idle machine)
# Prints one line per run and, for each fleetwire server, its ratios to the PPN run of the
# same round.
set -euo pipefail

if [[ -z ${LATENCY_ROUNDS_NETNS:-} ]]; then
  exec env LATENCY_ROUNDS_NETNS=1 unshare -n "$0" "$@"
fi
ip link set lo up
renice -n "${NICE:--10}" -p $$ >/dev/null
# --connection-per-node needs a descriptor per node in the servers too (PPN raises nothing)
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

rounds=${1:?usage: $0 ROUNDS NAME=KIND:BINARY ...}
shift
nodes=${NODES:-10000}
duration=${DURATION:-10s}
out=${OUT:-$(mktemp -d /tmp/latency-rounds.XXXXXX)}
mkdir -p "$out"
read -r -a loadgen_args <<<"${LOADGEN_ARGS:---fleet-every 0s --fleet-samples 0}"
read -r -a controller_args <<<"${CONTROLLER_ARGS:-}"

names=() urls=() pids=() kinds=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

port=19300
for server in "$@"; do
  name=${server%%=*}
  spec=${server#*=}
  kind=${spec%%:*}
  read -r -a command <<<"${spec#*:}"
  case $kind in
    fleetwire)
      port=$((port + 1))
      LOADGEN=${LOADGEN:-$(dirname "${command[-1]}")/fleetwire-loadgen}
      mkdir -p "$out/$name-data"
      "${command[@]}" controller --listen "127.0.0.1:$port" --data-dir "$out/$name-data" --plain-http \
        "${controller_args[@]}" >"$out/$name.log" 2>&1 &
      url=http://127.0.0.1:$port
      ;;
    ppn)
      RUST_LOG=warn "${command[@]}" >"$out/$name.log" 2>&1 &
      url=http://127.0.0.1:9203
      ;;
    *) echo "unknown kind $kind (fleetwire or ppn)" >&2; exit 2 ;;
  esac
  pids+=("$!") names+=("$name") urls+=("$url") kinds+=("$kind")
done
for url in "${urls[@]}"; do
  for _ in $(seq 100); do
    curl -s -o /dev/null "$url/v1/fleet" && break
    sleep 0.1
  done
done

# nanoseconds the process's threads have waited runnable for a core (schedstat, second field)
waited() { cat /proc/"$1"/task/*/schedstat | awk '{s += $2} END {print s}'; }
nodes_for() { local v="NODES_$1"; echo "${!v:-$nodes}"; }
# user+system ticks of a process and all its threads
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# fleetwire's own histogram of its heartbeat answers (from the request's head to its answer)
handler_buckets() {
  if [[ $1 == fleetwire ]]; then
    curl -s "$2/metrics" | grep -E 'http_request_duration_seconds_bucket\{.*nodes/heartbeat|heartbeat_phase_duration_seconds_bucket' || true
  fi
}

# A first, unrecorded burst to each: its enrolment (committed heartbeats) is not in any round.
for i in "${!names[@]}"; do
  "$LOADGEN" --url "${urls[$i]}" --nodes "$(nodes_for "${names[$i]}")" --duration 2s --warmup 1s \
    "${loadgen_args[@]}" >"$out/enrol-${names[$i]}.txt" 2>&1 || echo "(enrolment burst failed: $out/enrol-${names[$i]}.txt)" >&2
done
echo "# $(date -u +%FT%TZ) load=$(cut -d' ' -f1-3 /proc/loadavg) rounds=$rounds nodes=$nodes duration=$duration loadgen=${LOADGEN:?no fleetwire-loadgen binary given} out=$out"
printf '%-6s %-12s %10s %9s %9s %9s %9s %9s %8s %6s %s\n' round server per_s p50_ms p99_ms p999_ms max_ms cpu_us wait_us load1 controller_p99
for round in $(seq "$rounds"); do
  order=$(seq 0 $((${#names[@]} - 1)))
  if ((round % 2 == 0)); then order=$(echo "$order" | tac); fi
  for i in $order; do
    file=$out/round$round-${names[$i]}.txt
    handler_buckets "${kinds[$i]}" "${urls[$i]}" >"$file.before"
    before=$(ticks "${pids[$i]}") waited_before=$(waited "${pids[$i]}")
    "$LOADGEN" --url "${urls[$i]}" --nodes "$(nodes_for "${names[$i]}")" --duration "$duration" \
      "${loadgen_args[@]}" >"$file" 2>"$file.err" || echo "(loadgen failed: $file.err)" >&2
    after=$(ticks "${pids[$i]}") waited_after=$(waited "${pids[$i]}")
    handler_buckets "${kinds[$i]}" "${urls[$i]}" >"$file.after"
    python3 - "$file" "$round" "${names[$i]}" "$((after - before))" "$(getconf CLK_TCK)" "$((waited_after - waited_before))" "$(nodes_for "${names[$i]}")" <<'PY'
import re, sys
def buckets(path):
    out = {}
    for line in open(path):
        le = re.search(r'le="([^"]+)"', line).group(1)
        phase = re.search(r'phase="([^"]+)"', line)
        out.setdefault(phase.group(1) if phase else "handler", {})[float(le)] = int(float(line.split()[-1]))
    return out
before, after = buckets(sys.argv[1] + ".before"), buckets(sys.argv[1] + ".after")
# for each of fleetwire's histograms, the bucket bound under which 99 % of this burst's
# heartbeats were: the whole answer inside the controller, then each phase
handler = []
for series, bounds in after.items():
    counts = sorted((le, n - before.get(series, {}).get(le, 0)) for le, n in bounds.items())
    total = counts[-1][1]
    bound = next((le for le, n in counts if total and n >= 0.99 * total), None)
    if bound is not None:
        handler.append(f"{series}<={bound * 1e6:g}us")
handler = ",".join(handler) or "-"
text = open(sys.argv[1]).read()
ok, rate = re.search(r"heartbeats: (\d+) ok, \d+ failed, (\d+)/s", text).groups()
lat = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms, p99.9 ([\d.]+) ms, max ([\d.]+) ms", text).groups()
# CPU over the whole burst per heartbeat of the burst: the enrolment's one per node, the
# warm-up's and the measured ones
warm = int(re.search(r"after (\d+) in a", text).group(1)) + int(sys.argv[7])
cpu_us = int(sys.argv[4]) / int(sys.argv[5]) * 1e6 / (int(ok) + warm)
# and the time its threads waited for a core, per heartbeat
wait_us = int(sys.argv[6]) / 1e3 / (int(ok) + warm)
print(f"{sys.argv[2]:<6} {sys.argv[3]:<12} {rate:>10} {lat[0]:>9} {lat[1]:>9} {lat[2]:>9} {lat[3]:>9} {cpu_us:>9.1f} {wait_us:>8.1f} {open('/proc/loadavg').read().split()[0]:>6} {handler}")
PY
  done
done | tee "$out/runs.txt"

python3 - "$out/runs.txt" <<'PY'
import statistics, sys
runs = {}
kinds = {}
for line in open(sys.argv[1]):
    f = line.split()
    if not f or f[0] == "round":
        continue
    runs[(int(f[0]), f[1])] = (float(f[2]), float(f[4]))
servers = sorted({s for _, s in runs})
rounds = sorted({r for r, _ in runs})
base = next((s for s in servers if s.startswith("ppn")), None)
if base:
    for s in servers:
        if s == base:
            continue
        p99 = [runs[(r, s)][1] / runs[(r, base)][1] for r in rounds if (r, s) in runs and (r, base) in runs]
        rate = [runs[(r, s)][0] / runs[(r, base)][0] for r in rounds if (r, s) in runs and (r, base) in runs]
        print(f"# {s}/{base} per round: p99 " + " ".join(f"{x:.2f}" for x in p99)
              + f" (median {statistics.median(p99):.2f}); rate " + " ".join(f"{x:.2f}" for x in rate)
              + f" (median {statistics.median(rate):.2f})")
PY
