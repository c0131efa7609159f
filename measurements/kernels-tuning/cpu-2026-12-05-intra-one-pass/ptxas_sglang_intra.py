"""Registers of SGLang's Helion intra kernel (sm_90a, CPU compile) beside kdakit's, same method as
kdakit.kernels.tools.ptxas."""
import importlib.util, inspect, os, subprocess, sys, tempfile
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kdakit.kernels.tools import ptxas as kp
from sglang.kernels.ops.attention.helion import kda_prefill as up

def compile_report(kernel, fn, args, config, workdir, name):
    code = kernel.bind(args).to_triton_code(config)
    path = os.path.join(workdir, f"{name}.py"); open(path, "w").write(code)
    spec = importlib.util.spec_from_file_location(f"up_{name}", path); module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    jit = next(v for k, v in vars(module).items() if k.startswith("_helion_") and hasattr(v, "arg_names"))
    params = list(inspect.signature(fn).parameters)
    tensors = {p: a for p, a in zip(params, args) if isinstance(a, torch.Tensor)}
    print(jit.arg_names)
    extra = {"q_rows": q.view(-1, K), "k_rows": k.view(-1, K), "g_rows": g.view(-1, K), "beta_rows": beta.view(-1),
             "aqk_rows": e(B * T * H, 64, dtype=torch.bfloat16), "akk_rows": e(B * T * H, 64)}
    tensors.update({n: t for n, t in extra.items() if n in jit.arg_names})
    floats = {p for p, a in zip(params, args) if isinstance(a, float)}
    signature = {a: kp._PTR[tensors[a].dtype] if a in tensors else ("fp32" if a in floats else "i32") for a in jit.arg_names}
    constants, attrs = kp._launch_specialization(jit.arg_names, tensors, dict(zip(params, args)))
    constants.update(kp._host_constexprs(jit, code))
    for a in constants: signature[a] = "constexpr"
    warps, stages = config.config.get("num_warps", 4), config.config.get("num_stages", 1)
    compiled = triton.compile(ASTSource(jit, signature, constants, attrs), target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    ptx = os.path.join(workdir, f"{name}.ptx"); open(ptx, "w").write(compiled.asm["ptx"])
    exe = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    out = subprocess.run([exe, "-arch=sm_90a", "-v", ptx, "-o", os.devnull], capture_output=True, text=True)
    usage = " ".join(l.split("info    :")[-1].strip() for l in out.stderr.splitlines() if "registers" in l or "spill" in l)
    return f"{name}: warps={warps} stages={stages} smem={compiled.metadata.shared} | {usage} | ptx lines {compiled.asm['ptx'].count(chr(10))}"

B, T, H, K = 1, 130, 16, 128
e = torch.empty
q = e(B, T, H, K, dtype=torch.bfloat16); k = e(B, T, H, K, dtype=torch.bfloat16)
g = e(B, T, H, K); beta = e(B, T, H, dtype=torch.bfloat16)
cu = torch.zeros(2, dtype=torch.int32); ci = torch.zeros(3, 2, dtype=torch.int64)
with tempfile.TemporaryDirectory() as wd:
    for varlen in (False, True):
        args = (q, k, g, beta, cu, ci, 0.088, varlen)
        print(compile_report(up._intra_matrices_wide, up._intra_matrices_wide.fn, args, up._INTRA_MATRIX_CONFIG, wd, f"upstream_intra_varlen{int(varlen)}"))
