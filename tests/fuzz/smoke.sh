#!/usr/bin/env bash
# Fuzzes each target for a fixed time from its kept corpus, with AFL++ through cargo-afl on the
# stable toolchain; fails on any crash or hang (docs/reliability/parser-fuzz.md).
#
#   bash tests/fuzz/smoke.sh                 # 20 s a target (about 2 min plus the build)
#   FUZZ_PROFILE=fuzz-smoke bash tests/fuzz/smoke.sh   # CI: the unoptimized build (5 min from nothing)
#   FUZZ_SECONDS=600 bash tests/fuzz/smoke.sh documents csr
#
# Installs cargo-afl and builds AFL++ once (kept in ~/.cargo/bin and ~/.local/share/afl.rs);
# the instrumented build goes to $CARGO_TARGET_DIR/afl (default target/afl), apart from the
# normal build, whose flags it would otherwise overwrite. Each run's queue, crashes and hangs
# stay in target/afl/out/<target>/ (tests/fuzz/minimize.sh folds the queue into the corpus).
set -euo pipefail
cd "$(dirname "$0")/../.."

AFL_VERSION=0.18.2
seconds=${FUZZ_SECONDS:-20}
# `fuzz` (optimized) for long runs; CI takes `fuzz-smoke` (Cargo.toml says why).
profile=${FUZZ_PROFILE:-fuzz}
# cargo-afl puts `-C opt-level=$AFL_OPT_LEVEL` (3 when unset) and `-C codegen-units=1` in
# RUSTFLAGS, and those win over a profile's own settings, so a profile alone cannot make an
# unoptimized build: the smoke asks cargo-afl itself (docs/reliability/parser-fuzz.md).
if [ "$profile" = fuzz-smoke ]; then
  export AFL_OPT_LEVEL=${AFL_OPT_LEVEL:-0}
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(documents desired_intake csr contact_log)
target_dir=${CARGO_TARGET_DIR:-$PWD/target}/afl

if [ "$(cargo afl --version 2>/dev/null | awk '{print $2}')" != "$AFL_VERSION" ]; then
  cargo install cargo-afl --version "$AFL_VERSION" --locked
fi
# Builds AFL++ for this rustc once; a second call says it is built already.
if ! config=$(cargo afl config --build 2>&1); then
  grep -q "already built" <<<"$config" || { echo "$config" >&2; exit 1; }
fi

CARGO_TARGET_DIR="$target_dir" cargo afl build --profile "$profile" -p fleetwire-fuzz --features afl --bins
python3 tests/fuzz/dictionary.py "$target_dir/json.dict"
# FUZZ_BUILD_ONLY=1: stop here (.ci/run builds the targets beside the API fuzzing, then fuzzes).
[ -z "${FUZZ_BUILD_ONLY:-}" ] || { echo "fuzz targets built ($profile)"; exit 0; }

# No terminal, no CPU frequency or core-dump settings to insist on, no core of its own on a
# shared machine.
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
# A hang is an input slower than 5 s (-t) twice in a row: AFL++ runs an input that passed the
# limit once more at once, with AFL_HANG_TMOUT, and keeps it as a hang only when it is slow
# again. Once is what a stalled disk or a starved core does to any input on a shared machine
# (CI once kept a desired_intake input that way); every such timeout is still counted, as
# total_tmout in the line below (docs/reliability/parser-fuzz.md).
export AFL_HANG_TMOUT=5001
failed=()
for target in "${targets[@]}"; do
  out="$target_dir/out/$target"
  rm -rf "$out" "$out.tmp"
  # The targets' scratch files (desired.json, the node CA) live under the run's folder.
  mkdir -p "$out.tmp"
  dict=()
  case "$target" in documents | desired_intake) dict=(-x "$target_dir/json.dict") ;; esac
  echo "fuzzing $target for ${seconds}s"
  TMPDIR="$out.tmp" cargo afl fuzz -V "$seconds" -t 5000 "${dict[@]}" -i "tests/fuzz/corpus/$target" -o "$out" \
    "$target_dir/$profile/fuzz_$target" >"$out.log" 2>&1 || { tail -n 30 "$out.log"; failed+=("$target"); continue; }
  stats="$out/default/fuzzer_stats"
  echo "  $(grep -E '^(execs_done|corpus_count|edges_found|total_edges|saved_crashes|saved_hangs|total_tmout) ' "$stats" | awk '{printf "%s=%s ", $1, $3}')"
  found=$(find "$out/default/crashes" "$out/default/hangs" -type f -name 'id:*' | sort)
  if [ -n "$found" ]; then
    echo "  $target: crashes or hangs (replay each with: cargo test -p fleetwire-fuzz after copying it to tests/fuzz/crashes/$target/):"
    echo "$found" | sed 's/^/    /'
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz smoke failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz smoke passed: ${targets[*]}, ${seconds}s each"
