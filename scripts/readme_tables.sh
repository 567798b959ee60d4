#!/usr/bin/env bash
# Regenerates README.md's generated tables (the <!-- NAME:begin ... --> blocks) from ds_check_config, after a change
# to a key, a rule or its message. DsCheckConfigCli.ReadmeTablesAreTheGeneratedOnes fails until this has run.
# Usage: scripts/readme_tables.sh [path/to/ds_check_config]   (default: build/bin/ds_check_config)
set -euo pipefail
cd "$(dirname "$0")/.."
tool="${1:-build/bin/ds_check_config}"
[[ -x "$tool" ]] || { echo "readme_tables.sh: $tool not built (ninja -C build ds_check_config)" >&2; exit 1; }
declare -A flags=([keys]="--keys_markdown" [refusals]="--refusals_markdown" [features]="--features_markdown"
                  [auto]="--auto_markdown" [combinations]="--rules_markdown combinations"
                  [pipeline]="--rules_markdown pipeline" [initialize]="--rules_markdown initialize")
for name in "${!flags[@]}"; do
  # shellcheck disable=SC2086  # the flags are words
  "$tool" ${flags[$name]} > "/tmp/readme_block_$$"
  python3 - "$name" "/tmp/readme_block_$$" <<'PY'
import re, sys
name, block = sys.argv[1], open(sys.argv[2]).read()
text = open("README.md").read()
pattern = re.compile(r"(<!-- %s:begin[^\n]*-->\n)(.*?)(<!-- %s:end -->)" % (name, name), re.S)
if not pattern.search(text):
    sys.exit("README.md has no <!-- %s:begin --> block" % name)
open("README.md", "w").write(pattern.sub(lambda m: m.group(1) + block + m.group(3), text, count=1))
PY
done
rm -f "/tmp/readme_block_$$"
