#!/usr/bin/env bash
# API fuzzing from the document (docs/reliability/api-fuzz.md): schemathesis, every check,
# against a real controller on a scratch data dir (secure default mode with an admin operator
# token, then --plain-http) and a real node agent (plain mode, process driver, on loopback).
# Exits non-zero on any failure.
# Usage: tests/api_fuzz/run.sh [all|controller|controller-secure|controller-plain|agent]
#   FLEETWIRE_FUZZ_EXAMPLES  generated cases per operation and phase (default 40)
#   FLEETWIRE_FUZZ_MAX_TIME  time budget of one pass, in seconds (default 60)
#   FLEETWIRE_FUZZ_SEED      the random seed (default: a new one; the run prints it)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
what=${1:-all}
examples=${FLEETWIRE_FUZZ_EXAMPLES:-40}
max_time=${FLEETWIRE_FUZZ_MAX_TIME:-60}
seed_args=()
[ -n "${FLEETWIRE_FUZZ_SEED:-}" ] && seed_args=(--seed "$FLEETWIRE_FUZZ_SEED")

# FLEETWIRE_APIFUZZ_VENV: where the venv lives (.ci/run keeps it in its cache; its pins decide
# what pip installs, so a kept venv is never stale).
venv=${FLEETWIRE_APIFUZZ_VENV:-$root/target/apifuzz-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if [ "$what" != agent-inside ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r tests/api_fuzz/requirements.txt
  # The binary as `cargo test --workspace` builds it (a no-op after that command, as in
  # .ci/run): `cargo build -p fleetwire` would resolve other features and build it again.
  cargo test -q --workspace --no-run
fi
# The documents as the servers read request bodies (`x-fleetwire-unknown-fields: warn`: an
# unknown field is set aside, not refused), which the fuzzer must know: codegen's `as-read`.
documents=$root/target/api-fuzz-documents
if [ "$what" != agent-inside ]; then
  mkdir -p "$documents"
  for api in fleet-api agent-api; do
    cargo run -q -p fleetwire-codegen -- as-read "generated/openapi/$api.json" "$documents/$api.json"
  done
fi
bin=${CARGO_TARGET_DIR:-target}/debug/fleetwire
[ -x "$bin" ] || bin=$root/target/debug/fleetwire

work=$(mktemp -d -t fleetwire-apifuzz.XXXXXX)
# Each pass's JUnit report and VCR cassette (every request and answer), kept for a failure.
reports=$root/target/api-fuzz-reports
rm -rf "$reports"
# The secure controller's admin operator token (controller.toml gives it to operator routes;
# the plain pass's document asks for none, so it is never sent there).
FLEETWIRE_FUZZ_ADMIN_TOKEN="fuzz-admin-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export FLEETWIRE_FUZZ_ADMIN_TOKEN
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # Tenants the fuzzed agent started (process driver): their process groups, by run/*.pgid.
  for f in "$work"/agent/state/run/*.pgid; do
    [ -e "$f" ] && kill -KILL -- "-$(cut -d' ' -f1 <"$f")" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits until `url` answers 200 (curl options after it), or fails naming the log.
wait_for() {
  local url=$1 log=$2
  shift 2
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "$@" "$url" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "api-fuzz: $url never answered; its log:" >&2
  cat "$log" >&2
  return 1
}

# schemathesis with every check and every phase (examples, coverage, fuzzing, stateful). One
# worker: with two, CPython 3.11's ast.parse (hypothesis describing its filters) fails now and
# then from two threads ("AST constructor recursion depth mismatch"), an error of the fuzzer.
# Requests wait 35 s: the controller answers within its --request-timeout (30 s, else
# `503 timeout`: docs/controller.md), the agent's spawn within 10 s (docs/agent.md); the
# fuzzer's default of 10 s is shorter than what the documents promise.
fuzz() {
  local name=$1 document=$2 url=$3 config=$4
  shift 4
  echo "== api-fuzz: $name ($document, $url)"
  local started=$SECONDS
  # hooks.py: the rule a positive case must also keep (an image needs network).
  SCHEMATHESIS_HOOKS=$root/tests/api_fuzz/hooks.py \
    "$venv/bin/schemathesis" --config-file "$config" run "$document" --url "$url" --checks all \
    --phases examples,coverage,fuzzing,stateful --max-examples "$examples" \
    --max-time "$max_time" --workers 1 --no-color "${seed_args[@]}" --request-timeout 35 \
    --report junit,vcr --report-dir "$reports/$name" "$@"
  echo "== api-fuzz: $name passed in $((SECONDS - started)) s"
}

fuzz_controller() {
  fuzz_controller_secure
  fuzz_controller_plain
}

fuzz_controller_secure() {
  # Secure default: HTTPS with the controller's CA, operator routes with an admin token, node
  # routes without a node certificate (so refused, as the document says; the plain pass takes
  # them as a PPN agent does).
  local dir=$work/controller-secure port
  mkdir -p "$dir"
  port=$(free_port)
  printf '%s,fuzz-admin,admin\n' "$FLEETWIRE_FUZZ_ADMIN_TOKEN" >"$dir/operator-tokens"
  chmod 600 "$dir/operator-tokens"
  RUST_LOG=warn "$bin" controller --listen "127.0.0.1:$port" --data-dir "$dir" \
    --operator-token-file "$dir/operator-tokens" >"$dir/log" 2>&1 &
  pids+=($!)
  wait_for "https://127.0.0.1:$port/healthz" "$dir/log" --cacert "$dir/ca/ca.pem"
  (cd "$dir" && fuzz controller-secure "$documents/fleet-api.json" \
    "https://127.0.0.1:$port" "$root/tests/api_fuzz/controller.toml" \
    --tls-verify "$dir/ca/ca.pem")

}

fuzz_controller_plain() {
  # --plain-http: the same document as that mode reads it (docs/security.md: no token is asked
  # for), so every security requirement becomes "anyone"; nothing else changes.
  local dir=$work/controller-plain port
  mkdir -p "$dir"
  port=$(free_port)
  "$venv/bin/python" - "$documents/fleet-api.json" "$dir/fleet-api.plain.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for item in doc["paths"].values():
    for op in item.values():
        if isinstance(op, dict) and "security" in op:
            op["security"] = [{}]
json.dump(doc, open(sys.argv[2], "w"))
EOF
  RUST_LOG=warn "$bin" controller --listen "127.0.0.1:$port" --data-dir "$dir" --plain-http \
    >"$dir/log" 2>&1 &
  pids+=($!)
  wait_for "http://127.0.0.1:$port/healthz" "$dir/log"
  (cd "$dir" && fuzz controller-plain "$dir/fleet-api.plain.json" "http://127.0.0.1:$port" \
    "$root/tests/api_fuzz/controller.toml")
}

fuzz_agent() {
  # The agent's tenants run what a fuzzed spawn names (process driver): the pass runs in a
  # network and PID namespace of its own, so they reach no network but loopback and none
  # outlives it.
  unshare --net --pid --fork --kill-child bash "$0" agent-inside
}

fuzz_agent_inside() {
  ip link set lo up
  # A real agent in plain mode on loopback, process driver; its controller is a --plain-http
  # one, so it enrolls and reconciles as in a fleet.
  local dir=$work/agent cport aport
  mkdir -p "$dir/state"
  cport=$(free_port)
  aport=$(free_port)
  RUST_LOG=warn "$bin" controller --listen "127.0.0.1:$cport" --data-dir "$dir" --plain-http \
    >"$dir/controller.log" 2>&1 &
  pids+=($!)
  wait_for "http://127.0.0.1:$cport/healthz" "$dir/controller.log"
  VM_FLEET_ENDPOINT="http://127.0.0.1:$cport" VM_NODE_ID=fuzz-node VM_WG_IP=127.0.0.1 \
    VM_SPAWN_PORT="$aport" VM_STATE_DIR="$dir/state" VM_RUNTIME=process VM_PLAIN_HTTP=true \
    VM_LISTEN_ADDRESS=127.0.0.1 VM_HEARTBEAT_INTERVAL_S=1 VM_RECONCILE_INTERVAL_MS=100 \
    VM_STOP_TIMEOUT_MS=1000 RUST_LOG=warn "$bin" agent >"$dir/agent.log" 2>&1 &
  pids+=($!)
  wait_for "http://127.0.0.1:$aport/v1/reported" "$dir/agent.log"
  (cd "$dir" && fuzz agent "$documents/agent-api.json" "http://127.0.0.1:$aport" \
    "$root/tests/api_fuzz/agent.toml")
}

case $what in
  controller) fuzz_controller ;;
  controller-secure) fuzz_controller_secure ;;
  controller-plain) fuzz_controller_plain ;;
  agent) fuzz_agent ;;
  agent-inside) fuzz_agent_inside; exit 0 ;;
  all) fuzz_controller; fuzz_agent ;;
  *) echo "usage: $0 [controller|agent|all]" >&2; exit 2 ;;
esac
echo "api-fuzz: every pass passed"
