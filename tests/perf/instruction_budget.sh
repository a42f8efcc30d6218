#!/usr/bin/env bash
# The hot paths' instruction budgets (docs/performance.md, "Instruction budgets"): each path of
# runtime/examples/instruction_counts.rs served under callgrind at two request counts, the
# difference divided into instructions per request, and compared with
# tests/perf/instruction_budget.json. Fails when a path grew by more than the allowed growth.
# An instruction count does not move with the machine's load, so this guard holds on a shared
# machine where a timing would not; it does move with the compiler, which the failure says.
#
#   bash tests/perf/instruction_budget.sh            # every path
#   bash tests/perf/instruction_budget.sh heartbeat  # one
#
# Uses the example as `cargo test --workspace` builds it (debug: no second build in CI; a
# change in the code of a path moves its count in either profile).
set -euo pipefail
cd "$(dirname "$0")/../.."
budget_file=tests/perf/instruction_budget.json
command -v valgrind >/dev/null || {
  echo "valgrind is not installed (Debian: apt-get install -y valgrind)" >&2
  exit 1
}
# The example as `cargo test --workspace` builds it (a no-op after that command, as in .ci/run;
# `cargo build -p fleetwire --example` would resolve other features and build it again).
cargo test -q --workspace --no-run
example=${CARGO_TARGET_DIR:-target}/debug/examples/instruction_counts
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=($(python3 -c "import json,sys; print(' '.join(json.load(open('$budget_file'))['paths']))"))

count() { # PATH N -> instructions of the whole run
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$example" "$1" "$2" 2>&1 |
    awk '/Collected :/ {print $4}'
}

failed=0
for path in "${paths[@]}"; do
  read -r low high <<<"$(python3 -c "import json; p=json.load(open('$budget_file'))['paths']['$path']; print(p['requests'][0], p['requests'][1])")"
  # The two runs side by side: valgrind runs one thread at a time, and there are two cores.
  count "$path" "$low" >"/tmp/fw-ir-$path-low.$$" &
  count "$path" "$high" >"/tmp/fw-ir-$path-high.$$"
  wait
  a=$(cat "/tmp/fw-ir-$path-low.$$") b=$(cat "/tmp/fw-ir-$path-high.$$")
  rm -f "/tmp/fw-ir-$path-low.$$" "/tmp/fw-ir-$path-high.$$"
  python3 - "$budget_file" "$path" "$low" "$high" "$a" "$b" <<'PY' || failed=1
import json, sys
budget_file, path, low, high, a, b = sys.argv[1:]
entry = json.load(open(budget_file))['paths'][path]
per = (int(b) - int(a)) / (int(high) - int(low))
budget, growth = entry['instructions_per_request'], entry['allowed_growth']
ratio = per / budget
print(f"{path}: {per:,.0f} instructions per request, budget {budget:,} ({ratio:.3f}x; "
      f"allowed {1 + growth:.2f}x): {entry['what']}")
if ratio > 1 + growth:
    print(f"  {path} grew past its budget. Find what the change added to this path; if the "
          f"growth is worth it, raise instructions_per_request in {budget_file} in a commit "
          f"that says why. (A new Rust compiler moves every count: re-measure then.)")
    sys.exit(1)
if ratio < 0.9:
    print(f"  {path} is well under its budget: lower instructions_per_request in {budget_file} "
          f"to {per:,.0f} so that the guard keeps the gain.")
PY
done
exit $failed
