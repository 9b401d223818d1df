#!/usr/bin/env bash
# A/B of an environment switch on the GPU machine: `mstar bench --serve` on a synthetic
# model (as bench/gpu_session.sh makes it) once per value, in the order given, so that a
# switch's effect is measured in one session. Give the values in an order that cancels a
# drift, e.g. "1 0 0 1".
#
#   VAR=MSTAR_OVERLAP VALS="1 0 0 1" bash bench/ab.sh OUT_DIR [preset]
#
# VAR=DIST compares builds of the TypeScript instead: each value is a directory holding
# another checkout's dist/ (`npx tsc -p tsconfig.json --outDir DIR` there), copied over
# dist/ for its run (the engine's worker always loads dist/), and dist/ is put back after.
#
# Environment: CS (concurrencies, default 1,8,32,64), MIXES (default base,one). Needs what
# gpu_session.sh needs. Writes OUT_DIR/bench_<i>.json, one per value.
set -uo pipefail
out=${1:?usage: VAR=NAME VALS="a b ..." ab.sh OUT_DIR [preset]}
preset=${2:-qwen3-0.6b}
: "${VAR:?VAR names the environment variable to switch}" "${VALS:?VALS lists its values}"
mkdir -p "$out"
if [ "$VAR" = DIST ]; then
  kept=$(mktemp -d) && cp -r dist "$kept/dist"
  trap 'rm -rf dist && mv "$kept/dist" dist' EXIT
fi
model=/tmp/mstar-$preset
rm -rf "$model"
node dist/lib/cli/main.js synth --preset "$preset" --out "$model" --adapters 3 --rank 16 >/dev/null
sed -i 's/slots: 3/slots: 2/' "$model/serve.yaml"  # churn: 3 adapters over 2 slots
i=0
for val in $VALS; do
  i=$((i + 1))
  echo "== $VAR=$val"
  switch=("$VAR=$val")
  if [ "$VAR" = DIST ]; then rm -rf dist && cp -r "$val" dist && switch=(); fi
  env "${switch[@]}" node dist/lib/cli/main.js bench --serve "$model/serve.yaml" --concurrency "${CS:-1,8,32,64}" \
    --prompt-len 128 --output-len 64 --mix "${MIXES:-base,one}" --rounds 1 --roofline --json "$out/bench_$i.json" 2>&1 |
    grep -E "^lora-(on|off) +(base|one|churn) +c=[0-9]+ +[0-9]|step .* ms"
done
