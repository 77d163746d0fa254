"""Our SAC and TD3 against Stable-Baselines3's, with rl-baselines3-zoo's hyperparameters, on the same machine in the same run.

Both libraries get the settings of `sac_defaults(env)` / `td3_defaults(env)` (rl-baselines3-zoo's): Pendulum-v1 SAC at
Adam 1e-3, batches of 256, 100 random warm-up steps, tau 0.005, gamma 0.99, one gradient step per environment step,
two layers of 256, the entropy coefficient tuned from 1; Pendulum-v1 TD3 at gamma 0.98, 10,000 random warm-up steps,
Gaussian exploration noise 0.1, layers (400, 300); MuJoCo SAC with 10,000 random warm-up steps and SB3's defaults
otherwise. Both compute their layers' products with torch's float32 kernels (`nn.Linear`'s). The replay capacity is
the zoo's, cut to the run's steps (a larger memory never fills). Each run sets torch to one thread
(`torch.set_num_threads(1)`) for both libraries and reports the environment steps per second of its
training (wall clock and process CPU time) and the mean return of 10 greedy episodes after training. Runs are
interleaved seed by seed (ours, then SB3's) so that the load of a shared machine falls on both alike; each finished
run is appended to a JSON-lines file at once, so a run cut short keeps what it measured.

    python bench/continuous_bench.py --suite pendulum --seeds 0 1 2 3 4                 # SAC and TD3, 20,000 steps
    python bench/continuous_bench.py --suite mujoco --seeds 0 1 2 --steps 20000         # SAC on HalfCheetah-v5, Hopper-v5
    python bench/continuous_bench.py --suite mujoco_td3 --seeds 0 1 2 --steps 20000     # TD3 on them
    python bench/continuous_bench.py --suite mujoco_td3 --envs Hopper-v5 --libs ours --seeds 3   # one environment, one library, one seed
    python bench/continuous_bench.py --suite variants --seeds 0 1 2 --steps 20000       # PER and 3-step on Hopper-v5
    python bench/continuous_bench.py --speed sac --steps 500 --out speed.jsonl           # CPU ms per step, both libraries
    python bench/continuous_bench.py --speed td3 --quick                                  # the same on 300 steps
    python bench/continuous_bench.py --speed td3 --steps 500 --matmul-precision medium  # ours under 'medium' precision
    python bench/continuous_bench.py --stored bench/stored/13_continuous_vs_sb3.json    # the section of the benchmarks page

`--stored` compares the libraries' greedy returns per environment with Welch's t-test and a Mann-Whitney U test, and
their speeds by the ratio of medians, from the runs in the results file; nothing in it is typed in by hand. Every run's
line holds the machine it ran on (`bench/machine.py`); the stored result lists each different one.
"""
import argparse, json, os, resource, statistics, time
from pathlib import Path
from machine import machine_record, records  # first: the load average as the run starts
import numpy as np, torch, gymnasium as gym
from fastrl_replay.data.gym import play_episodes

OUT = Path(__file__).resolve().parent/'results'/'continuous_bench.jsonl'
PEERS = ('stable-baselines3', 'gymnasium', 'mujoco', 'scipy')  # the distributions whose versions each run records

def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def greedy_return(act, env_id, seed, n=10) -> list:
    "Returns of `n` greedy episodes, `act` mapping an observation to an action"
    return play_episodes(act, env_id, n, seed)

def settings(algo, env, steps):
    "The zoo's settings for `algo` on `env` as `sac_defaults`/`td3_defaults` give them, the memory cut to `steps`"
    from fastrl_replay.agents.sac import sac_defaults
    from fastrl_replay.agents.td3 import td3_defaults
    d = (sac_defaults if algo == 'sac' else td3_defaults)(env)
    d.pop('steps')
    rep = dict(bs=256, max_sz=1_000_000, warmup_sz=100) | d.get('replay', {})
    rep['max_sz'] = min(rep['max_sz'], steps)
    d['replay'] = rep
    return d

def run_ours(algo, env, seed, steps, variant='uniform', matmul_precision='highest'):
    from fastrl_replay.agents.sac import sac_learner
    from fastrl_replay.agents.td3 import td3_learner
    d = settings(algo, env, steps)
    if variant == 'per': d['replay'] = d['replay'] | dict(kind='per')
    if variant == 'nstep3': d['n_steps'] = 3
    d['net'] = d.get('net', {}) | dict(matmul_precision=matmul_precision)
    learn = (sac_learner if algo == 'sac' else td3_learner)(env, steps_per_epoch=steps // 10, seed=seed, **d,
                                                            valid=dict(n_episodes=0))  # SB3 plays none in its fit
    torch.set_num_threads(1)
    t, c = time.perf_counter(), cpu_s()
    with learn.no_bar(), learn.no_logging(): learn.fit(10)  # a constant learning rate, as SB3's
    wall, cpu = time.perf_counter() - t, cpu_s() - c
    m = learn.model
    def act(obs):
        with torch.inference_mode(): return m.scale.to_env(m.actor(torch.as_tensor(np.asarray(obs, np.float32))[None])).reshape(m.scale.shape).numpy()
    return learn.dls.train.dataset.stats().env_steps, wall, cpu, greedy_return(act, env, 10_000 + seed)

def run_sb3(algo, env, seed, steps, variant='uniform', matmul_precision='highest'):
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise
    assert variant == 'uniform', 'SB3 runs are uniform replay only'
    assert matmul_precision == 'highest', 'SB3 runs in float32 only'
    d = settings(algo, env, steps)
    rep, opt, net = d['replay'], d.get('optim', {}), d.get('net', {})
    kw = dict(learning_rate=opt.get('lr', 3e-4 if algo == 'sac' else 1e-3), buffer_size=rep['max_sz'], learning_starts=rep['warmup_sz'],
              batch_size=rep['bs'], tau=net.get('tau', 0.005), gamma=d.get('gamma', 0.99), train_freq=opt.get('train_every', 1),
              gradient_steps=opt.get('grad_steps', 1), seed=seed, device='cpu', verbose=0,
              policy_kwargs=dict(net_arch=list(net.get('hidden', (256, 256) if algo == 'sac' else (400, 300)))))
    if algo == 'sac':
        ent = d.get('entropy', {}).get('coef', 'auto')
        M, kw = SAC, kw | dict(ent_coef=ent if ent != 'auto' else 'auto')
    else:
        n = int(np.prod(gym.make(env).action_space.shape))
        M, kw = TD3, kw | dict(action_noise=NormalActionNoise(np.zeros(n), d.get('explore', {}).get('noise', 0.1) * np.ones(n)))
    model = M('MlpPolicy', env, **kw)
    torch.set_num_threads(1)
    t, c = time.perf_counter(), cpu_s()
    model.learn(steps)
    wall, cpu = time.perf_counter() - t, cpu_s() - c
    return model.num_timesteps, wall, cpu, greedy_return(lambda o: model.predict(o, deterministic=True)[0], env, 10_000 + seed)

def speed(algo, n, out, matmul_precision='highest'):
    "CPU milliseconds per environment step (one gradient step each) of both libraries on Pendulum-v1 with the zoo's settings, after a first fit of `n` steps that warms up; ours with `matmul_precision` (SB3's always in float32)"
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise
    from fastrl_replay.agents.sac import sac_learner
    from fastrl_replay.agents.td3 import td3_learner
    torch.set_num_threads(1)
    d = settings(algo, 'Pendulum-v1', 10 * n)
    d['replay'] = d['replay'] | dict(warmup_sz=100)  # training from the start for both
    d['net'] = d.get('net', {}) | dict(matmul_precision=matmul_precision)  # ours only
    learn = (sac_learner if algo == 'sac' else td3_learner)('Pendulum-v1', steps_per_epoch=n, seed=0, **d,
                                                            valid=dict(n_episodes=0))  # training steps alone
    with learn.no_bar(), learn.no_logging():
        learn.fit(1)
        c = time.process_time(); learn.fit(1); ours = time.process_time() - c
    rep, net = d['replay'], d.get('net', {})
    kw = dict(learning_rate=d.get('optim', {}).get('lr', 1e-3), buffer_size=rep['max_sz'], learning_starts=100,
              batch_size=rep['bs'], tau=net.get('tau', 0.005), gamma=d.get('gamma', 0.99), train_freq=1,
              gradient_steps=1, seed=0, device='cpu',
              policy_kwargs=dict(net_arch=[256, 256] if algo == 'sac' else [400, 300]))
    if algo == 'td3':  # ours explores with Gaussian noise on its actions: SB3's TD3 too
        kw['action_noise'] = NormalActionNoise(np.zeros(1), d.get('explore', {}).get('noise', 0.1) * np.ones(1))
    m = (SAC if algo == 'sac' else TD3)('MlpPolicy', 'Pendulum-v1', **kw)
    m.learn(n)
    c = time.process_time(); m.learn(n, reset_num_timesteps=False); sb3 = time.process_time() - c
    rec = dict(kind='speed', algo=algo, env='Pendulum-v1', steps=n, ours_cpu_ms_per_step=round(1000 * ours / n, 2),
               sb3_cpu_ms_per_step=round(1000 * sb3 / n, 2), ratio=round(sb3 / ours, 3),
               torch_threads=torch.get_num_threads(), matmul_precision=matmul_precision,
               date=time.strftime('%Y-%m-%d %H:%M'))
    rec['machine'] = machine_record(*PEERS)
    with open(out, 'a') as f: f.write(json.dumps(rec) + '\n')
    print(rec, flush=True)

SUITES = dict(pendulum=[('sac', 'Pendulum-v1', 'uniform'), ('td3', 'Pendulum-v1', 'uniform')],
              pendulum_sac=[('sac', 'Pendulum-v1', 'uniform')], pendulum_td3=[('td3', 'Pendulum-v1', 'uniform')],
              mujoco=[('sac', 'Hopper-v5', 'uniform'), ('sac', 'HalfCheetah-v5', 'uniform')],
              mujoco_td3=[('td3', 'Hopper-v5', 'uniform'), ('td3', 'HalfCheetah-v5', 'uniform')],
              variants=[('sac', 'Hopper-v5', 'per'), ('sac', 'Hopper-v5', 'nstep3')])

def measure(suite, seeds, steps, out, libs=('ours', 'sb3'), envs=None, matmul_precision='highest'):
    out.parent.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for algo, env, variant in (r for r in SUITES[suite] if envs is None or r[1] in envs):
            for lib in (l for l in libs if variant == 'uniform' or l == 'ours'):
                prec = matmul_precision if lib == 'ours' else 'highest'  # SB3 always in float32
                n, wall, cpu, rets = (run_ours if lib == 'ours' else run_sb3)(algo, env, seed, steps, variant, prec)
                rec = dict(lib=lib, algo=algo, env=env, variant=variant, seed=seed, steps=n, wall_s=round(wall, 2), cpu_s=round(cpu, 2),
                           steps_per_s=round(n / wall, 1), steps_per_cpu_s=round(n / cpu, 1), greedy_mean=float(np.mean(rets)), greedy=rets,
                           torch_threads=torch.get_num_threads(), matmul_precision=prec,
                           date=time.strftime('%Y-%m-%d %H:%M'))
                rec['machine'] = machine_record(*PEERS)
                with open(out, 'a') as f: f.write(json.dumps(rec) + '\n')
                print(f"{lib:4} {algo} {env} {variant} {prec} seed {seed}: {n / wall:.0f} steps/s, "
                      f"greedy {np.mean(rets):.1f}", flush=True)

def config(r) -> str:
    "How a run of ours computed its products: '' in float32 on torch's kernels (and for SB3's), else how"
    if r.get('lib') == 'sb3': return ''
    prec, kern = r.get('matmul_precision', 'highest'), r.get('kernels', 'torch')  # `kernels`: older runs' records only
    return ', '.join(([] if kern == 'torch' else [f"kernels='{kern}'"]) +
                     ([] if prec == 'highest' else [f"matmul_precision='{prec}'"]))

def latest(recs) -> list:
    "A run repeated (same library, algorithm, environment, steps, replay, seed, products) counts once: its last record"
    key = lambda r: (r.get('kind'), r.get('lib'), r['algo'], r['env'], r['steps'], r.get('variant'), r.get('seed'),
                     config(r))
    return list({key(r): r for r in recs}.values())

def compare(recs):
    "Markdown: per (algo, env, steps) the per-seed returns and speeds of both libraries and the tests of their difference"
    from scipy import stats
    recs = latest(recs)
    lines, runs = [], [r for r in recs if r.get('kind') != 'speed']
    for r in sorted((r for r in recs if r.get('kind') == 'speed'), key=lambda r: (r['algo'], config(r) != '', config(r))):
        how = f' with {config(r)}' if config(r) else ' in float32'
        lines += [f"**Speed, {r['algo'].upper()} on {r['env']}, ours{how}** ({r['steps']:,} steps with a gradient step each, after as many to warm up; process CPU time, "
                  f"torch on {r['torch_threads']} thread; SB3 on torch's float32 kernels): ours {r['ours_cpu_ms_per_step']} ms a step, SB3 {r['sb3_cpu_ms_per_step']} ms, **{r['ratio']:.2f}x**.", '']
    recs = runs
    keys = sorted({(r['algo'], r['env'], r['steps']) for r in recs if r['variant'] == 'uniform'})
    for algo, env, steps in keys:
        rr = [r for r in recs if (r['algo'], r['env'], r['steps'], r['variant']) == (algo, env, steps, 'uniform')]
        label = lambda r: r['lib'] + (f', {config(r)}' if config(r) else '')
        labels = sorted({label(r) for r in rr}, key=lambda l: (l == 'sb3', l != 'ours', l))
        rs = {l: sorted([r for r in rr if label(r) == l], key=lambda r: r['seed']) for l in labels}
        if 'ours' not in rs or 'sb3' not in rs:
            lines += [f'**{algo.upper()} on {env}, {steps:,} environment steps: {", ".join(labels)} only so far.** ' + '; '.join(
                f"{l} seed {r['seed']}: greedy return {r['greedy_mean']:.1f}, {r['steps_per_s']:.1f} env steps/s, {r['steps_per_cpu_s']:.1f} per CPU s" for l in labels for r in rs[l]) + '.', '']
            continue
        lines += [f"**{algo.upper()} on {env}, {steps:,} environment steps** (ours in float32).", '',
                  '| library | seed | greedy return (10 episodes) | env steps/s | env steps per CPU s |', '|---|---:|---:|---:|---:|']
        for l in labels:
            for r in rs[l]: lines.append(f"| {l} | {r['seed']} | {r['greedy_mean']:.1f} | {r['steps_per_s']:.1f} | {r['steps_per_cpu_s']:.1f} |")
        ret = {l: [r['greedy_mean'] for r in v] for l, v in rs.items()}
        med = lambda l, k: statistics.median(r[k] for r in rs[l])
        def test(x, y):
            if len(x) < 2 or len(y) < 2: return ''
            t, u = stats.ttest_ind(x, y, equal_var=False), stats.mannwhitneyu(x, y, alternative='two-sided')
            return f'Welch t = {t.statistic:.2f}, p = {t.pvalue:.3f}; Mann-Whitney U = {u.statistic:.0f}, p = {u.pvalue:.3f}'
        a, b = ret['ours'], ret['sb3']
        lines += ['', f"Mean greedy return: ours {np.mean(a):.1f} ± {np.std(a):.1f} ({len(a)} seeds), SB3 {np.mean(b):.1f} ± {np.std(b):.1f} ({len(b)} seeds). "
                      f"{test(a, b)}. Median speed: ours {med('ours', 'steps_per_s'):.1f}, SB3 {med('sb3', 'steps_per_s'):.1f} environment steps/s, "
                      f"**{med('ours', 'steps_per_s') / med('sb3', 'steps_per_s'):.2f}x**; per CPU second {med('ours', 'steps_per_cpu_s'):.1f} against "
                      f"{med('sb3', 'steps_per_cpu_s'):.1f}, {med('ours', 'steps_per_cpu_s') / med('sb3', 'steps_per_cpu_s'):.2f}x."]
        for l in labels:
            if l in ('ours', 'sb3'): continue
            c = ret[l]
            speed = med(l, 'steps_per_s') / med('sb3', 'steps_per_s')
            lines += ['', f"Ours with {l[len('ours, '):]}: {np.mean(c):.1f} ± {np.std(c):.1f} ({len(c)} seeds); "
                          f"against SB3 {test(c, b)}; against ours in float32 {test(c, a)}. "
                          f"Median speed {med(l, 'steps_per_s'):.1f} environment steps/s, **{speed:.2f}x** SB3's; "
                          f"per CPU second {med(l, 'steps_per_cpu_s'):.1f}, {med(l, 'steps_per_cpu_s') / med('sb3', 'steps_per_cpu_s'):.2f}x."]
        lines.append('')
    var = [r for r in recs if r['variant'] != 'uniform']
    nominal = lambda r: round(r['steps'], -2)  # n-step folding runs a step or two past the budget (20,002 for 20,000)
    for env, steps, how in sorted({(r['env'], nominal(r), config(r)) for r in var}):
        lines += [f"**Replay variants, SAC on {env}, {steps:,} environment steps (ours{', ' + how if how else ''}).**", '',
                  '| replay | seeds | greedy returns | mean | against uniform (Welch) |', '|---|---:|---|---:|---|']
        rows = {v: sorted([r for r in recs if (r['lib'], r['algo'], r['env'], r['variant'], config(r)) == ('ours', 'sac', env, v, how) and nominal(r) == steps], key=lambda r: r['seed'])
                for v in ('uniform', 'per', 'nstep3')}
        base = [r['greedy_mean'] for r in rows['uniform']]
        for v, rr in rows.items():
            if not rr: continue
            rets = [r['greedy_mean'] for r in rr]
            test = ''
            if v != 'uniform' and len(rets) > 1 and len(base) > 1:
                t = stats.ttest_ind(rets, base, equal_var=False)
                test = f't = {t.statistic:.2f}, p = {t.pvalue:.3f}'
            lines.append(f"| {v} | {', '.join(str(r['seed']) for r in rr)} | {', '.join(f'{x:.1f}' for x in rets)} | {np.mean(rets):.1f} | {test} |")
        lines.append('')
    return '\n'.join(lines)

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--suite', choices=list(SUITES))
    p.add_argument('--speed', choices=['sac', 'td3'], help='time CPU milliseconds per step of both libraries on Pendulum-v1 instead')
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--libs', nargs='+', choices=['ours', 'sb3'], default=['ours', 'sb3'], help='the libraries to run (the replay variants run ours only)')
    p.add_argument('--envs', nargs='+', help="the suite's runs on these environments only (default: all of them)")
    p.add_argument('--steps', type=int, default=20_000)
    p.add_argument('--out', type=Path, default=OUT, help='JSON-lines file the runs are appended to')
    p.add_argument('--stored', type=Path, help='write the stored result (a section of the benchmarks page) from the runs in --out')
    p.add_argument('--note', default='', help='text added to the stored section')
    p.add_argument('--matmul-precision', choices=['highest', 'medium'], default='highest',
                   help="ours with this matmul_precision, in the suites' runs and --speed ('medium': bfloat16 products where oneDNN has them for float32 matrices, float32 on oneDNN elsewhere; SB3 always 'highest'); recorded in every row")
    p.add_argument('--quick', action='store_true', help='with --speed: 300 steps')
    a = p.parse_args()
    if a.quick and a.speed: a.steps = min(a.steps, 300)
    if a.stored:
        recs = [json.loads(l) for l in a.out.read_text().splitlines() if l.strip()]
        text = compare(recs) + ('\n' + a.note if a.note else '')
        command = '; '.join([
            'python bench/continuous_bench.py --suite pendulum_sac|pendulum_td3|mujoco|mujoco_td3|variants '
            '[--envs ...] [--libs ours|sb3] [--matmul-precision medium] --seeds ... --steps ...',
            'python bench/continuous_bench.py --speed sac|td3 --steps 500 [--matmul-precision medium]',
            'python bench/gemm_ceiling.py [--precision medium]',
            'python bench/continuous_bench.py --stored bench/stored/13_continuous_vs_sb3.json'])
        stored = dict(title='SAC and TD3 against Stable-Baselines3', date=time.strftime('%Y-%m-%d'),
                      machine=records(latest(recs)), conditions='shared with other jobs (the text says how)',
                      command=command, text=text)
        a.stored.write_text(json.dumps(stored, indent=1) + '\n')
    elif a.speed: speed(a.speed, a.steps, a.out, a.matmul_precision)
    else: measure(a.suite, a.seeds, a.steps, a.out, a.libs, a.envs, a.matmul_precision)
