#!/usr/bin/env bash
# Set up bargein on a fresh Debian machine: system packages, a virtualenv in .venv, the package
# with its embedded models. Usage: scripts/setup.sh [serve|test]. Safe to run again (it skips what is there).
set -euo pipefail
cd "$(dirname "$0")/.."
purpose="${1:-serve}"

apt_packages=(flite)
if [[ "$purpose" == "test" ]]; then
  apt_packages+=(pocketsphinx-testdata chromium)
fi
missing=()
for package in "${apt_packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ "$(id -u)" != 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
# llama-cpp-python has no Linux wheel: pip builds it once (about 15 min on 2 cores) and keeps the
# wheel in its cache (~/.cache/pip/wheels), so later installs on this machine take seconds.
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
extras=""
[[ "$purpose" == "test" ]] && extras="[test]"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".${extras}"
