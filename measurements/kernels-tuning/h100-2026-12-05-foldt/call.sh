# Call, with kdakit built from the fold-blocks adoption (foldt as kernels/prefill.py; bundle.sh re-run) and
# main's prefill.py carried as .carry/calls/prefill_base.py beside ../cpu-2026-12-05-state-fold/'s modules:
# per kernel, the base against foldt ("main" here: the installed kdakit), intra-hoist and gate-1 (each a
# diff against the base), then foldtma in a process of its own. If foldt's prefill is faster than the base at
# 1x4096 and 16 heads, recompute's files are searched again for 16 heads, then served prefill runs on them.
# Carry [".whl", ".carry"].
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku setup t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout $(( 220 - SECONDS )) python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16" \
  $OUT/r/variants.jsonl prefill_base,main,prefill_hoist,prefill_gate1 > $OUT/r/cprobe.log 2>&1
echo "cprobe rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout $(( 270 - SECONDS )) python3 -P .carry/calls/cprobe.py "1x4096:16" \
  $OUT/r/variants-tma.jsonl main,prefill_foldtma > $OUT/r/cprobe-tma.log 2>&1
echo "cprobe-tma rc=$? t=$SECONDS" >> $OUT/r/times.txt
faster=$(python3 -c "
import json, sys
best = {}
for line in open('$OUT/r/variants.jsonl'):
    r = json.loads(line)
    if r['case'] == '1x4096:16' and 'total' in r:
        best[r['arm']] = min(best.get(r['arm'], 1e9), r['total'])
print(int('main' in best and 'prefill_base' in best and best['main'] < best['prefill_base']))" 2>>$OUT/r/times.txt)
echo "foldt faster=$faster t=$SECONDS" >> $OUT/r/times.txt
if [ "$faster" = 1 ]; then
  cp -r kernels/configs $OUT/r/configs
  timeout $(( 450 - SECONDS )) .carry/calls/kd kernels autotune --sku $sku --kernels prefill-recompute --heads 16 \
    --tokens 4096,512,16,8192 --budget-seconds 30 --out $OUT/r/configs > $OUT/r/autotune-h16.log 2>&1
  echo "autotune h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
  KDAKIT_KERNEL_CONFIG_DIR=$OUT/r/configs timeout $(( 590 - SECONDS )) .carry/calls/kd kernels served \
    --arms helion,triton --reps 3 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
  echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
fi
kill $packer; tar czf $OUT/results.tgz -C $OUT r
