"""chunk_kda at one case, warmed, then NVTX-free: N calls for ncu to catch (ncu -k filters the kernels)."""
import sys
import kda_stubs  # noqa
import torch
from kdakit.kernels import prefill
from kdakit.kernels.tools import profile
batch, tokens = (int(x) for x in sys.argv[1].split("x"))
heads = int(sys.argv[2])
inputs = profile._inputs(batch, tokens, heads)
call = profile._arm_call(prefill.chunk_kda, inputs)
for _ in range(3):
    call()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
call()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("done", flush=True)
