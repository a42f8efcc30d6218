#!/usr/bin/env bash
# What a stranger's request costs the controller (docs/security.md, "A stranger costs little";
# issue 28): a controller in mTLS mode, and side by side in the same run the CPU time (user +
# system, /proc/PID/stat) it spends on N requests of 1 MiB from a caller with no valid
# credential, on each kind of route:
#
#   operator  POST /v1/vms              a bearer token that is no operator token
#   register  POST /v1/nodes/register   a bearer token shaped as a bootstrap token, unknown
#   heartbeat POST /v1/nodes/heartbeat  no certificate
#
# and each node route's cost over the operator route's, which must be at most 2. Each request
# is one curl (a fresh connection and handshake, as a stranger's would be).
#
#   bash tests/perf/stranger_cost.sh [N]     # N requests of each (default 200)
#
# Uses the fleetwire binary `cargo build` or `cargo test` left in the target directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-200}
bin=${FLEETWIRE_BIN:-${CARGO_TARGET_DIR:-target}/debug/fleetwire}
[ -x "$bin" ] || { echo "no $bin: cargo build -p fleetwire first (or set FLEETWIRE_BIN)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'real-admin-token-0123456789abcdefghijklmnop,ops,admin\n' >"$dir/operators"
chmod 600 "$dir/operators"
RUST_LOG=warn "$bin" controller --listen "127.0.0.1:$port" --data-dir "$dir" \
  --operator-token-file "$dir/operators" 2>"$dir/controller.log" &
pid=$!
for _ in $(seq 100); do
  curl -sf --cacert "$dir/ca/ca.pem" "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
# 1 MiB of JSON: a string field.
python3 -c 'import json; print(json.dumps({"node_id": "n1", "pad": "x" * (1048576 - 40)}))' >"$dir/body.json"
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }  # clock ticks
ticks=$(getconf CLK_TCK)
measure() { # NAME PATH AUTH-HEADER...
  local name=$1 path=$2
  shift 2
  local before after status
  before=$(cpu)
  for _ in $(seq "$n"); do
    status=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$dir/ca/ca.pem" \
      -H 'content-type: application/json' "$@" --data-binary @"$dir/body.json" \
      "https://127.0.0.1:$port$path" || true)
  done
  after=$(cpu)
  python3 -c "print(f'$name: {($after - $before) / $ticks / $n * 1000:.3f} ms of CPU per request (last answer $status)')" >&2
  echo $((after - before))
}
op=$(measure operator /v1/vms -H 'authorization: Bearer not-an-operator-token')
reg=$(measure register /v1/nodes/register -H 'authorization: Bearer abcdef.0123456789abcdef')
hb=$(measure heartbeat /v1/nodes/heartbeat)
python3 - "$op" "$reg" "$hb" <<'PY'
import sys
op, reg, hb = (max(int(x), 1) for x in sys.argv[1:])
failed = False
for name, cost in (("register", reg), ("heartbeat", hb)):
    ratio = cost / op
    print(f"{name} / operator: {ratio:.2f} (at most 2)")
    failed |= ratio > 2
sys.exit(1 if failed else 0)
PY
