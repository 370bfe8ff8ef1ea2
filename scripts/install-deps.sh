#!/usr/bin/env bash
# Installs servelab's build and runtime dependencies from Debian 12 packages (idempotent).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libopenblas-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libboost-dev
      libgtest-dev gnuplot-nox)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
