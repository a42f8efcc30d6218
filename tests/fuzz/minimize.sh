#!/usr/bin/env bash
# Folds the queue of the last runs (target/afl/out/<target>/, from smoke.sh) into the kept
# corpus, minimized by afl-cmin to the smallest set of files with the same coverage
# (docs/reliability/parser-fuzz.md).
#
#   FUZZ_SECONDS=600 bash tests/fuzz/smoke.sh && bash tests/fuzz/minimize.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(documents desired_intake csr contact_log)
target_dir=${CARGO_TARGET_DIR:-$PWD/target}/afl
export AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1
for target in "${targets[@]}"; do
  all="$target_dir/cmin/$target-all"
  kept="$target_dir/cmin/$target"
  rm -rf "$all" "$kept" && mkdir -p "$all" "$target_dir/cmin/tmp"
  cp "tests/fuzz/corpus/$target"/* "$all"/
  queue="$target_dir/out/$target/default/queue"
  [ -d "$queue" ] && find "$queue" -maxdepth 1 -type f -name 'id:*' -exec cp {} "$all"/ \;
  # afl-cmin takes the map size from the run's edge count; a binary's map is never under
  # 65536 entries, and a smaller size made it trace nothing.
  edges=$(awk '$1 == "total_edges" {print $3}' "$target_dir/out/$target/default/fuzzer_stats" 2>/dev/null || true)
  export AFL_MAP_SIZE=$(( ${edges:-0} > 65536 ? ${edges:-0} : 65536 ))
  TMPDIR="$target_dir/cmin/tmp" cargo afl cmin -t 5000 -i "$all" -o "$kept" -- "$target_dir/fuzz/fuzz_$target"
  if [ -z "$(ls -A "$kept" 2>/dev/null)" ]; then
    echo "$target: afl-cmin kept nothing; the corpus stays as it was" >&2
    exit 1
  fi
  rm -rf "tests/fuzz/corpus/$target"
  mkdir -p "tests/fuzz/corpus/$target"
  # Names without the colons AFL++ writes, which some file systems and tools refuse.
  n=0
  for file in "$kept"/*; do
    n=$((n + 1))
    cp "$file" "tests/fuzz/corpus/$target/$(printf '%04d' "$n")"
  done
  echo "$target: $(ls "$all" | wc -l) files minimized to $n ($(du -sh "tests/fuzz/corpus/$target" | cut -f1))"
done
