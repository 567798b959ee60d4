#!/usr/bin/env bash
# scripts/run_main.sh builds only what its job runs: the targets it hands to scripts/build.sh produce the two
# binaries it executes and compile nothing of the tests or benchmarks (those are scripts/run_tests.sh's).
#   usage: run_main_test.sh <source-dir> <build-dir>
set -uo pipefail
src=$1 build=$2
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$build/build.ninja" ] || { echo "SKIP: $build is not a Ninja build"; exit 77; }

line=$(grep -E '^bash scripts/build\.sh' "$src/scripts/run_main.sh") || fail "run_main.sh does not call scripts/build.sh"
read -ra words <<< "$line"
targets=("${words[@]:2}")
[ ${#targets[@]} -gt 0 ] || fail "run_main.sh builds every target: '$line'"
# Every command building those targets needs (ninja reads its manifest only; nothing is built).
cmds=$(ninja -C "$build" -t commands "${targets[@]}") || fail "ninja does not know the targets ${targets[*]}"
for exe in deepspeed train_gpt; do
  grep -q -- "-o bin/$exe " <<< "$cmds" || fail "the targets ${targets[*]} do not link bin/$exe, which run_main.sh runs"
  grep -q "\"\$build_dir/bin/$exe\"" "$src/scripts/run_main.sh" || fail "run_main.sh no longer runs bin/$exe: update this test"
done
if grep -oE -- "$src/(tests|bench)/[^ ]+" <<< "$cmds" | head -3 | grep .; then
  fail "run_main.sh's targets compile tests or benchmarks"
fi
echo "run_main.sh builds ${targets[*]}: $(wc -l <<< "$cmds") commands"
