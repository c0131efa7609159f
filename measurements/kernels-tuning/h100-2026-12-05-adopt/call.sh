# Call, with intra-hoist, gate-1 and state-pass-1 (../cpu-2026-12-05-next-variants/) adopted in
# kernels/prefill.py and bundle.sh re-run: gate's files searched again for 16 heads into a copy of
# kernels/configs/ (gate-1 changed its source and tile), served prefill and the prefill bench (FLA included)
# on those files, then gate's 8-head files while time is left. Carry [".whl", ".carry"].
set -u
mkdir -p $OUT/r
( while sleep 10; do tar czf $OUT/results.tgz -C $OUT r 2>/dev/null; done ) & packer=$!
source .carry/gpu-host/setup.sh > $OUT/r/setup.log 2>&1
export KDA_STUBS=sgl_kernel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/env.txt
python3 -P -c "import torch, triton, importlib.metadata as m; print(torch.__version__, triton.__version__, m.version('helion'), m.version('sglang'), m.version('fla-core'))" >> $OUT/r/env.txt 2>&1
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku setup t=$SECONDS" >> $OUT/r/times.txt
cp -r kernels/configs $OUT/r/configs
timeout $(( 170 - SECONDS )) .carry/calls/kd kernels autotune --sku $sku --kernels prefill-gate --heads 16 \
  --tokens 4096,512,16,8192 --budget-seconds 20 --out $OUT/r/configs > $OUT/r/autotune-h16.log 2>&1
echo "autotune h16 rc=$? t=$SECONDS" >> $OUT/r/times.txt
export KDAKIT_KERNEL_CONFIG_DIR=$OUT/r/configs
timeout 140 .carry/calls/kd kernels served --arms helion,triton --reps 3 --results-dir $OUT/r/served --run-id vm \
  > $OUT/r/served.log 2>&1
echo "served rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout 200 .carry/calls/kd kernels bench --phases prefill --repeats 2 --results-dir $OUT/r/bench --run-id vm \
  > $OUT/r/bench.log 2>&1
echo "bench rc=$? t=$SECONDS" >> $OUT/r/times.txt
timeout $(( 590 - SECONDS )) .carry/calls/kd kernels autotune --sku $sku --kernels prefill-gate --heads 8 \
  --tokens 4096,512,16,8192 --budget-seconds 20 --out $OUT/r/configs > $OUT/r/autotune-h8.log 2>&1
echo "autotune h8 rc=$? t=$SECONDS" >> $OUT/r/times.txt
kill $packer; tar czf $OUT/results.tgz -C $OUT r
