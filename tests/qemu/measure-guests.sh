#!/usr/bin/env bash
# Measures the qemu runtime with N running guests (docs/performance.md): `fleetwire up
# --runtime qemu` (plain HTTP, TCG), N guests of tests/qemu/build-guest.sh placed through the
# controller, each waited for until it serves; then the agent's own CPU and resident memory over
# a minute, and QEMU's. Stops everything at the end.
#
# Usage: bash tests/qemu/measure-guests.sh [N] [FLEETWIRE_BINARY]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
n="${1:-20}"
bin="${2:-$root/target/debug/fleetwire}"
guest="${FLEETWIRE_QEMU_GUEST:-$root/target/qemu-guest}"
[ -f "$guest/vmlinuz" ] || { echo "no guest: bash tests/qemu/build-guest.sh" >&2; exit 1; }

work="$(mktemp -d)"
mkdir -p "$work/images"
cp "$guest/vmlinuz" "$guest/initrd.img" "$work/images/"
api_port=39210
spawn_port=39211
first=39300
VM_IMAGE_DIR="$work/images" VM_HOST_PORT_RANGE="$first-$((first + n + 10))" VM_QEMU_ACCEL=tcg \
    "$bin" up --dir "$work/state" --listen "127.0.0.1:$api_port" --spawn-port "$spawn_port" \
    --node-id measure --heartbeat-interval 2 --plain-http --runtime qemu >"$work/up.log" 2>&1 &
up=$!
cleanup() {
    kill -INT "$up" 2>/dev/null || true
    wait "$up" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
until grep -q "fleetwire is up" "$work/up.log"; do sleep 0.5; done
agent="$(pgrep -f -- "$bin agent" | head -n1)"

started=$(date +%s.%N)
for i in $(seq 1 "$n"); do
    curl -s -X POST "http://127.0.0.1:$api_port/v1/vms" -H 'content-type: application/json' \
        -d "{\"vm_type\": \"web\", \"vm_id\": \"g$i\", \"ram_mb\": 96, \"vcpu_count\": 1, \"disk_gb\": 1,
             \"boot\": {\"kernel\": \"vmlinuz\", \"initrd\": \"initrd.img\", \"cmdline\": \"console=ttyS0 quiet\"},
             \"guest_ports\": [80]}" >"$work/g$i.json"
done
ports=$(jq -r '.host_ports[0].host_port' "$work"/g*.json)
for p in $ports; do
    until curl -s -m 2 "http://127.0.0.1:$p/" | grep -q "fleetwire guest"; do sleep 0.5; done
done
serving=$(date +%s.%N)
echo "guests: $n; placement of all to all serving: $(echo "$serving - $started" | bc) s"

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sleep 10 # let the last boots settle
a0=$(cpu "$agent"); t0=$(date +%s.%N)
sleep 60
a1=$(cpu "$agent"); t1=$(date +%s.%N)
wall=$(echo "$t1 - $t0" | bc)
echo "agent CPU over ${wall%.*} s with $n running guests: $(echo "scale=4; ($a1 - $a0) / $ticks / $wall * 100" | bc) % of one core"
echo "agent resident memory: $(awk '/VmRSS/ {print $2, $3}' "/proc/$agent/status")"
qemu_kb=0
for pid in $(pgrep -f "qemu-system-x86_64 -name g"); do
    qemu_kb=$((qemu_kb + $(awk '/VmRSS/ {print $2}' "/proc/$pid/status")))
done
echo "QEMU resident memory, all $n: $((qemu_kb / 1024)) MB"
echo "reported.json instances running: $(jq '[.instances[] | select(.state == "running")] | length' "$work/state/agent/reported.json")"
