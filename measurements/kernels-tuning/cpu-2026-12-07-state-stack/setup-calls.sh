# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh: the stacked
# state pass variants as module copies for cprobe.py, and a kdakit wheel with stack2m adopted in
# .carry/stackwheel for call.sh. Each arm's diff is against the arm before it (stack1's against
# kernels/prefill.py at 2bf6f3a), so stack2m is the three applied in turn.
set -eu
D=measurements/kernels-tuning/cpu-2026-12-07-state-stack
module=$(mktemp)
git show 2bf6f3a:kernels/prefill.py > "$module"
for v in stack1 stack2d stack2m; do
  patch -s "$module" $D/state-$v.diff
  cp "$module" .carry/calls/prefill_$v.py
done
tree=$(mktemp -d)
git archive 2bf6f3a | tar -x -C "$tree"
cp "$module" "$tree/kernels/prefill.py"
rm -f "$module"
rm -rf .carry/stackwheel .carry/vtwheel && mkdir -p .carry/stackwheel
python3 -m pip wheel -q --no-deps -w .carry/stackwheel "$tree" > /dev/null
rm -rf "$tree"
