#!/usr/bin/env bash
# The GPU-machine half of the package test (test/package/README.md): installs a tarball made by
# `npm run prebuild && npm pack` into an empty folder with a PATH of node, npm and sh only — no
# compiler can run — then runs the GPU suite of this checkout against that installed addon.
#
#   npm run pack:gpu-check -- /path/to/mstar-0.1.0.tgz
#
# The checkout needs its node_modules but no addon of its own: `npm ci --ignore-scripts` is enough.
# An offline machine installs from a filled npm cache: set npm_config_cache and
# npm_config_offline=true, which pass through to the install.
set -euo pipefail
[[ $# -eq 1 && -f $1 ]] || { echo "usage: $0 mstar-VERSION.tgz (made by npm run prebuild && npm pack)" >&2; exit 2; }
tarball=$(realpath "$1")
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mstar-gpu-check.XXXXXX")
mkdir "$work/bin" "$work/project"
for tool in node npm npx sh; do ln -s "$(command -v "$tool")" "$work/bin/$tool"; done
echo '{"name": "mstar-gpu-check", "private": true}' > "$work/project/package.json"

cd "$work/project"
env -i HOME="$HOME" PATH="$work/bin" ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} \
  ${npm_config_cache:+npm_config_cache="$npm_config_cache"} ${npm_config_offline:+npm_config_offline="$npm_config_offline"} \
  npm install "$tarball" --no-audit --no-fund --foreground-scripts 2>&1 | tee "$work/install.log"
if grep -qE 'gyp info|cmake-js|building the addon' "$work/install.log" || [[ -e node_modules/mstar/build ]]; then
  echo "gpu_check: the install built the addon from source; the prebuild did not load" >&2
  exit 1
fi
env -i HOME="$HOME" PATH="$work/bin" ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} \
  ${CUDA_HOME:+CUDA_HOME="$CUDA_HOME"} node_modules/.bin/mstar doctor

# MSTAR_PREBUILD points the loader (node-gyp-build) of the checkout at the installed package.
cd "$repo"
# dist/ for the engine's worker thread: tsc only, no native build. A checkout carried without
# TypeScript brings its dist/ instead.
if [[ -d node_modules/typescript ]]; then npm run build:ts; else echo "gpu_check: no TypeScript here; using the checkout's dist/"; fi
MSTAR_PREBUILD="$work/project/node_modules/mstar" npx vitest run --config vitest.gpu.config.ts
echo "gpu_check: the GPU suite passed against $work/project/node_modules/mstar"
