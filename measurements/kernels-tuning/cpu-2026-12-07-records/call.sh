# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh; carry [".whl", ".carry"]. On an H200: the served
# and bench record of ../cpu-2026-12-07-state-order/served-bench.sh. On an H100, which already has a full
# served and bench record of this code: the per-kernel profile in SGLang's prefill graph.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash measurements/kernels-tuning/cpu-2026-12-07-state-order/served-bench.sh
fi
exec bash measurements/kernels-tuning/cpu-2026-12-06-next-calls/served-profile.sh
