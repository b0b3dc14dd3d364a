#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the llama.cpp source that the
# llama-cpp-python source distribution pinned in requirements.txt vendors
# (vendor/llama.cpp), so the tests run the same llama.cpp as the Python peer.
# A portable CPU build (GGML_NATIVE=OFF), static, without curl.
#
# The binary is kept under ${XDG_CACHE_HOME:-~/.cache}/loadout-ci/, keyed by
# the pinned version: a rerun finds it and takes well under a second. The
# last line printed is the binary's path (for LOADOUT_LLAMA_SERVER).
#
#   LOADOUT_LLAMA_SERVER=$(testdata/llamacpp/build_llama_server.sh | tail -n1)
#
# Needs python3 with pip (to download the source distribution from PyPI),
# cmake and a C++ compiler; cmake and g++ are installed with apt-get when
# missing. BUILD_JOBS sets the build's parallelism (default: 2).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's/^llama-cpp-python\(\[[a-z,]*\]\)\?==\([0-9.]*\).*/\2/p' "$here/requirements.txt")"
[ -n "$version" ] || { echo "build_llama_server: no llama-cpp-python==VERSION in $here/requirements.txt" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/loadout-ci/llama-server-$version"
bin="$cache/bin/llama-server"
mkdir -p "$cache"

# One build at a time per cache directory; a second caller waits, then
# finds the binary.
exec 9>"$cache/.lock"
flock 9

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi

if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq cmake g++ make >/dev/null
fi

work="$cache/work"
rm -rf "$work"
mkdir -p "$work"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$work" "llama-cpp-python==$version" >&2
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "build_llama_server: no vendor/llama.cpp in llama-cpp-python $version's sdist" >&2; exit 1; }

cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$work/build" --target llama-server -j "${BUILD_JOBS:-2}" >&2

mkdir -p "$cache/bin"
cp "$work/build/bin/llama-server" "$bin.tmp"
mv "$bin.tmp" "$bin"
rm -rf "$work"
"$bin" --version >&2
echo "$bin"
