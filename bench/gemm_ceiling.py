"""How fast one CPU thread multiplies the float32 matrices of a TD3 gradient step, and what share of the step they take.

For TD3's networks (batches of 256, layers (400, 300)) on HalfCheetah-v5 (17 observations, 6 actions) and Pendulum-v1
(3 and 1), lists every matrix product of one environment step's training: the critics' step (the target actor and
critics, both critics forward, their weight and hidden-input gradients) and half an actor step (the actor and the first
critic forward, the critic's input gradients through its frozen weights, the actor's gradients). Stable-Baselines3's
actor step also takes the critic's weight gradients; its FLOPs are counted with them. Each product is timed with the
layout autograd gives it (`x @ W.T + b`, `g.T @ x`, `g @ W`) three ways: torch's default float32 kernels (MKL's
sgemm), oneDNN's float32 kernels (`torch.ops.mkldnn._linear_pointwise`, float32 in and out), and under
`torch.set_float32_matmul_precision('medium')`, whose result is compared bit for bit with oneDNN's float32 one and
against a product of the inputs rounded to bfloat16 (what bfloat16 products would give). Then our TD3 step on
Pendulum-v1 (the `--speed` bench's settings) is timed and profiled with `torch.profiler`: the share of its CPU time in
the matrix-product operators, and the operators that take the rest. Torch runs on one thread throughout.

    python bench/gemm_ceiling.py                 # products, FLOPs, the step and its profile (about a minute)
    python bench/gemm_ceiling.py --precision medium   # the step and its profile under matmul_precision='medium'
    python bench/gemm_ceiling.py --kernels onednn     # the step and its profile with the layers' products on oneDNN (`OneDNNLinear`)
"""
import argparse, time
import torch

torch.set_num_threads(1)
BS, HIDDEN = 256, (400, 300)
ENVS = {'HalfCheetah-v5': (17, 6), 'Pendulum-v1': (3, 1)}

def layers(sizes): return list(zip(sizes[:-1], sizes[1:]))

def td3_products(obs:int, act:int, hidden=HIDDEN, bs=BS, sb3=False) -> list:
    "Each product of one environment step's training as (what, kind, rows, inner, cols, times per environment step)"
    critic, actor = layers((obs + act, *hidden, 1)), layers((obs, *hidden, act))
    out = []
    def fwd(net, name, times):
        for i, (a, b) in enumerate(net): out.append((f'{name} forward {a}->{b}', 'fwd', bs, a, b, times))
    def wgrad(net, name, times):
        for i, (a, b) in enumerate(net): out.append((f'{name} weight grad {a}->{b}', 'wgrad', b, bs, a, times))
    def xgrad(net, name, times, first=False):
        for i, (a, b) in enumerate(net):
            if i or first: out.append((f'{name} input grad {a}->{b}', 'xgrad', bs, b, a, times))
    fwd(actor, 'target actor', 1); fwd(critic, 'target critics', 2); fwd(critic, 'critics', 2)
    wgrad(critic, 'critics', 2); xgrad(critic, 'critics', 2)
    fwd(actor, 'actor', .5); fwd(critic, 'first critic', .5); xgrad(critic, 'first critic', .5, first=True)
    if sb3: wgrad(critic, 'first critic (SB3)', .5)
    wgrad(actor, 'actor', .5); xgrad(actor, 'actor', .5)
    return out

def flops(products) -> float: return sum(2 * m * k * n * t for _, _, m, k, n, t in products)

def timed(f, n=40, rounds=7) -> float:
    "Seconds a call of `f`, the best of `rounds` means over `n` calls"
    for _ in range(5): f()
    best = float('inf')
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n): f()
        best = min(best, (time.perf_counter() - t) / n)
    return best

def product_fns(kind, m, k, n):
    "The product as autograd computes it with torch's kernels, and the same product through oneDNN's float32 kernels"
    lp = torch.ops.mkldnn._linear_pointwise
    if kind == 'fwd':  # x (m, k) @ W.T, W (n, k), plus the bias
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        return (lambda: torch.addmm(b, x, w.t())), (lambda: lp(x, w, b, 'none', [], ''))
    if kind == 'wgrad':  # g.T (m, k) @ x (k, n): g (k, m) the output's gradient, x (k, n) the input
        g, x = torch.randn(k, m), torch.randn(k, n)
        return (lambda: torch.mm(g.t(), x)), (lambda: lp(g.t(), x.t(), None, 'none', [], ''))
    g, w = torch.randn(m, k), torch.randn(k, n)  # xgrad: g (m, k) @ W (k, n)
    return (lambda: torch.mm(g, w)), (lambda: lp(g, w.t(), None, 'none', [], ''))

def precision_check():
    "How far 'medium' matmuls are from float64, from oneDNN's float32 product and from bfloat16-rounded inputs' product"
    torch.manual_seed(0)
    a, b = torch.randn(256, 400), torch.randn(300, 400)
    ref, bf = a.double() @ b.double().t(), a.bfloat16().double() @ b.bfloat16().double().t()
    f32, dnn = a @ b.t(), torch.ops.mkldnn._linear_pointwise(a, b, None, 'none', [], '')
    torch.set_float32_matmul_precision('medium')
    med = a @ b.t()
    torch.set_float32_matmul_precision('highest')
    err = lambda c: (c.double() - ref).abs().max().item()
    print(f"256x400 @ 400x300 of standard normals, largest error against float64: torch float32 {err(f32):.1e}, oneDNN float32 {err(dnn):.1e}, "
          f"'medium' {err(med):.1e}, bfloat16-rounded inputs {(bf - ref).abs().max().item():.1e}; "
          f"'medium' equals oneDNN's float32 product bit for bit: {torch.equal(med, dnn)}")

def products_table():
    for env, (obs, act) in ENVS.items():
        ps, sb = td3_products(obs, act), td3_products(obs, act, sb3=True)
        print(f'\n{env} (obs {obs}, act {act}): {flops(ps) / 1e6:.0f} MFLOP a TD3 environment step (SB3: {flops(sb) / 1e6:.0f})')
        rows, tot = [], {'mkl': 0., 'onednn': 0., 'medium': 0.}
        for name, kind, m, k, n, t in ps:
            f_mkl, f_dnn = product_fns(kind, m, k, n)
            a, b = timed(f_mkl), timed(f_dnn)
            torch.set_float32_matmul_precision('medium'); c = timed(f_mkl); torch.set_float32_matmul_precision('highest')
            for key, s in zip(tot, (a, b, c)): tot[key] += s * t
            gf = lambda s: 2 * m * k * n / s / 1e9
            print(f'  {name:36} {m:4}x{k:<4}@{k:4}x{n:<4} x{t:<3} torch {a * 1e3:6.3f} ms {gf(a):5.0f} GFLOPS | oneDNN {b * 1e3:6.3f} ms {gf(b):5.0f} | medium {c * 1e3:6.3f} ms {gf(c):5.0f}')
        print(f"  products of one environment step: torch float32 {tot['mkl'] * 1e3:.2f} ms ({flops(ps) / tot['mkl'] / 1e9:.0f} GFLOPS), "
              f"oneDNN float32 {tot['onednn'] * 1e3:.2f} ms ({flops(ps) / tot['onednn'] / 1e9:.0f}), 'medium' {tot['medium'] * 1e3:.2f} ms ({flops(ps) / tot['medium'] / 1e9:.0f}); "
              f"SB3's products at torch's rate {flops(sb) / flops(ps) * tot['mkl'] * 1e3:.2f} ms")

GEMM_OPS = ('aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm', 'aten::matmul', 'mkldnn::_linear_pointwise')  # their self time is the kernels'

def step_profile(precision='highest', kernels='torch', n=300):
    "CPU ms of our TD3 step on Pendulum-v1 (the --speed bench's settings) with the layers' products on `kernels`, and its profile"
    import sys, pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from continuous_bench import settings
    from fastrl_replay.agents.td3 import td3_learner
    from torch.profiler import profile, ProfilerActivity
    d = settings('td3', 'Pendulum-v1', 10 * n)
    d['replay'] = d['replay'] | dict(warmup_sz=100)
    d['net'] = d.get('net', {}) | dict(matmul_precision=precision, kernels=kernels)
    learn = td3_learner('Pendulum-v1', steps_per_epoch=n, seed=0, **d)
    with learn.no_bar(), learn.no_logging():
        learn.fit(1)
        c = time.process_time(); learn.fit(1); ms = 1000 * (time.process_time() - c) / n
        with profile(activities=[ProfilerActivity.CPU]) as prof: learn.fit(1)
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    gemm = sum(e.self_cpu_time_total for e in ev if e.key in GEMM_OPS)
    print(f"\nOur TD3 step on Pendulum-v1, kernels='{kernels}', matmul_precision='{precision}': {ms:.2f} CPU ms an environment step; in the profiler "
          f"{total / n / 1000:.2f} ms, of which the matrix products {gemm / n / 1000:.2f} ms ({100 * gemm / total:.0f}%)")
    for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:14]:
        print(f'  {e.key:42} {e.self_cpu_time_total / n / 1000:6.3f} ms a step ({100 * e.self_cpu_time_total / total:4.1f}%), {e.count / n:5.1f} calls')

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--precision', choices=['highest', 'medium'], help='only the step and its profile, under this matmul_precision')
    p.add_argument('--kernels', choices=['torch', 'onednn'], help="only the step and its profile, the layers' products on these kernels")
    a = p.parse_args()
    if a.precision or a.kernels: step_profile(a.precision or 'highest', a.kernels or 'torch')
    else:
        precision_check()
        products_table()
        step_profile('highest')
