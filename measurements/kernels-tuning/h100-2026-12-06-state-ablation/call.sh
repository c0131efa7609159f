# Call, after ../cpu-2026-12-05-state-ablation/setup-calls.sh and the prefill_split module (see
# README); carry [".whl", ".carry"]. The state pass's ablations and the split variant against main, the gate's
# 16-head search, then served prefill on the searched files. Every step writes as it goes; the packer keeps
# a cut call's rows.
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku setup t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIGS=default timeout 170 python3 -P .carry/calls/cprobe.py "1x4096:16,8x512:16" \
  $OUT/r/ablation.jsonl main,prefill_split,prefill_chain,prefill_noload,prefill_chainnoload > $OUT/r/cprobe.log 2>&1
echo "ablation rc=$? t=$SECONDS" >> $OUT/r/times.txt
cp -r kernels/configs $OUT/r/configs
timeout $(( 450 - SECONDS )) .carry/calls/kd kernels autotune --sku $sku --kernels prefill-gate --heads 16 \
  --tokens 4096,512,16,8192 --budget-seconds 20 --out $OUT/r/configs > $OUT/r/autotune-h16.log 2>&1
echo "autotune h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
KDAKIT_KERNEL_CONFIG_DIR=$OUT/r/configs timeout $(( 590 - SECONDS )) .carry/calls/kd kernels served \
  --arms triton,helion --reps 3 --results-dir $OUT/r/served --run-id vm > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
