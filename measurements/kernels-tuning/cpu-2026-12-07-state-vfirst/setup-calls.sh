# On the CPU machine, from the repository root, after ../cpu-2026-12-06-next-calls/setup-calls.sh: the
# V-first state pass variants as module copies for cprobe.py, and a kdakit wheel with vtu adopted (the tree
# of bb6113e, which the diffs are against, with state-vtu.diff applied) in .carry/vtwheel for call.sh's tests.
set -eu
D=measurements/kernels-tuning/cpu-2026-12-07-state-vfirst
for v in vt vt128 vtu vtu3; do
  git show bb6113e:kernels/prefill.py > .carry/calls/prefill_$v.py
  patch -s .carry/calls/prefill_$v.py $D/state-$v.diff
done
tree=$(mktemp -d)
git archive bb6113e | tar -x -C "$tree"
patch -s -d "$tree" -p1 < $D/state-vtu.diff
rm -rf .carry/vtwheel && mkdir -p .carry/vtwheel
python3 -m pip wheel -q --no-deps -w .carry/vtwheel "$tree" > /dev/null
rm -rf "$tree"
