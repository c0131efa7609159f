"""Static instruction mix of a prefill kernel's PTX for sm_90a (default config)."""
import re, sys, tempfile, os, collections
from kdakit.kernels import prefill
from kdakit.kernels.tools import ptxas as P
names = sys.argv[1].split(",")
args = P.example_args()
pat = {"mma.sync": r"\bmma\.sync", "wgmma": r"\bwgmma\.mma_async", "fma.f32": r"\bfma\.rn\.f32",
       "mul.f32": r"\bmul(\.rn)?\.f32", "add.f32": r"\badd(\.rn)?\.f32", "ex2": r"\bex2\.", "shfl": r"\bshfl\.",
       "bar.sync": r"\bbar\.sync|\bbarrier\.sync", "ld.shared": r"\bld\.shared", "st.shared": r"\bst\.shared",
       "ldmatrix": r"\bldmatrix", "ld.global": r"\bld\.global", "st.global": r"\bst\.global",
       "cvt": r"\bcvt\.", "selp": r"\bselp\."}
for name in names:
    with tempfile.TemporaryDirectory() as wd:
        print(P.report(name, args[name], wd))
        text = open(os.path.join(wd, f"{name}.ptx")).read()
        lines = len(text.splitlines())
        counts = {k: len(re.findall(v, text)) for k, v in pat.items()}
        print(name, "lines", lines, counts, flush=True)
