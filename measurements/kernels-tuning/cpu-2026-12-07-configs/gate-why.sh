# Call, after ../cpu-2026-12-06-next-calls/setup-calls.sh (rerun: its wheel must hold autotune's pass-through
# of HELION_AUTOTUNE_LOG_LEVEL); carry [".whl", ".carry"]. The gate's search at one bucket with Helion's own
# log of every candidate (helion-gate-b*.csv: status, time; .log: each failure's error, at DEBUG), first with
# the 8-s budget that found nothing on the H100, then with 30 s.
set -u
source measurements/kernels-tuning/cpu-2026-12-06-next-calls/preamble.sh
sku=$(python3 -P -c "import torch, kdakit.kernels.tuned as t; print(t.sku_of(torch.cuda.get_device_name()))")
echo "sku=$sku" >> $OUT/r/times.txt
mkdir -p $OUT/r/why
for budget in 8 30; do
  HELION_AUTOTUNE_LOG=$OUT/r/helion-gate-b$budget HELION_AUTOTUNE_LOG_LEVEL=DEBUG timeout -k 10 150 \
    .carry/calls/kd kernels autotune --sku $sku --kernels prefill-gate --heads 16 --tokens 4096 \
    --budget-seconds $budget --out $OUT/r/why > $OUT/r/gate-why-b$budget.log 2>&1
  echo "gate why b$budget rc=$? t=$SECONDS" >> $OUT/r/times.txt
done
finish
