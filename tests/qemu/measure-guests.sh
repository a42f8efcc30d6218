#!/usr/bin/env bash
# Measures the qemu runtime with N running guests (docs/performance.md): `fleetwire up
# --runtime qemu` (plain HTTP, TCG); one guest of tests/qemu/build-guest.sh placed through the
# controller and timed until it serves, three times; then N guests, each waited for until it
# serves; then over a minute the agent's own CPU, its converge passes (wall and CPU per pass,
# from its /metrics) and its resident memory, and QEMU's. Stops everything at the end.
#
# Usage: [TRIES=3] bash tests/qemu/measure-guests.sh [N] [FLEETWIRE_BINARY]
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
# A loaded host boots 20 TCG guests slowly: they get 30 minutes (VM_GUEST_BOOT_TIMEOUT_S), not
# the default 2, before the agent gives up on them.
VM_IMAGE_DIR="$work/images" VM_HOST_PORT_RANGE="$first-$((first + n + 10))" VM_QEMU_ACCEL=tcg \
    VM_GUEST_BOOT_TIMEOUT_S=1800 \
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

place() { # VM_ID: places one guest, prints its host port
    curl -s -X POST "http://127.0.0.1:$api_port/v1/vms" -H 'content-type: application/json' \
        -d "{\"vm_type\": \"web\", \"vm_id\": \"$1\", \"ram_mb\": 96, \"vcpu_count\": 1, \"disk_gb\": 1,
             \"boot\": {\"kernel\": \"vmlinuz\", \"initrd\": \"initrd.img\", \"cmdline\": \"console=ttyS0 quiet no_timer_check\"},
             \"guest_ports\": [80]}" >"$work/$1.json"
    jq -r '.host_ports[0].host_port' "$work/$1.json"
}
serves() { curl -s -m 2 "http://127.0.0.1:$1/" | grep -q "fleetwire guest"; }

# One guest on an idle node, three times: from POST /v1/vms to the guest serving through its
# host port (polled every 50 ms, 0.5 s a try), then DELETE and wait until its QEMU is gone.
# Beside each, the reference: the same guest started by hand with QEMU alone (the command line
# the agent gives it, runtime/src/drivers/qemu/argv.rs), from QEMU's start to serving.
serves_now() { curl -s -m 0.5 "http://127.0.0.1:$1/" | grep -q "fleetwire guest"; }
# On a loaded host a TCG guest's kernel can find its timer too slow and panic ("IO-APIC + timer
# doesn't work"): the guests here boot with no_timer_check, as cloud images do.
bare_port=$((first + n + 11))
for i in $(seq 1 "${TRIES:-3}"); do
    t0=$(date +%s.%N)
    qemu-system-x86_64 -name bare -accel tcg -m 96 -smp 1 -nodefaults -no-user-config -display none \
        -serial "file:$work/bare.log" -netdev "user,id=net0,hostfwd=tcp::$bare_port-:80" \
        -device virtio-net-pci,netdev=net0 -kernel "$work/images/vmlinuz" \
        -initrd "$work/images/initrd.img" -append "console=ttyS0 quiet no_timer_check" &
    bare=$!
    until serves_now "$bare_port"; do sleep 0.05; done
    t1=$(date +%s.%N)
    kill "$bare"; wait "$bare" 2>/dev/null || true
    echo "QEMU alone, start to serving: $(echo "$t1 - $t0" | bc) s (load $(cut -d' ' -f1-3 /proc/loadavg))"

    t0=$(date +%s.%N)
    port=$(place "one$i")
    t1=$(date +%s.%N)
    until serves_now "$port"; do sleep 0.05; done
    t2=$(date +%s.%N)
    # QEMU's start (its startedAt: the process's start time) splits it: placement and the
    # agent until QEMU runs, then QEMU and the guest's boot.
    qemu_started=$(curl -s "http://127.0.0.1:$spawn_port/v1/reported" |
        jq -r ".instances[] | select(.appId == \"one$i\") | .startedAt")
    qemu_started=$(date -d "$qemu_started" +%s.%N)
    echo "placement to serving, one guest on an idle node: $(echo "$t2 - $t0" | bc) s = $(echo "$qemu_started - $t0" | bc) s to QEMU's start + $(echo "$t2 - $qemu_started" | bc) s to serving (the POST answered after $(echo "$t1 - $t0" | bc) s; load $(cut -d' ' -f1-3 /proc/loadavg))"
    curl -s -X DELETE "http://127.0.0.1:$api_port/v1/vms/one$i" >/dev/null
    while pgrep -f "qemu-system-x86_64 -name one$i" >/dev/null; do sleep 0.2; done
done

started=$(date +%s.%N)
ports=""
for i in $(seq 1 "$n"); do
    ports="$ports $(place "g$i")"
done
# All serving, or 15 minutes: the figures below are taken with the guests running either way.
deadline=$(($(date +%s) + 900))
for p in $ports; do
    until serves "$p" || [ "$(date +%s)" -ge "$deadline" ]; do sleep 0.5; done
done
serving=$(date +%s.%N)
up_count=0
for p in $ports; do serves "$p" && up_count=$((up_count + 1)); done
echo "guests: $n; placement of all to $up_count serving: $(echo "$serving - $started" | bc) s (load $(cut -d' ' -f1-3 /proc/loadavg))"

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The converge figures of the agent's /metrics (docs/agent.md, "/metrics").
metric() { curl -s "http://127.0.0.1:$spawn_port/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
sleep 10 # let the last boots settle
a0=$(cpu "$agent"); t0=$(date +%s.%N)
c0=$(metric fleetwire_agent_converge_seconds_count); s0=$(metric fleetwire_agent_converge_seconds_sum)
u0=$(metric fleetwire_agent_converge_cpu_seconds_total)
sleep 60
a1=$(cpu "$agent"); t1=$(date +%s.%N)
c1=$(metric fleetwire_agent_converge_seconds_count); s1=$(metric fleetwire_agent_converge_seconds_sum)
u1=$(metric fleetwire_agent_converge_cpu_seconds_total)
wall=$(echo "$t1 - $t0" | bc)
echo "agent CPU over ${wall%.*} s with $n running guests: $(echo "scale=4; ($a1 - $a0) / $ticks / $wall * 100" | bc) % of one core (load $(cut -d' ' -f1-3 /proc/loadavg))"
passes=$(echo "$c1 - $c0" | bc)
echo "converge passes with $n guests: $passes; per pass $(echo "scale=2; ($s1 - $s0) * 1000000 / $passes" | bc) µs wall, $(echo "scale=2; ($u1 - $u0) * 1000000 / $passes" | bc) µs CPU"
echo "agent resident memory: $(awk '/VmRSS/ {print $2, $3}' "/proc/$agent/status")"
qemu_kb=0
for pid in $(pgrep -f "qemu-system-x86_64 -name g"); do
    qemu_kb=$((qemu_kb + $(awk '/VmRSS/ {print $2}' "/proc/$pid/status")))
done
echo "QEMU resident memory, all $n: $((qemu_kb / 1024)) MB"
echo "reported.json instances running: $(jq '[.instances[] | select(.state == "running")] | length' "$work/state/agent/reported.json")"
