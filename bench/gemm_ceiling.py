"""How fast one CPU thread multiplies the float32 matrices of a TD3 gradient step, and what share of the step they take.

For TD3's networks (batches of 256, layers (400, 300)) on HalfCheetah-v5 (17 observations, 6 actions) and Pendulum-v1
(3 and 1), lists every matrix product of one environment step's training: the critics' step (the target actor and
critics, both critics forward, their weight and hidden-input gradients) and half an actor step (the actor and the first
critic forward, the critic's input gradients through its frozen weights, the actor's gradients). Stable-Baselines3's
actor step also takes the critic's weight gradients; its FLOPs are counted with them. Each product is timed with the
layout autograd gives it (`x @ W.T + b`, `g.T @ x`, `g @ W`) two ways: torch's default float32 kernels (its BLAS's
sgemm) and under `torch.set_float32_matmul_precision('medium')`, whose result is compared with float64's, with the
float32 product and with a product of the inputs rounded to bfloat16 (what bfloat16 products would give). Then our TD3
step on Pendulum-v1 (the `--speed` bench's settings) is timed and profiled with `torch.profiler`: the share of its CPU
time in the matrix-product operators, and the operators that take the rest. Torch runs on one thread throughout.

    python bench/gemm_ceiling.py                 # products, FLOPs, the step and its profile (about a minute)
    python bench/gemm_ceiling.py --precision medium   # the step and its profile under matmul_precision='medium'
"""
import argparse, json, time
from machine import machine_record  # first: the load average as the run starts
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

def product_fn(kind, m, k, n):
    "The product as autograd computes it"
    if kind == 'fwd':  # x (m, k) @ W.T, W (n, k), plus the bias
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        return lambda: torch.addmm(b, x, w.t())
    if kind == 'wgrad':  # g.T (m, k) @ x (k, n): g (k, m) the output's gradient, x (k, n) the input
        g, x = torch.randn(k, m), torch.randn(k, n)
        return lambda: torch.mm(g.t(), x)
    g, w = torch.randn(m, k), torch.randn(k, n)  # xgrad: g (m, k) @ W (k, n)
    return lambda: torch.mm(g, w)

def precision_check():
    "How far 'medium' matmuls are from float64, from the float32 product and from bfloat16-rounded inputs' product"
    torch.manual_seed(0)
    a, b = torch.randn(256, 400), torch.randn(300, 400)
    ref, bf = a.double() @ b.double().t(), a.bfloat16().double() @ b.bfloat16().double().t()
    f32 = a @ b.t()
    torch.set_float32_matmul_precision('medium')
    med = a @ b.t()
    torch.set_float32_matmul_precision('highest')
    err = lambda c: (c.double() - ref).abs().max().item()
    print(f"256x400 @ 400x300 of standard normals, largest error against float64: float32 {err(f32):.1e}, "
          f"'medium' {err(med):.1e}, bfloat16-rounded inputs {(bf - ref).abs().max().item():.1e}; "
          f"'medium' equals the float32 product bit for bit: {torch.equal(med, f32)}")

def products_table():
    for env, (obs, act) in ENVS.items():
        ps, sb = td3_products(obs, act), td3_products(obs, act, sb3=True)
        print(f'\n{env} (obs {obs}, act {act}): {flops(ps) / 1e6:.0f} MFLOP a TD3 environment step '
              f'(SB3: {flops(sb) / 1e6:.0f})')
        tot = {'float32': 0., 'medium': 0.}
        for name, kind, m, k, n, t in ps:
            f = product_fn(kind, m, k, n)
            a = timed(f)
            torch.set_float32_matmul_precision('medium'); c = timed(f); torch.set_float32_matmul_precision('highest')
            for key, s in zip(tot, (a, c)): tot[key] += s * t
            gf = lambda s: 2 * m * k * n / s / 1e9
            print(f'  {name:36} {m:4}x{k:<4}@{k:4}x{n:<4} x{t:<3} float32 {a * 1e3:6.3f} ms {gf(a):5.0f} GFLOPS '
                  f'| medium {c * 1e3:6.3f} ms {gf(c):5.0f}')
        rate = lambda key: f"{tot[key] * 1e3:.2f} ms ({flops(ps) / tot[key] / 1e9:.0f} GFLOPS)"
        print(f"  products of one environment step: float32 {rate('float32')}, 'medium' {rate('medium')}; "
              f"SB3's products at the float32 rate {flops(sb) / flops(ps) * tot['float32'] * 1e3:.2f} ms")

GEMM_OPS = ('aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm', 'aten::matmul')  # their self time is the kernels'

def step_profile(precision='highest', n=300):
    "CPU ms of our TD3 step on Pendulum-v1 (the --speed bench's settings) under `precision`, and its profile"
    from continuous_bench import settings
    from fastrl_replay.agents.td3 import td3_learner
    from torch.profiler import profile, ProfilerActivity
    d = settings('td3', 'Pendulum-v1', 10 * n)
    d['replay'] = d['replay'] | dict(warmup_sz=100)
    d['net'] = d.get('net', {}) | dict(matmul_precision=precision)
    learn = td3_learner('Pendulum-v1', steps_per_epoch=n, seed=0, valid=dict(n_episodes=0), **d)  # training steps alone
    with learn.no_bar(), learn.no_logging():
        learn.fit(1)
        c = time.process_time(); learn.fit(1); ms = 1000 * (time.process_time() - c) / n
        with profile(activities=[ProfilerActivity.CPU]) as prof: learn.fit(1)
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    gemm = sum(e.self_cpu_time_total for e in ev if e.key in GEMM_OPS)
    print(f"\nOur TD3 step on Pendulum-v1, matmul_precision='{precision}': {ms:.2f} CPU ms an environment step; in the "
          f"profiler {total / n / 1000:.2f} ms, of which the matrix products {gemm / n / 1000:.2f} ms "
          f"({100 * gemm / total:.0f}%)")
    for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:14]:
        t = e.self_cpu_time_total
        print(f'  {e.key:42} {t / n / 1000:6.3f} ms a step ({100 * t / total:4.1f}%), {e.count / n:5.1f} calls')

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--precision', choices=['highest', 'medium'], help='only the step and its profile, under this matmul_precision')
    a = p.parse_args()
    if a.precision: step_profile(a.precision)
    else:
        precision_check()
        products_table()
        step_profile('highest')
    print('machine:', json.dumps(machine_record()))
