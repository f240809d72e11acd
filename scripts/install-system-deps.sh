#!/usr/bin/env bash
# Installs the Debian packages the test suite runs for real (Prometheus, headless Chromium), when missing.
# kubectl is expected on the machine already (it is not packaged by Debian).
set -euo pipefail

missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # the web page test drives it headless
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: $packages; run as root or: sudo apt-get install -y $packages" >&2
  exit 1
fi
echo "installing Debian packages: $packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $packages >/dev/null
