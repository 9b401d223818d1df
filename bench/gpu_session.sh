#!/usr/bin/env bash
# One measuring session on the GPU machine, as bench/RESULTS.md reports it: the GPU test
# suite (with the op timings), then `mstar bench` on a synthetic Qwen3-0.6B with rank-16
# adapters on every linear (mixes base, one, churn: 3 adapters over 2 slots), one prefill
# and one decode step by mode (the decode step's ops costed in context), a long prompt's
# TTFT by part, then, where Nsight Compute runs, the duration of each kernel of eager decode
# steps.
#
#   bash bench/gpu_session.sh OUT_DIR [preset]
#
# Environment: TESTS=0 skips the test suite (TESTS_TIMEOUT, default 300 s, bounds it), NCU=0
# the kernel timings; NCU_C=32 times the kernels of 32-sequence decode steps instead of one;
# ROUNDS=N measures each side N times,
# the sides taking turns to go first (default 2: in a single round the side that runs second
# meets a GPU that has drifted; ROUNDS=1 halves the time).
#
# Needs node on PATH, the checkout's node_modules and dist/, and the addon (build/ or
# MSTAR_PREBUILD). Writes OUT_DIR/{gpu_tests.log, gpu_tests_mma_sync.log, bench.json, bench.svg, bench.log, prefill_step.txt,
# ttft.txt, decode_step.txt, kernels.csv}.
set -uo pipefail
out=${1:?usage: gpu_session.sh OUT_DIR [preset]}
preset=${2:-qwen3-0.6b}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv

if [ "${TESTS:-1}" = 1 ]; then
  # A bound on the suite (a hung CUDA call cannot be interrupted by vitest's own timeouts),
  # and --reporter=verbose so that the log shows the last test that finished.
  MSTAR_GPU_TIMING=1 timeout "${TESTS_TIMEOUT:-300}" node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts \
    --reporter=verbose >"$out/gpu_tests.log" 2>&1
  echo "gpu tests: exit $? (124: stopped after ${TESTS_TIMEOUT:-300} s; the log's last lines say where)"
  grep -E "Test Files|Tests |FAIL|✗|×" "$out/gpu_tests.log" | head -40
  # Prefill attention again on the sm_80 tensor-core kernel, which a Hopper GPU skips for wgmma.
  MSTAR_WGMMA=0 timeout 120 node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts test/gpu/attention.test.ts \
    >"$out/gpu_tests_mma_sync.log" 2>&1
  echo "attention tests on mma.sync (MSTAR_WGMMA=0): exit $?"
  grep -E "Tests |FAIL" "$out/gpu_tests_mma_sync.log" | head -10
  sed -n '/linear n=1 /,/sample 64/p' "$out/gpu_tests.log" | head -40
fi

model=/tmp/mstar-$preset
rm -rf "$model"
node dist/lib/cli/main.js synth --preset "$preset" --out "$model" --adapters 3 --rank 16 >/dev/null
sed -i 's/slots: 3/slots: 2/' "$model/serve.yaml"  # churn: 3 adapters over 2 slots
MSTAR_PROFILE=1 node dist/lib/cli/main.js bench --serve "$model/serve.yaml" --concurrency 1,8,32,64 --prompt-len 128 --output-len 64 \
  --mix base,one,churn --rounds "${ROUNDS:-2}" --roofline --prefill 4096 --json "$out/bench.json" --svg "$out/bench.svg" 2>&1 | tee "$out/bench.log" | grep -vE "^lora-(on|off) [a-z]+ c=[0-9]+( round [0-9/]+)?:" | tail -40

# One eager prefill step by mode (LoRA off, base rows, one adapter): GPU, host and done times.
timeout 180 node bench/prefill_step.mjs "$model" >"$out/prefill_step.txt" 2>&1
echo "prefill_step: exit $?"; tail -n 13 "$out/prefill_step.txt"

# A 4096-token prompt's TTFT: the engine alone, then through the server (its share and the client's).
{ timeout 180 node bench/ttft_parts.mjs "$model" && timeout 300 node bench/ttft_http.mjs "$model"; } >"$out/ttft.txt" 2>&1
echo "ttft: exit $?"; grep -E "median|TTFT" "$out/ttft.txt"

# A decode step by mode, and what each op costs it in context (the step without that op).
DROP=1 SEQS=1,8 timeout 240 node bench/decode_step.mjs "$model" >"$out/decode_step.txt" 2>&1
echo "decode_step: exit $?"; grep -E "^c=" "$out/decode_step.txt"

if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  # Eager steps (graphs off), LoRA on, one adapter: 600 kernels from the middle of decoding
  # (at c=1 after 30000 launches; at larger c, after 10000: past the prefill steps).
  c=${NCU_C:-1}
  skip=$([ "$c" = 1 ] && echo 30000 || echo 10000)
  MSTAR_CUDA_GRAPHS=0 timeout 240 ncu --clock-control none --cache-control none --launch-skip "$skip" --launch-count 600 \
    --metrics gpu__time_duration.sum --csv node dist/lib/cli/main.js bench --serve "$model/serve.yaml" \
    --concurrency "$c" --requests $((c > 6 ? c : 6)) --prompt-len 128 --output-len 64 --mix one >"$out/kernels.csv" 2>"$out/ncu.log"
  echo "ncu: exit $? ($(grep -c gpu__time_duration "$out/kernels.csv") kernels)"
fi
