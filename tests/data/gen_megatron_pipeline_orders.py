"""Generate expected pipeline op orders by running Megatron-LM's own schedule functions.

Megatron-LM commit given on the command line; schedules.py read from the fetched mirror. The two pure
functions get_pp_rank_microbatches and get_schedule_table are extracted (ast) and executed as is; the
op order is rebuilt exactly as forward_backward_pipelining_with_interleaving walks them: warm-up forwards
k < W, steady (forward k+W, backward k), cool-down backwards; chunk of backward k = v-1-chunk_table[k];
its microbatch = FIFO over that chunk's forwards. Non-interleaved: W = pp-rank-1 clipped to m.
"""
import ast, json, sys, types
src = open('/tmp/meg/schedules.py').read()
tree = ast.parse(src)
from typing import Optional
ns = {'Optional': Optional, 'P2PCommunicator': object, 'parallel_state': None}
for node in tree.body:
    if isinstance(node, ast.FunctionDef) and node.name in ('get_pp_rank_microbatches', 'get_schedule_table'):
        mod = ast.Module(body=[node], type_ignores=[])
        exec(compile(mod, 'schedules.py', 'exec'), ns)

class G:
    def __init__(s, n, r): s.n, s.r = n, r
    def size(s): return s.n
    def rank(s): return s.r

def order(pp, rank, m, v, N):
    comm = types.SimpleNamespace(pp_group=G(pp, rank), virtual_pipeline_model_parallel_size=(v if v > 1 else None))
    total, _, W, rem = ns['get_pp_rank_microbatches'](m, v, N, p2p_communicator=comm)
    if v == 1:
        W = min(pp - rank - 1, m); rem = m - W  # forward_backward_pipelining_without_interleaving
        return [('F', k, 0) for k in range(W)] + [x for k in range(rem) for x in (('F', k + W, 0), ('B', k, 0))] + [('B', k, 0) for k in range(rem, m)]
    table = ns['get_schedule_table'](m, v, N)
    mb, ch = zip(*table)
    fifo = {c: 0 for c in range(v)}
    def F(k): return ('F', mb[k], ch[k])
    def B(k):
        c = v - 1 - ch[k]; j = fifo[c]; fifo[c] += 1
        return ('B', j, c)
    ops = [F(k) for k in range(W)]
    for k in range(rem):
        ops.append(F(k + W)); ops.append(B(k))
    for k in range(rem, total):
        ops.append(B(k))
    return ops

cases = [(2, 1, 4, None), (4, 1, 6, None), (4, 1, 2, None), (2, 2, 4, None), (4, 2, 8, None), (4, 3, 8, None),
         (3, 2, 6, None), (2, 2, 5, 3), (4, 2, 12, 4), (4, 4, 4, None), (8, 2, 16, None), (4, 2, 10, 5), (4, 2, 9, 5)]
out = {'megatron_commit': sys.argv[1], 'cases': []}
for pp, v, m, N in cases:
    n = pp if N is None else N
    out['cases'].append({'pp': pp, 'vp': v, 'm': m, 'group': n,
                         'orders': [[list(o) for o in order(pp, r, m, v, n)] for r in range(pp)]})
json.dump(out, open('/tmp/meg/orders.json', 'w'))
print(json.dumps(out['cases'][7])[:600])
