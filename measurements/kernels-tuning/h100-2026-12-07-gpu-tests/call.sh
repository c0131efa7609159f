# The command that ran (carry [".whl", ".carry"]): ../cpu-2026-12-06-next-calls/gpu-tests.sh with its limit cut
# to the session's device time left.
sed 's/T=$(( 575 - SECONDS ))/T=$(( 370 - SECONDS ))/' measurements/kernels-tuning/cpu-2026-12-06-next-calls/gpu-tests.sh > /tmp/gt.sh && grep -c 370 /tmp/gt.sh && bash /tmp/gt.sh
