#!/usr/bin/env bash
# What mTLS costs the controller's heartbeat path, side by side with plain HTTP in one run
# (docs/performance.md, "mTLS against plain, side by side"; issue 27's budget: mTLS at most 15 %
# below plain). Each round starts a fresh controller (an empty data dir), `--plain-http` or the
# secure default, and runs `fleetwire-loadgen` against it: NODES nodes (3,000), a kept-alive
# connection each (`--connection-per-node`; with https each presents the certificate its
# registration got), a warm-up, then DURATION measured. The modes alternate, the order reversed
# every other round, and each round prints both rates and the ratio mTLS / plain, then each
# side's CPU per heartbeat read inside the measured phase; the last lines give the medians of
# the rates' ratio and of the controller's CPU per heartbeat, plain / mTLS (what mTLS costs a
# controller whose cores are its own, docs/performance.md "Each side's CPU per heartbeat").
#
#   bash tests/perf/compare_mtls.sh                       # 3 rounds (6 runs) of 8 s
#   ROUNDS=5 NODES=3000 DURATION=8s bash tests/perf/compare_mtls.sh
#
# Release builds of this checkout (`cargo build --release -p fleetwire -p fleetwire-loadgen`);
# FLEETWIRE_BIN and LOADGEN_BIN take other binaries; WORKERS is the controller's
# `--worker-threads` (one per CPU by default). NICE (-10 as root) gives the controller and
# the load generator the cores before other work on a shared machine.
#
# CACHE_SIM=1 counts instead of timing (docs/performance.md, "What mTLS costs in memory,
# counted"): the controller runs under callgrind's cache simulation (valgrind), its first-level
# caches (L1) and its last-level cache (LL, default 1 MiB: this machine's L2 per core) as
# given, and each run prints what one heartbeat costs it in instructions and in misses of each
# cache, then the ratio mTLS / plain. Only the window
# (WINDOW seconds of steady heartbeats, 20) is counted: the load generator is stopped before it
# and after it, so that the requests the controller's metrics count are those it simulated.
# What the kernel does (the socket copies) is not simulated: a buffer the kernel filled looks
# cold to the first user-space code that reads it.
#
#   CACHE_SIM=1 ROUNDS=1 NODES=3000 bash tests/perf/compare_mtls.sh
#
# PROFILE=DIR also samples each controller natively (docs/performance.md, "Where mTLS's CPU
# goes, natively"): `perf record` (Debian: linux-perf) for 4 s of the measured phase, between
# the CPU readings, into DIR/MODE-roundN.data, and each run prints the controller's CPU per
# heartbeat split by where its samples fell: AES-GCM, ring's AEAD calls, rustls, fleetwire's
# TLS connection, the kernel, allocation, the rest. The profiler's own cost is in the figures.
#
#   PROFILE=/tmp/mtls-profiles ROUNDS=2 bash tests/perf/compare_mtls.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
nodes=${NODES:-3000}
duration=${DURATION:-8s}
# Whole seconds: the CPU readings fall a second inside each end of the measured phase.
if [[ ! $duration =~ ^[0-9]+s$ ]] || ((${duration%s} < 3)); then
  echo "DURATION=$duration: give whole seconds, at least 3 (8s, 30s)" >&2
  exit 2
fi
nice_level=${NICE:-$([[ $(id -u) == 0 ]] && echo -10 || echo 0)}
target=${CARGO_TARGET_DIR:-$PWD/target}
# The controller's RUST_LOG (CONTROLLER_LOG=warn,fleetwire::tls_server=debug to see dropped
# handshakes and shed connections); KEEP_FAILED=DIR keeps a failed run's directory there.
controller_log=${CONTROLLER_LOG:-warn}
cache_sim=${CACHE_SIM:-}
window=${WINDOW:-20}
# Sizes as valgrind takes them: bytes, ways, line bytes.
l1=${L1:-32768,8,64}
ll=${LL:-1048576,16,64}
profile=${PROFILE:-}
if [[ -n $profile ]]; then
  command -v perf >/dev/null || {
    echo "PROFILE needs perf (Debian: apt-get install -y linux-perf)" >&2
    exit 1
  }
  ((${duration%s} >= 6)) || {
    echo "PROFILE samples 4 s between the CPU readings: DURATION=$duration is too short (8s)" >&2
    exit 2
  }
  [[ -z $cache_sim ]] || {
    echo "PROFILE samples timed runs; CACHE_SIM counts simulated ones: give one of them" >&2
    exit 2
  }
  mkdir -p "$profile"
fi
if [[ -n $cache_sim ]] && ! command -v callgrind_control >/dev/null; then
  echo "CACHE_SIM needs valgrind (Debian: apt-get install -y valgrind)" >&2
  exit 1
fi
if [[ -z ${FLEETWIRE_BIN:-} || -z ${LOADGEN_BIN:-} ]]; then
  echo "building fleetwire and fleetwire-loadgen (release) ..." >&2
  cargo build -q --release -p fleetwire -p fleetwire-loadgen >&2
fi
fleetwire=${FLEETWIRE_BIN:-$target/release/fleetwire}
loadgen=${LOADGEN_BIN:-$target/release/fleetwire-loadgen}
# A connection per node on both sides, and the controller's own descriptors.
ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d -t fleetwire-mtls.XXXXXX)
controller= loadgen_pid=
cleanup() {
  # Each step whatever the one before did (under `set -e` a failed kill would end the trap).
  [[ -z $loadgen_pid ]] || kill -KILL "$loadgen_pid" 2>/dev/null || true
  if [[ -n $controller ]]; then
    kill "$controller" 2>/dev/null || true
    wait "$controller" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One run: sets `rate` to the heartbeats per second of its measured phase. (Not a command
# substitution: in a subshell, a failed run's controller would outlive the script.)
run() {
  local mode=$1 dir port args=() client=()
  dir=$work/$mode-$RANDOM
  mkdir -p "$dir"
  port=$(free_port)
  if [[ $mode == plain ]]; then
    args=(--plain-http)
    client=(--url "http://127.0.0.1:$port")
  else
    local token
    token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    printf '%s,bench-admin,admin\n' "$token" >"$dir/operator-tokens"
    printf '%s\n' "$token" >"$dir/admin-token"
    chmod 600 "$dir/operator-tokens" "$dir/admin-token"
    args=(--operator-token-file "$dir/operator-tokens")
    client=(--url "https://127.0.0.1:$port" --ca-file "$dir/ca/ca.pem"
      --operator-token-file "$dir/admin-token")
  fi
  # The load generator's arguments, the same for both ways of running it.
  local load=("${client[@]}" --nodes "$nodes" --connection-per-node --threads 1
    --fleet-every 0s --fleet-samples 0)
  local under=() waits=100
  if [[ -n $cache_sim ]]; then
    under=(valgrind --tool=callgrind --cache-sim=yes --instr-atstart=no --I1="$l1" --D1="$l1"
      --LL="$ll" --callgrind-out-file="$dir/callgrind.out")
    waits=1200
  fi
  RUST_LOG=$controller_log nice -n "$nice_level" "${under[@]}" "$fleetwire" controller --listen "127.0.0.1:$port" \
    --data-dir "$dir" "${args[@]}" ${WORKERS:+--worker-threads "$WORKERS"} >"$dir/controller.log" 2>&1 &
  controller=$!
  for _ in $(seq 1 "$waits"); do
    # Readiness only: the certificate is the load generator's to check.
    curl -fsS -o /dev/null -k "${client[1]}/healthz" 2>/dev/null && break
    sleep 0.1
  done
  if [[ -n $cache_sim ]]; then
    simulate
    return
  fi
  nice -n "$nice_level" "$loadgen" "${load[@]}" --duration "$duration" --warmup 3s \
    >"$dir/loadgen.out" 2>"$dir/loadgen.err" &
  loadgen_pid=$!
  # Each side's CPU per heartbeat, read inside the measured phase (from a second after the
  # warm-up to a second before its end): what mTLS costs the controller on cores of its own,
  # apart from what it costs the load generator beside it on these.
  until grep -qs "opened .* connections" "$dir/loadgen.err"; do
    kill -0 "$loadgen_pid" 2>/dev/null || break
    sleep 0.1
  done
  local seconds=${duration%s} first second
  sleep 4
  first="$(cpu_ticks "$controller") $(cpu_ticks "$loadgen_pid") $(answered)"
  local perf_pid=
  if [[ -n $profile ]]; then
    # In the background: perf's own ending (writing its file) stays out of the readings.
    perf record -F 1999 -g -p "$controller" -o "$profile/$mode-round$round.data" -- sleep 4 \
      >"$dir/perf.out" 2>&1 &
    perf_pid=$!
  fi
  sleep $((seconds - 2))
  second="$(cpu_ticks "$controller") $(cpu_ticks "$loadgen_pid") $(answered)"
  if [[ -n $perf_pid ]] && ! wait "$perf_pid"; then
    echo "perf record failed ($mode):" >&2
    cat "$dir/perf.out" >&2
    exit 1
  fi
  wait "$loadgen_pid" || loadgen_failed
  loadgen_pid=
  kill "$controller"
  wait "$controller" 2>/dev/null || true
  controller=
  # loadgen's report: "heartbeats: N ok, N failed, RATE/s (after ...)".
  rate=$(grep -oE '^heartbeats: .* ([0-9]+)/s' "$dir/loadgen.out" | grep -oE '[0-9]+/s' | tr -d /s)
  # Microseconds of CPU per heartbeat answered between the two readings: controller, load
  # generator (the metrics request that read the first is among those answered).
  cpu=$(python3 - $first $second "$(getconf CLK_TCK)" <<'PY'
import sys
c0, l0, n0, c1, l1, n1, hz = map(int, sys.argv[1:])
# A process gone by the second reading reads as 0 ticks (`cpu_ticks`): no figure then.
if c1 < c0 or l1 < l0:
    sys.exit("the controller or the load generator ended before the second CPU reading")
served = n1 - n0 - 1
if served <= 0:
    sys.exit(f"no heartbeats answered between the CPU readings ({served})")
print(f"{(c1 - c0) / hz / served * 1e6:.2f} {(l1 - l0) / hz / served * 1e6:.2f}")
PY
) || exit 1
}

# A process's user and system CPU so far, all its threads, in clock ticks.
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# Ends the script with what the failed run's load generator and controller said (called by
# `run` and `simulate`, their variables in scope); KEEP_FAILED=DIR keeps the run's directory.
loadgen_failed() {
  echo "loadgen failed ($mode):" >&2
  tail -n 20 "$dir/loadgen.err" "$dir/controller.log" >&2
  [[ -n ${KEEP_FAILED:-} ]] && cp -r "$dir" "$KEEP_FAILED/" && echo "kept $KEEP_FAILED/${dir##*/}" >&2
  exit 1
}

# Requests the controller has answered, from its own metrics.
answered() {
  local auth=()
  [[ -f $dir/admin-token ]] && auth=(-H "authorization: Bearer $(cat "$dir/admin-token")")
  curl -fsS -k "${auth[@]}" "${client[1]}/metrics" |
    awk '/^fleetwire_controller_http_request_duration_seconds_count/ { n += $2 } END { print n }'
}

# Stops the script when the simulated run's load generator has ended (called by `simulate`).
loadgen_running() {
  kill -0 "$loadgen_pid" 2>/dev/null && return
  loadgen_failed
}

# Asks the simulated controller's callgrind to do something (`-i on`, `-d`, `-i off`); a
# request that fails would leave figures that count the wrong window, so it ends the script.
callgrind() {
  callgrind_control "$@" "$controller" >"$dir/callgrind_control.out" 2>&1 && return
  echo "callgrind_control $* failed ($mode):" >&2
  cat "$dir/callgrind_control.out" >&2
  exit 1
}

# CACHE_SIM's run (called by `run`, its variables in scope): the load generator starts, every
# connection opens and heartbeats for a while, then the counted window; sets `rate` to the
# figures per heartbeat.
simulate() {
  # The load generator runs under valgrind too (no tool: not counted), so that it opens its
  # connections at the pace of the simulated controller; at its own pace it fills the
  # controller's 128 slots of unfinished handshakes, and those shed for newcomers fail the run.
  nice -n "$nice_level" valgrind --tool=none --log-file="$dir/loadgen.valgrind" \
    "$loadgen" "${load[@]}" --duration 3600s --warmup 1s \
    >"$dir/loadgen.out" 2>"$dir/loadgen.err" &
  loadgen_pid=$!
  local before after
  until grep -qs "opened .* connections" "$dir/loadgen.err"; do
    loadgen_running
    sleep 1
  done
  sleep 10
  loadgen_running
  # Stopped, the load generator's requests in flight drain; then only the window's are counted.
  kill -STOP "$loadgen_pid"
  sleep 3
  before=$(answered)
  callgrind -i on
  kill -CONT "$loadgen_pid"
  sleep "$window"
  loadgen_running
  kill -STOP "$loadgen_pid"
  sleep 3
  callgrind -d
  callgrind -i off
  after=$(answered)
  kill -KILL "$loadgen_pid"
  wait "$loadgen_pid" 2>/dev/null || true
  loadgen_pid=
  kill "$controller"
  wait "$controller" 2>/dev/null || true
  controller=
  # The window's requests, less the metrics request that read `before` (counted once served).
  rate=$(python3 - "$dir/callgrind.out.1" $((after - before - 1)) <<'PY'
import sys
path, served = sys.argv[1], int(sys.argv[2])
line = next(l for l in open(path) if l.startswith("totals:"))
events = next(l for l in open(path) if l.startswith("events:")).split()[1:]
total = dict(zip(events, map(int, line.split()[1:])))
if served <= 0 or total.get("Ir", 0) == 0:
    sys.exit(f"nothing counted in the window: {served} heartbeats, {total.get('Ir', 0)} instructions ({path})")
per = lambda *names: sum(total[n] for n in names) / served
print(f"{served} {per('Ir'):.0f} {per('I1mr'):.0f} {per('D1mr', 'D1mw'):.0f} {per('DLmr', 'DLmw'):.1f}")
PY
) || exit 1
  read -r counted ir i1 d1 dl <<<"$rate"
  echo "  $mode: $counted heartbeats counted; per heartbeat $ir instructions, misses: $i1 I1, $d1 D1, $dl LL" >&2
}

if [[ -n $cache_sim ]]; then
  echo "cache simulation: I1 and D1 $l1, LL $ll (bytes,ways,line); $nodes nodes, ${window}s counted" >&2
  for round in $(seq 1 "$rounds"); do
    run plain && read -r _ plain_ir _ _ plain_dl <<<"$rate"
    run mtls && read -r _ mtls_ir _ _ mtls_dl <<<"$rate"
    python3 -c "print(f'round $round: mTLS / plain per heartbeat: instructions {$mtls_ir / $plain_ir:.3f}, LL misses {$mtls_dl / $plain_dl:.3f} ({$mtls_dl - $plain_dl:+.1f})')"
  done
  exit 0
fi

# PROFILE's split of one run: the controller's CPU per heartbeat (µs) shared out by the
# functions its samples fell in.
profile_split() { # FILE MICROSECONDS MODE
  perf report -i "$1" --no-children --sort dso,symbol --stdio 2>/dev/null |
    python3 -c '
import re, sys
per_heartbeat, mode = float(sys.argv[1]), sys.argv[2]
parts = dict.fromkeys(["AES-GCM", "ring", "rustls", "connection", "kernel", "allocation", "rest"], 0.0)
for line in sys.stdin:
    m = re.match(r"\s+([\d.]+)%\s+\S+\s+\[(.)\]\s+(.*)", line)
    if not m:
        continue
    share, kind, symbol = float(m.group(1)), m.group(2), m.group(3)
    if kind == "k":
        part = "kernel"
    elif re.search(r"ring_core.*(aes|gcm|ghash)", symbol):
        part = "AES-GCM"
    elif "rustls" in symbol:
        part = "rustls"
    elif re.search(r"ring::|ring_core", symbol):
        part = "ring"
    elif "tls_server" in symbol:
        part = "connection"
    elif re.search(r"\bmi_|malloc|\bfree\b", symbol):
        part = "allocation"
    else:
        part = "rest"
    parts[part] += share * per_heartbeat / 100
print(f"  {mode} profile, µs per heartbeat: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
' "$2" "$3"
}

ratios=() cpu_ratios=()
for round in $(seq 1 "$rounds"); do
  if ((round % 2)); then
    run plain && plain=$rate plain_cpu=$cpu
    run mtls && mtls=$rate mtls_cpu=$cpu
  else
    run mtls && mtls=$rate mtls_cpu=$cpu
    run plain && plain=$rate plain_cpu=$cpu
  fi
  read -r plain_controller plain_loadgen <<<"$plain_cpu"
  read -r mtls_controller mtls_loadgen <<<"$mtls_cpu"
  ratio=$(python3 -c "print(f'{$mtls / $plain:.3f}')")
  # The controller's CPU per heartbeat, plain / mTLS: the rate mTLS leaves a controller whose
  # cores are its own, relative to plain.
  cpu_ratio=$(python3 -c "print(f'{$plain_controller / $mtls_controller:.3f}')")
  ratios+=("$ratio") cpu_ratios+=("$cpu_ratio")
  echo "round $round: plain $plain/s, mTLS $mtls/s, mTLS / plain $ratio (load $(cut -d' ' -f1 /proc/loadavg))"
  echo "  CPU per heartbeat, controller: plain $plain_controller µs, mTLS $mtls_controller µs (plain / mTLS $cpu_ratio); load generator: plain $plain_loadgen µs, mTLS $mtls_loadgen µs"
  if [[ -n $profile ]]; then
    profile_split "$profile/plain-round$round.data" "$plain_controller" plain
    profile_split "$profile/mtls-round$round.data" "$mtls_controller" mTLS
  fi
done
median() { printf '%s\n' "$@" | sort -n | python3 -c 'import sys; v=[float(x) for x in sys.stdin]; n=len(v); print(f"{(v[n//2] if n%2 else (v[n//2-1]+v[n//2])/2):.3f}")'; }
echo "mTLS / plain per round: ${ratios[*]}; median $(median "${ratios[@]}")"
echo "the controller's CPU per heartbeat, plain / mTLS, per round: ${cpu_ratios[*]}; median $(median "${cpu_ratios[@]}")"
