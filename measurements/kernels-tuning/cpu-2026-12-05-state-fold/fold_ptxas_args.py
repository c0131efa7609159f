"""Example arguments of the recompute and state kernels for main's signature and the variants': state2 takes
W and qg as one buffer; fold also takes U apart from v and Aqk in recompute."""
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
    if params[2] == "o_rows":  # fold: wq, u, o, kg, decay, ...
        return (wq, torch.empty_like(st[1]), st[1], st[2], *st[5:])
    return (wq, st[1], st[2], st[4], *st[5:])  # state2: wq, v, kg, aqk, decay, ...


def recompute_args(mod):
    rc = list(ptxas.example_args()["recompute"])  # q k v gcum beta rn rn spans count lanes tinv w kg qg ...
    params = list(inspect.signature(mod._FNS["recompute"]).parameters)
    if "aqk_rows" not in params:
        return tuple(rc)
    return (*rc[:3], torch.empty_like(rc[2]), *rc[3:11], torch.empty_like(rc[10]), *rc[11:])
