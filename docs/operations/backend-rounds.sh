#!/usr/bin/env bash
# The store backends side by side (docs/operations.md, "Sizing"): one controller on SQLite, one
# on PostgreSQL, and a leader with a hot standby on PostgreSQL, started once and left running;
# `fleetwire-loadgen` bursts sent to each in turn (to the leader for the pair), the order
# reversed every other round.
#
#   docs/operations/backend-rounds.sh ROUNDS
#
# Environment:
#   FLEETWIRE  the release binary (default target/release/fleetwire)
#   FLEETWIRE_LOADGEN  the load generator (default target/release/fleetwire-loadgen:
#             `cargo build --release -p fleetwire -p fleetwire-loadgen`)
#   NODES      simulated nodes (10000)
#   DURATION   measured phase (10s)
#   PG         the PostgreSQL server, as a URL without a database
#              (default postgres://postgres@127.0.0.1:5432); each PostgreSQL controller gets a
#              database of its own, made and dropped here, so its statistics are its own
#   LOADGEN_ARGS  more loadgen flags (default `--fleet-every 0s --fleet-samples 0`)
#   OUT        directory for the raw outputs (default: a temporary one)
# Prints one line per run: heartbeats/s, latency, the controller's CPU per heartbeat and
# resident memory after the burst, its store transactions and rows per second (its own
# metrics), and for PostgreSQL the database's committed transactions and changed rows per
# second (pg_stat_database); then each backend's ratios to the SQLite run of the same round.
set -euo pipefail
cd "$(dirname "$0")/../.."
source docs/operations/wait.sh

rounds=${1:?usage: $0 ROUNDS}
bin=${FLEETWIRE:-target/release/fleetwire}
loadgen_bin=${FLEETWIRE_LOADGEN:-target/release/fleetwire-loadgen}
nodes=${NODES:-10000}
duration=${DURATION:-10s}
pg=${PG:-postgres://postgres@127.0.0.1:5432}
out=${OUT:-$(mktemp -d /tmp/backend-rounds.XXXXXX)}
mkdir -p "$out"
read -r -a loadgen_args <<<"${LOADGEN_ARGS:---fleet-every 0s --fleet-samples 0}"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

suffix=$$
databases=("fw_rounds_pg_$suffix" "fw_rounds_ha_$suffix")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for db in "${databases[@]}"; do psql -q "$pg/postgres" -c "DROP DATABASE IF EXISTS $db" || true; done
}
trap cleanup EXIT
for db in "${databases[@]}"; do psql -q "$pg/postgres" -c "CREATE DATABASE $db"; done

# name, URL loadgen sends to, the pid measured, its database (none for SQLite)
names=() urls=() measured=() dbs=()
start() { # name port db-flag [more flags]
  local name=$1 port=$2 db=$3
  shift 3
  mkdir -p "$out/$name-data"
  RUST_LOG=warn "$bin" controller --listen "127.0.0.1:$port" --data-dir "$out/$name-data" \
    --db "$db" --plain-http "$@" >"$out/$name.log" 2>&1 &
  pids+=("$!")
  wait_for_url "http://127.0.0.1:$port/readyz" 200 0.1 -f && return 0
  echo "$name never became ready: $out/$name.log" >&2
  return 1
}
start sqlite 19401 "$out/sqlite-data/controller.sqlite3"
names+=(sqlite) urls+=(http://127.0.0.1:19401) measured+=("${pids[-1]}") dbs+=("")
start postgres 19402 "$pg/${databases[0]}" --advertise-url http://127.0.0.1:19402
names+=(postgres) urls+=(http://127.0.0.1:19402) measured+=("${pids[-1]}") dbs+=("${databases[0]}")
start leader 19403 "$pg/${databases[1]}" --advertise-url http://127.0.0.1:19403
leader=${pids[-1]}
# The standby: it follows the lease and waits; /readyz answers 503 until it leads.
mkdir -p "$out/standby-data"
RUST_LOG=warn "$bin" controller --listen 127.0.0.1:19404 --data-dir "$out/standby-data" \
  --db "$pg/${databases[1]}" --plain-http --advertise-url http://127.0.0.1:19404 \
  >"$out/standby.log" 2>&1 &
pids+=("$!")
names+=(leader+standby) urls+=(http://127.0.0.1:19403) measured+=("$leader") dbs+=("${databases[1]}")

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_mib() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
# the controller's store transactions and rows written so far (its /metrics)
store_counts() {
  curl -s "$1/metrics" | awk '
    /^fleetwire_controller_store_flush_duration_seconds_count/ {t += $NF}
    /^fleetwire_controller_store_rows_written_total/ {r += $NF}
    END {printf "%d %d", t, r}'
}
# the database's committed transactions and inserted+updated+deleted rows so far
pg_counts() {
  [[ -n $1 ]] || { echo "0 0"; return; }
  psql -qtA "$pg/postgres" -F' ' -c "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = '$1'"
}

# A first, unrecorded burst to each: its enrolment (committed heartbeats) is in no round.
for i in "${!names[@]}"; do
  "$loadgen_bin" --url "${urls[$i]}" --nodes "$nodes" --duration 2s --warmup 1s \
    "${loadgen_args[@]}" >"$out/enrol-${names[$i]}.txt" 2>&1 || echo "(enrolment burst failed: $out/enrol-${names[$i]}.txt)" >&2
done
echo "# $(date -u +%FT%TZ) load=$(cut -d' ' -f1-3 /proc/loadavg) rounds=$rounds nodes=$nodes duration=$duration commit=$(git rev-parse --short HEAD) out=$out"
printf '%-6s %-15s %8s %7s %7s %8s %7s %7s %8s %8s %8s %8s\n' round backend per_s p50_ms p99_ms max_ms cpu_us rss_mib store_tx/s rows/s db_tx/s db_rows/s
for round in $(seq "$rounds"); do
  order=$(seq 0 $((${#names[@]} - 1)))
  if ((round % 2 == 0)); then order=$(echo "$order" | tac); fi
  for i in $order; do
    file=$out/round$round-${names[$i]}.txt
    pid=${measured[$i]}
    before=$(ticks "$pid") store_before=$(store_counts "${urls[$i]}") db_before=$(pg_counts "${dbs[$i]}")
    started=$(date +%s.%N)
    "$loadgen_bin" --url "${urls[$i]}" --nodes "$nodes" --duration "$duration" \
      "${loadgen_args[@]}" >"$file" 2>"$file.err" || echo "(loadgen failed: $file.err)" >&2
    ended=$(date +%s.%N)
    after=$(ticks "$pid") store_after=$(store_counts "${urls[$i]}") db_after=$(pg_counts "${dbs[$i]}")
    python3 - "$file" "$round" "${names[$i]}" "$((after - before))" "$(getconf CLK_TCK)" "$nodes" \
      "$(rss_mib "$pid")" "$started" "$ended" "$store_before" "$store_after" "$db_before" "$db_after" <<'PY'
import re, sys
(path, rnd, name, ticks, hz, nodes, rss, started, ended,
 store_before, store_after, db_before, db_after) = sys.argv[1:14]
text = open(path).read()
ok, rate = re.search(r"heartbeats: (\d+) ok, \d+ failed, (\d+)/s", text).groups()
lat = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms, p99.9 ([\d.]+) ms, max ([\d.]+) ms", text).groups()
warm = int(re.search(r"after (\d+) in a", text).group(1)) + int(nodes)
cpu_us = int(ticks) / int(hz) * 1e6 / (int(ok) + warm)
secs = float(ended) - float(started)
def per_s(before, after):
    b, a = [list(map(int, s.split())) for s in (before, after)]
    return [(y - x) / secs for x, y in zip(b, a)]
store_tx, rows = per_s(store_before, store_after)
db_tx, db_rows = per_s(db_before, db_after)
print(f"{rnd:<6} {name:<15} {rate:>8} {lat[0]:>7} {lat[1]:>7} {lat[3]:>8} {cpu_us:>7.1f} {rss:>7} "
      f"{store_tx:>8.1f} {rows:>8.0f} {db_tx:>8.1f} {db_rows:>8.0f}")
PY
  done
done | tee "$out/runs.txt"

python3 - "$out/runs.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if not f or f[0] in ("round", "#"):
        continue
    runs[(int(f[0]), f[1])] = (float(f[2]), float(f[4]))
rounds = sorted({r for r, _ in runs})
for s in sorted({s for _, s in runs} - {"sqlite"}):
    rate = [runs[(r, s)][0] / runs[(r, "sqlite")][0] for r in rounds if (r, s) in runs and (r, "sqlite") in runs]
    p99 = [runs[(r, s)][1] / runs[(r, "sqlite")][1] for r in rounds if (r, s) in runs and (r, "sqlite") in runs]
    if rate:
        print(f"# {s}/sqlite per round: rate " + " ".join(f"{x:.2f}" for x in rate)
              + f" (median {statistics.median(rate):.2f}); p99 " + " ".join(f"{x:.2f}" for x in p99)
              + f" (median {statistics.median(p99):.2f})")
PY
