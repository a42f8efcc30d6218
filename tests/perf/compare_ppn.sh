#!/usr/bin/env bash
# fleetwire's controller against PPN's `service-vm-fleet`, side by side on this machine
# (docs/performance.md, "Against PPN's controller"): both servers started once and left running,
# `wrk` (one thread, 32 connections) sends unmodified PPN heartbeat bodies of 10,000 simulated
# nodes (tests/perf/ppn_heartbeats.lua) to each in turn, the order reversed every other round,
# and each round's throughput and p99 are printed with fleetwire's ratio to PPN's.
#
#   bash tests/perf/compare_ppn.sh              # 6 rounds of 8 s each
#   ROUNDS=10 DURATION=8s bash tests/perf/compare_ppn.sh
#   WORKERS=1 bash tests/perf/compare_ppn.sh    # fleetwire on one worker thread, as PPN runs
#
# fleetwire runs `controller --plain-http` on SQLite (an empty data dir of its own), the
# release build of this checkout (`cargo build --release -p fleetwire`; FLEETWIRE_BIN=path
# takes another binary instead). PPN is a release build of `service-vm-fleet` from the peers'
# sources, found as the real-peer tests find them (tests/e2e/support/real_peers.rs): the
# archives in ../shared/peers (FLEETWIRE_PEERS_SRC), unpacked and built into target/peers
# (FLEETWIRE_PEERS_DIR), the layout ../shared/peers/build.sh uses. PPN always listens on
# 0.0.0.0:9203, so as root everything runs in a network namespace of its own (`unshare -n`),
# where no other PPN on the machine meets it.
# Environment: ROUNDS (6), DURATION (8s), NODES (10000), CONNECTIONS (32), NICE (niceness of
# the servers and wrk, -10 as root: on a machine shared with builds they then get the cores),
# OUT (directory for wrk's outputs and the servers' logs; a temporary one by default), WORKERS
# (`--worker-threads` of fleetwire's controller; by default one per CPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
workspace=$PWD

if [[ -z ${COMPARE_PPN_INNER:-} ]]; then
  command -v wrk >/dev/null || { echo "wrk is not installed (Debian: apt-get install -y wrk)" >&2; exit 1; }
  # PPN, release: the peers' sources unpacked as build.sh unpacks them, then built optimized.
  peers_src=${FLEETWIRE_PEERS_SRC:-$workspace/../shared/peers}
  peers_out=${FLEETWIRE_PEERS_DIR:-$workspace/target/peers}
  [[ -f $peers_src/ppn-src.tar.gz ]] || {
    echo "$peers_src/ppn-src.tar.gz is missing: PPN's sources are expected in ../shared/peers (or FLEETWIRE_PEERS_SRC)" >&2
    exit 1
  }
  mkdir -p "$peers_out"
  if [[ ! -f $peers_out/ppn-src/.unpacked || $peers_src/ppn-src.tar.gz -nt $peers_out/ppn-src/.unpacked ]]; then
    rm -rf "${peers_out:?}/ppn-src"
    mkdir -p "$peers_out/ppn-src"
    tar -xzf "$peers_src/ppn-src.tar.gz" -C "$peers_out/ppn-src" --strip-components=1
    touch "$peers_out/ppn-src/.unpacked"
  fi
  [[ -f $peers_out/ppn-src/Cargo.toml ]] ||
    printf '[workspace]\nresolver = "2"\nmembers = ["service-vm-host", "service-vm-fleet", "system-vm-fleet-types"]\n' \
      >"$peers_out/ppn-src/Cargo.toml"
  echo "building PPN's service-vm-fleet (release) ..." >&2
  (cd "$peers_out/ppn-src" && cargo build -q --release -p service-vm-fleet --target-dir "$peers_out/target-ppn") >&2
  export PPN_BIN=$peers_out/target-ppn/release/service-vm-fleet
  if [[ -z ${FLEETWIRE_BIN:-} ]]; then
    echo "building fleetwire (release) ..." >&2
    cargo build -q --release -p fleetwire --bin fleetwire >&2
    FLEETWIRE_BIN=${CARGO_TARGET_DIR:-$workspace/target}/release/fleetwire
  fi
  export FLEETWIRE_BIN
  export COMPARE_PPN_INNER=1
  if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
    exec unshare -n "$0" "$@"
  fi
  if (exec 3<>/dev/tcp/127.0.0.1/9203) 2>/dev/null; then
    echo "something already listens on port 9203, which PPN's controller needs (run as root to use a network namespace of its own)" >&2
    exit 1
  fi
fi

if [[ $(id -u) == 0 ]]; then
  ip link set lo up 2>/dev/null || true
  renice -n "${NICE:--10}" -p $$ >/dev/null
fi
rounds=${ROUNDS:-6} duration=${DURATION:-8s} connections=${CONNECTIONS:-32}
export NODES=${NODES:-10000}
out=${OUT:-$(mktemp -d /tmp/compare-ppn.XXXXXX)}
mkdir -p "$out"
script=$workspace/tests/perf/ppn_heartbeats.lua

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
mkdir -p "$out/fleetwire-data"
"$FLEETWIRE_BIN" controller --listen 127.0.0.1:19403 --data-dir "$out/fleetwire-data" --plain-http \
  ${WORKERS:+--worker-threads "$WORKERS"} >"$out/fleetwire.log" 2>&1 &
pids+=("$!")
RUST_LOG=warn "$PPN_BIN" >"$out/ppn.log" 2>&1 &
pids+=("$!")
names=(fleetwire ppn)
urls=(http://127.0.0.1:19403 http://127.0.0.1:9203)
for url in "${urls[@]}"; do
  for _ in $(seq 100); do
    curl -s -o /dev/null "$url/v1/fleet" && break
    sleep 0.1
  done
  curl -s -o /dev/null "$url/v1/fleet" || { echo "no answer from $url (logs in $out)" >&2; exit 1; }
done

run_wrk() { # URL DURATION OUTPUT
  wrk -t1 -c"$connections" -d"$2" --latency -s "$script" "$1" >"$3" 2>&1
}
# An unrecorded burst to each first: fleetwire commits each node's first heartbeat (its
# enrolment) before answering it, which is not what the rounds measure.
for i in 0 1; do run_wrk "${urls[$i]}" 3s "$out/warmup-${names[$i]}.txt"; done

echo "# $(date -u +%FT%TZ) rounds=$rounds duration=$duration nodes=$NODES connections=$connections workers=${WORKERS:-default} load=$(cut -d' ' -f1-3 /proc/loadavg) fleetwire=$FLEETWIRE_BIN ppn=$PPN_BIN out=$out"
printf '%-6s %-10s %12s %9s %9s %6s\n' round server requests_s p50_ms p99_ms load1
for round in $(seq "$rounds"); do
  order="0 1"
  ((round % 2 == 0)) && order="1 0"
  for i in $order; do
    file=$out/round$round-${names[$i]}.txt
    run_wrk "${urls[$i]}" "$duration" "$file"
    python3 - "$file" "$round" "${names[$i]}" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def ms(value):
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value).groups()
    return float(number) * {"us": 1e-3, "ms": 1, "s": 1e3, "m": 6e4}[unit]
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
p50 = ms(re.search(r"^\s+50%\s+(\S+)", text, re.M).group(1))
p99 = ms(re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1))
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
errors = re.search(r"Socket errors: (.*)", text)
load = open("/proc/loadavg").read().split()[0]
print(f"{sys.argv[2]:<6} {sys.argv[3]:<10} {rate:>12.0f} {p50:>9.3f} {p99:>9.3f} {load:>6}")
if bad or errors:
    sys.exit(f"{sys.argv[3]}: {bad.group(0) if bad else ''} {errors.group(0) if errors else ''} ({sys.argv[1]})")
PY
  done
done | tee "$out/rounds.txt"

python3 - "$out/rounds.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] != "round":
        runs[(int(f[0]), f[1])] = (float(f[2]), float(f[4]))
rounds = sorted({r for r, s in runs if (r, "fleetwire") in runs and (r, "ppn") in runs})
rate = [runs[(r, "fleetwire")][0] / runs[(r, "ppn")][0] for r in rounds]
p99 = [runs[(r, "fleetwire")][1] / runs[(r, "ppn")][1] for r in rounds]
print("# fleetwire/ppn per round: throughput " + " ".join(f"{x:.2f}" for x in rate)
      + f" (median {statistics.median(rate):.2f}); p99 " + " ".join(f"{x:.2f}" for x in p99)
      + f" (median {statistics.median(p99):.2f})")
PY
