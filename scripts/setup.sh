#!/usr/bin/env bash
# Set up bargein on a fresh Debian machine: system packages, a virtualenv in .venv, the package
# with its embedded models. Usage: scripts/setup.sh [serve|test]. Safe to run again (it skips what is there).
set -euo pipefail
cd "$(dirname "$0")/.."
purpose="${1:-serve}"

apt_packages=(flite)
if [[ "$purpose" == "test" ]]; then
  # espeak-ng: voices of bench/endpoint_set.py; with festival, its voices and the asterisk recordings, the
  # listening benchmark's voice families (tests/data/voices.py)
  apt_packages+=(pocketsphinx-testdata chromium espeak-ng festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts
                 asterisk-core-sounds-en-wav)
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
.venv/bin/python -m pip install -q --upgrade pip

# llama-cpp-python has no Linux wheel, and its default build targets the build machine's CPU
# natively, which on these virtual machines includes AMX that the guest may not execute (the first
# decode segfaults). So it is built once with explicit instruction sets (the AVX-512 family only where
# the CPU has it, AMX never) into bargein's own cache, keyed by version and flags, and reused from
# there: about 15 minutes the first time on 2 cores, seconds after.
llama_version="0.3.36"
has() { grep -qw "$1" /proc/cpuinfo 2>/dev/null; }
flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
has avx_vnni && flags+=" -DGGML_AVX_VNNI=ON"
if has avx512f && has avx512bw && has avx512vl; then
  flags+=" -DGGML_AVX512=ON"
  has avx512vbmi && flags+=" -DGGML_AVX512_VBMI=ON"
  has avx512_vnni && flags+=" -DGGML_AVX512_VNNI=ON"
  has avx512_bf16 && flags+=" -DGGML_AVX512_BF16=ON"
fi
flags+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF"
variant="$(echo "$llama_version $flags" | sha256sum | cut -c1-12)"
wheels="${BARGEIN_CACHE_DIR:-$HOME/.cache/bargein}/wheels/llama-cpp-python-$variant"
if ! compgen -G "$wheels/llama_cpp_python-$llama_version-*.whl" >/dev/null; then
  echo "building llama-cpp-python $llama_version once (about 15 minutes on 2 cores) into $wheels"
  CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip wheel -q --no-cache-dir \
    --no-deps --no-binary llama-cpp-python "llama-cpp-python==$llama_version" -w "$wheels.partial"
  mkdir -p "$(dirname "$wheels")"
  rm -rf "$wheels" && mv "$wheels.partial" "$wheels"
fi
.venv/bin/python -m pip install -q "$wheels"/llama_cpp_python-"$llama_version"-*.whl

extras=""
[[ "$purpose" == "test" ]] && extras="[test]"
.venv/bin/python -m pip install -q -e ".${extras}"

# Smart Turn v3.2 (the end-of-turn model) ships inside the pipecat-ai wheel: download that wheel without
# its dependencies (Pipecat's runtime is not installed), take the one ONNX file out, check its sha256.
.venv/bin/python -m bargein.engines.listen.smart_turn_file

# The tests run third-party clients too: the OpenAI Agents SDK for JavaScript under Node (npm registry).
if [[ "$purpose" == "test" ]] && command -v npm >/dev/null 2>&1; then
  npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
fi
