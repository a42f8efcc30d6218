#!/usr/bin/env bash
# Failover time over several kills (docs/operations.md, "What a failover looks like"): two
# controllers on one PostgreSQL database, heartbeats from `fleetwire-loadgen` at a fixed rate
# to the leader; the leader is killed with SIGKILL, and the time is taken from the kill until
# the standby's /readyz says it leads, and until it has taken a heartbeat. The killed one is
# started again (it comes back as the standby), and the next round kills the other.
#
#   docs/operations/failover-rounds.sh KILLS
#
# Environment:
#   FLEETWIRE  the release binary (default target/release/fleetwire)
#   FLEETWIRE_LOADGEN  the load generator (default target/release/fleetwire-loadgen:
#             `cargo build --release -p fleetwire -p fleetwire-loadgen`)
#   NODES      simulated nodes (10000)
#   RATE       heartbeats per second sent to the leader (5000)
#   PG         the PostgreSQL server, as a URL without a database
#              (default postgres://postgres@127.0.0.1:5432); a database is made for the run
#   CONTROLLER_ARGS  more flags for both controllers (e.g. --lease-ttl 5s)
#   OUT        directory for the raw outputs (default: a temporary one)
set -euo pipefail
cd "$(dirname "$0")/../.."
source docs/operations/wait.sh

kills=${1:?usage: $0 KILLS}
bin=${FLEETWIRE:-target/release/fleetwire}
loadgen_bin=${FLEETWIRE_LOADGEN:-target/release/fleetwire-loadgen}
nodes=${NODES:-10000}
rate=${RATE:-5000}
pg=${PG:-postgres://postgres@127.0.0.1:5432}
out=${OUT:-$(mktemp -d /tmp/failover-rounds.XXXXXX)}
read -r -a controller_args <<<"${CONTROLLER_ARGS:-}"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
db=fw_failover_$$
ports=(19411 19412)
pid=("" "")
loadgen=""
cleanup() {
  for p in "${pid[@]}" $loadgen; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql -q "$pg/postgres" -c "DROP DATABASE IF EXISTS $db" || true
}
trap cleanup EXIT
psql -q "$pg/postgres" -c "CREATE DATABASE $db"

start() { # index
  local i=$1
  mkdir -p "$out/c$i"
  RUST_LOG=info "$bin" controller --listen "127.0.0.1:${ports[$i]}" --data-dir "$out/c$i" \
    --db "$pg/$db" --plain-http --advertise-url "http://127.0.0.1:${ports[$i]}" \
    "${controller_args[@]}" >>"$out/c$i.log" 2>&1 &
  pid[i]=$!
  wait_for_url "http://127.0.0.1:${ports[$i]}/healthz" 200 0.05 && return 0
  echo "controller $i never answered: $out/c$i.log" >&2
  return 1
}
leads() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${ports[$1]}/readyz") == 200 ]]; }
# heartbeats the controller's own counter has taken
taken() {
  curl -s "http://127.0.0.1:${ports[$1]}/metrics" |
    awk '/^fleetwire_controller_heartbeats_received_total/ {n += $NF} END {printf "%d", n}'
}
now() { date +%s.%N; }

start 0
for _ in $(seq 200); do leads 0 && break; sleep 0.05; done
leads 0 || { echo "the first controller never led: $out/c0.log" >&2; exit 1; }
start 1
leader=0
echo "# $(date -u +%FT%TZ) kills=$kills nodes=$nodes rate=$rate commit=$(git rev-parse --short HEAD) args=${controller_args[*]:-} out=$out"
printf '%-5s %-8s %14s %18s\n' kill killed leads_after_s heartbeat_after_s
for k in $(seq "$kills"); do
  standby=$((1 - leader))
  # Load on the leader, long enough to span the kill; heartbeats to a dead port fail, which
  # loadgen counts and carries on.
  "$loadgen_bin" --url "http://127.0.0.1:${ports[$leader]}" --nodes "$nodes" --rate "$rate" \
    --duration 600s --warmup 1s --fleet-every 0s --fleet-samples 0 >"$out/load$k.txt" 2>&1 &
  loadgen=$!
  sleep 8
  killed_at=$(now)
  kill -KILL "${pid[$leader]}"
  wait "${pid[$leader]}" 2>/dev/null || true
  kill "$loadgen" 2>/dev/null || true
  wait "$loadgen" 2>/dev/null || true
  loadgen=""
  until leads "$standby"; do sleep 0.02; done
  led_at=$(now)
  # The nodes now heartbeat to the new leader (as a load balancer steered by /readyz sends them).
  "$loadgen_bin" --url "http://127.0.0.1:${ports[$standby]}" --nodes "$nodes" --rate "$rate" \
    --duration 600s --warmup 1s --fleet-every 0s --fleet-samples 0 >"$out/after$k.txt" 2>&1 &
  loadgen=$!
  until (($(taken "$standby") > 0)); do sleep 0.02; done
  heard_at=$(now)
  kill "$loadgen" 2>/dev/null || true
  wait "$loadgen" 2>/dev/null || true
  loadgen=""
  python3 -c "import sys; k, i, a, b, c = sys.argv[1:]; a, b, c = map(float, (a, b, c)); print(f'{k:<5} c{i:<7} {b - a:>14.2f} {c - a:>18.2f}')" \
    "$k" "$leader" "$killed_at" "$led_at" "$heard_at"
  start "$leader"
  sleep 2
  if leads "$leader"; then echo "the restarted controller leads, though the other holds the lease" >&2; exit 1; fi
  leader=$standby
done > >(tee "$out/kills.txt")
