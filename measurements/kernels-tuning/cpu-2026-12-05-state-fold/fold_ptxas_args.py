"""Example arguments of the recompute and state kernels for main's signature and the variants': state2 takes
W and qg as one buffer; fold also takes U apart from v and Aqk in recompute; foldc takes U, [W; Q'] and kg
as chunk-major blocks (foldt: the state pass takes them as [chunks, HV, rows, columns])."""
import inspect
import torch
from kdakit.kernels.tools import ptxas


def state_args(mod):
    st = list(ptxas.example_args()["state"])  # w v kg qg aqk decay pool ...
    params = list(inspect.signature(mod._FNS["state"]).parameters)
    rows, K = st[0].shape
    if params[0] == "w_rows":
        return tuple(st)
    wq = torch.empty(2 * rows, K, dtype=torch.bfloat16)
    if params[0] == "wq_blocks":  # foldt: [M, HV, rows, columns] blocks; o token-major
        M, HV, V = 3, 16, st[1].shape[1] // 16
        e = torch.empty
        return (e(M, HV, 128, K, dtype=torch.bfloat16), e(M, HV, 64, V, dtype=st[1].dtype), st[1],
                e(M, HV, 64, K, dtype=torch.bfloat16), *st[5:])
    if params[1] == "u_chunks":  # foldc: chunk-major wq, u, kg; o token-major
        M = 3
        e = torch.empty
        return (e(M * 16 * 128, K, dtype=torch.bfloat16), e(M * 16 * 64, st[1].shape[1] // 16, dtype=st[1].dtype),
                st[1], e(M * 16 * 64, K, dtype=torch.bfloat16), *st[5:])
    if params[2] == "o_rows":  # fold: wq, u, o, kg, decay, ...
        return (wq, torch.empty_like(st[1]), st[1], st[2], *st[5:])
    return (wq, st[1], st[2], st[4], *st[5:])  # state2: wq, v, kg, aqk, decay, ...


def recompute_args(mod):
    rc = list(ptxas.example_args()["recompute"])  # q k v gcum beta rn rn spans count lanes tinv w kg qg ...
    params = list(inspect.signature(mod._FNS["recompute"]).parameters)
    if "aqk_rows" not in params:
        return tuple(rc)
    if "u_chunks" in params:  # q k v gcum beta rn rn spans count lanes tinv aqk u wq kg decay ...
        M, K, bf = 3, rc[11].shape[1], torch.bfloat16
        V = rc[2].shape[1] // 16
        e = torch.empty
        return (*rc[:11], torch.empty_like(rc[10]), e(M * 16 * 64, V, dtype=rc[2].dtype),
                e(M * 16 * 128, K, dtype=bf), e(M * 16 * 64, K, dtype=bf), *rc[14:])
    return (*rc[:3], torch.empty_like(rc[2]), *rc[3:11], torch.empty_like(rc[10]), *rc[11:])
