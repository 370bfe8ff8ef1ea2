#!/usr/bin/env bash
# The device tool sends the working tree's tracked files, at most 64 MiB, and results/ holds ~60 MB
# of recorded runs. `park` takes results/'s recorded data out of the working tree (git keeps every
# byte: nothing is lost), leaving what the GPU scripts read there (scenario YAMLs, scripts, tables,
# READMEs); `restore` checks the parked files out again. Park, make the device calls, restore:
#   bash scripts/device-tree.sh park && <device calls> ; bash scripts/device-tree.sh restore
set -euo pipefail
cd "$(dirname "$0")/.."
keep='\.(yaml|yml|sh|py|tsv|md|gp|txt)$'
case "${1:-}" in
  park)
    if ! git diff --quiet -- results; then echo "results/ has uncommitted changes: commit them before parking" >&2; exit 1; fi
    git ls-files -z results | grep -zvE "$keep" | xargs -0 -r rm -f
    echo "parked $(git ls-files -d results | wc -l) files of results/ (restore: bash scripts/device-tree.sh restore);" \
      "the tree that travels: $(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}') bytes"
    ;;
  restore)
    git ls-files -z -d results | xargs -0 -r git checkout --
    echo "restored; $(git ls-files -d results | wc -l) files of results/ missing"
    ;;
  *) echo "usage: bash scripts/device-tree.sh park|restore" >&2; exit 2 ;;
esac
