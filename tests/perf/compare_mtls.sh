#!/usr/bin/env bash
# What mTLS costs the controller's heartbeat path, side by side with plain HTTP in one run
# (docs/performance.md, "mTLS against plain, side by side"; issue 27's budget: mTLS at most 15 %
# below plain). Each round starts a fresh controller (an empty data dir), `--plain-http` or the
# secure default, and runs `fleetwire-loadgen` against it: NODES nodes (3,000), a kept-alive
# connection each (`--connection-per-node`; with https each presents the certificate its
# registration got), a warm-up, then DURATION measured. The modes alternate, the order reversed
# every other round, and each round prints both rates and the ratio mTLS / plain.
#
#   bash tests/perf/compare_mtls.sh                       # 3 rounds (6 runs) of 8 s
#   ROUNDS=5 NODES=3000 DURATION=8s bash tests/perf/compare_mtls.sh
#
# Release builds of this checkout (`cargo build --release -p fleetwire -p fleetwire-loadgen`);
# FLEETWIRE_BIN and LOADGEN_BIN take other binaries; WORKERS is the controller's
# `--worker-threads` (one per CPU by default). NICE (-10 as root) gives the controller and
# the load generator the cores before other work on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
nodes=${NODES:-3000}
duration=${DURATION:-8s}
nice_level=${NICE:-$([[ $(id -u) == 0 ]] && echo -10 || echo 0)}
target=${CARGO_TARGET_DIR:-$PWD/target}
# The controller's RUST_LOG (CONTROLLER_LOG=warn,fleetwire::tls_server=debug to see dropped
# handshakes and shed connections); KEEP_FAILED=DIR keeps a failed run's directory there.
controller_log=${CONTROLLER_LOG:-warn}
if [[ -z ${FLEETWIRE_BIN:-} || -z ${LOADGEN_BIN:-} ]]; then
  echo "building fleetwire and fleetwire-loadgen (release) ..." >&2
  cargo build -q --release -p fleetwire -p fleetwire-loadgen >&2
fi
fleetwire=${FLEETWIRE_BIN:-$target/release/fleetwire}
loadgen=${LOADGEN_BIN:-$target/release/fleetwire-loadgen}
# A connection per node on both sides, and the controller's own descriptors.
ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d -t fleetwire-mtls.XXXXXX)
controller=
cleanup() {
  [[ -n $controller ]] && kill "$controller" 2>/dev/null && wait "$controller" 2>/dev/null
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
  RUST_LOG=$controller_log nice -n "$nice_level" "$fleetwire" controller --listen "127.0.0.1:$port" \
    --data-dir "$dir" "${args[@]}" ${WORKERS:+--worker-threads "$WORKERS"} >"$dir/controller.log" 2>&1 &
  controller=$!
  for _ in $(seq 1 100); do
    # Readiness only: the certificate is the load generator's to check.
    curl -fsS -o /dev/null -k "${client[1]}/healthz" 2>/dev/null && break
    sleep 0.1
  done
  nice -n "$nice_level" "$loadgen" "${client[@]}" --nodes "$nodes" --connection-per-node \
    --duration "$duration" --warmup 3s --threads 1 --fleet-every 0s --fleet-samples 0 \
    >"$dir/loadgen.out" 2>"$dir/loadgen.err" || {
    echo "loadgen failed ($mode):" >&2
    tail -n 20 "$dir/loadgen.err" "$dir/controller.log" >&2
    [[ -n ${KEEP_FAILED:-} ]] && cp -r "$dir" "$KEEP_FAILED/" && echo "kept $KEEP_FAILED/${dir##*/}" >&2
    exit 1
  }
  kill "$controller"
  wait "$controller" 2>/dev/null || true
  controller=
  # loadgen's report: "heartbeats: N ok, N failed, RATE/s (after ...)".
  rate=$(grep -oE '^heartbeats: .* ([0-9]+)/s' "$dir/loadgen.out" | grep -oE '[0-9]+/s' | tr -d /s)
}

ratios=()
for round in $(seq 1 "$rounds"); do
  if ((round % 2)); then
    run plain && plain=$rate
    run mtls && mtls=$rate
  else
    run mtls && mtls=$rate
    run plain && plain=$rate
  fi
  ratio=$(python3 -c "print(f'{$mtls / $plain:.3f}')")
  ratios+=("$ratio")
  echo "round $round: plain $plain/s, mTLS $mtls/s, mTLS / plain $ratio (load $(cut -d' ' -f1 /proc/loadavg))"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | python3 -c 'import sys; v=[float(x) for x in sys.stdin]; n=len(v); print(f"{(v[n//2] if n%2 else (v[n//2-1]+v[n//2])/2):.3f}")')
echo "mTLS / plain per round: ${ratios[*]}; median $median"
