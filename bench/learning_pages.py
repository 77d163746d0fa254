"""The learning results of pages 01, 02, 07 and 12 (DQN returns per replay and environment, replay against forgetting,
a DQN on Breakout): one run per invocation with its machine record, then the stored pages made from the runs.

Each run is one `fastrl-replay train` or `fastrl-replay forgetting` command (the `command` of its page), made in this
process by the functions the command calls, so that the run's machine record (`bench/machine.py`: CPU, vector
instruction sets, cores, versions, the load at the start and at the end) and its CPU time go with its figures into
`<runs>/<page>/<config>/seed<S>.json`. The one setting no command flag reaches, MountainCar-v0 with one-step returns,
is `run_train(..., learner=dict(n_steps=1))`. Page 02's CartPole-v1 rows are page 01's uniform runs (the same command).

    python bench/learning_pages.py run 01 uniform --seed 0 --runs /work/runs/pages   # one run
    python bench/learning_pages.py list                                               # the pages' configs
    python bench/learning_pages.py stored --runs /work/runs/pages --into bench/stored  # pages 01, 02, 07, 12
    python bench/atari_dqn_cpu.py /work/runs/pages/12/atari_dqn_cpu.json 13          # page 12's run
    python bench/learning_pages.py run 01 uniform --seed 0 --runs /tmp/lp --quick     # smoke: 2,000 steps
"""
import argparse, json, statistics, time
from pathlib import Path
from machine import machine_record, records  # first: the load average as the run starts

BENCH = Path(__file__).resolve().parent
PEERS = ('gymnasium',)
SOLVED = 475  # CartPole-v1's threshold
# page -> config -> (the command, with S for the seed; run_train's or run_forgetting's arguments)
CONFIGS = {
    '01': {r: (f'fastrl-replay train --seed S --replay {r}', dict(kind='train', env='CartPole-v1', replay=r))
           for r in ('uniform', 'per', 'laber')},
    '02': {'acrobot': ('fastrl-replay train --env Acrobot-v1 --seed S', dict(kind='train', env='Acrobot-v1')),
           'mountaincar': ('fastrl-replay train --env MountainCar-v0 --seed S',
                           dict(kind='train', env='MountainCar-v0')),
           'mountaincar_per': ('fastrl-replay train --env MountainCar-v0 --seed S --replay per',
                               dict(kind='train', env='MountainCar-v0', replay='per')),
           'mountaincar_1step': ("run_train('MountainCar-v0', seed=S, learner=dict(n_steps=1))",
                                 dict(kind='train', env='MountainCar-v0', learner=dict(n_steps=1)))},
    '07': {f'{a}_{m}': (f'fastrl-replay forgetting --seed S --agent {a} --memory {m}',
                        dict(kind='forgetting', agent=a, memory=m))
           for a, m in (('a2c', 'fifo'), ('dqn', 'reservoir'), ('dqn', 'balanced'))}}

# ---- running -----------------------------------------------------------------------------------------------------
def train_run(args: dict, seed: int, out: Path, quick: bool) -> dict:
    "A `fastrl-replay train` run: its metrics, without the per-epoch table"
    from fastrl_replay.runs import run_train
    m = run_train(env=args['env'], seed=seed, replay=args.get('replay'), learner=args.get('learner'), out=str(out),
                  quiet=True, **(dict(steps=2_000) if quick else {}))
    return {k: v for k, v in m.items() if k not in ('epochs', 'report')}

def forgetting_run(args: dict, seed: int, out: Path, quick: bool) -> dict:
    "A `fastrl-replay forgetting` run: its metrics"
    from fastrl_replay.forgetting import run_forgetting
    m = run_forgetting(seed, args['agent'], args['memory'], out/f'seed{seed}',
                       **(dict(eval_trials=200, steps1=50, steps2=50) if quick else {}))
    return {k: v for k, v in m.items() if k != 'report'}

def run(page: str, config: str, seed: int, runs: Path, quick: bool = False) -> Path:
    "Run `config` of `page` with `seed`; write its metrics, CPU time and machine record; the file's path"
    command, args = CONFIGS[page][config]
    folder = runs/page/config
    folder.mkdir(parents=True, exist_ok=True)
    cpu, wall = time.process_time(), time.perf_counter()
    m = (train_run if args['kind'] == 'train' else forgetting_run)(args, seed, folder/'reports', quick)
    res = dict(page=page, config=config, seed=seed, command=command.replace(' S', f' {seed}').replace('=S', f'={seed}'),
               quick=quick, metrics=m, cpu_s=round(time.process_time() - cpu, 1),
               process_wall_s=round(time.perf_counter() - wall, 1), machine=machine_record(*PEERS, torch_threads=1))
    path = folder/f'seed{seed}.json'
    path.write_text(json.dumps(res, indent=1) + '\n')
    print(f"{page} {config} seed {seed}: {res['cpu_s']} s CPU, {res['process_wall_s']} s wall -> {path}")
    return path

# ---- reading runs ------------------------------------------------------------------------------------------------
def load_runs(runs: Path, page: str, config: str) -> list:
    "The finished full runs of `config`, by seed"
    rs = [json.loads(p.read_text()) for p in (runs/page/config).glob('seed*.json')]
    return sorted((r for r in rs if not r.get('quick')), key=lambda r: r['seed'])

def fmt(x, digits=1) -> str: return f'{x:,.{digits}f}'.replace('-', '−')
def mean_sd(xs) -> str: return f"{fmt(statistics.fmean(xs))} ± {fmt(statistics.stdev(xs) if len(xs) > 1 else 0.)}"
def span(xs, digits=0) -> str:
    "The least and greatest of `xs` as 'a to b', or one value where they look the same"
    lo, hi = fmt(min(xs), digits), fmt(max(xs), digits)
    return lo if lo == hi else f'{lo} to {hi}'
def seeds_of(rs) -> str: return ', '.join(str(r['seed']) for r in rs)

def table(head: list, rows: list, left: int = 1) -> str:
    "A markdown table, its first `left` columns left-aligned and the others right-aligned"
    align = '|' + '---|' * left + '---:|' * (len(head) - left)
    return '\n'.join([f"| {' | '.join(head)} |", align] + [f"| {' | '.join(map(str, r))} |" for r in rows])

def same_as(rs: list, before: dict) -> tuple:
    "The seeds of `rs` whose greedy return equals, to the decimal shown, the one measured `before` ({seed: return})"
    same = [r['seed'] for r in rs if r['seed'] in before and round(r['metrics']['eval_mean'], 1) == before[r['seed']]]
    return same, [r['seed'] for r in rs if r['seed'] in before]

def page_json(title: str, command: str, text: str, rs: list, conditions: str) -> dict:
    "A stored page: its date is the first run's start, its `machine` every run's record"
    rec = records(rs)
    return dict(title=title, date=rec[0]['started'][:10], machine=rec[0] if len(rec) == 1 else rec,
                conditions=conditions, command=command, text=text)

# ---- page 01 -----------------------------------------------------------------------------------------------------
BEFORE_01 = {  # the greedy returns of the page as stored before these runs (measured 2026-11-24), by seed
    'uniform': {0: 500.0, 1: 500.0, 2: 500.0, 3: 500.0, 4: 500.0},
    'per': {0: 478.7, 1: 500.0, 2: 498.4, 3: 476.9, 4: 500.0},
    'laber': {0: 500.0, 1: 500.0, 2: 500.0, 3: 420.9, 4: 500.0}}
NAMES_01 = dict(uniform='uniform', per='prioritized (`--replay per`)', laber='LaBER (`--replay laber`)')

def page_01(runs: Path, conditions: str) -> dict:
    by = {c: load_runs(runs, '01', c) for c in CONFIGS['01']}
    seeds = sorted({r['seed'] for rs in by.values() for r in rs})
    rows = []
    for c, rs in by.items():
        ret, of = [r['metrics']['eval_mean'] for r in rs], {r['seed']: r for r in rs}
        cells = [fmt(of[s]['metrics']['eval_mean']) if s in of else '' for s in seeds]
        rows.append([NAMES_01[c], *cells, mean_sd(ret), f'{sum(x >= SOLVED for x in ret)} of {len(ret)}',
                     span([r['cpu_s'] for r in rs])])
    head = ['replay', *[f'seed {s}' for s in seeds], 'mean ± sd', f'solved (≥ {SOLVED})', 'CPU s per run']
    rate = [r['metrics']['env_steps'] / r['cpu_s'] for r in by['uniform']]
    cost = {c: statistics.median(r['cpu_s'] for r in rs) for c, rs in by.items()}
    steps = by['uniform'][0]['metrics']['env_steps']
    repro = []
    for c, rs in by.items():
        same, compared = same_as(rs, BEFORE_01[c])
        repro.append(f"{NAMES_01[c].split(' (')[0]} {len(same)} of {len(compared)}")
    under = sum(r['metrics']['eval_mean'] < 500 for rs in by.values() for r in rs)
    total = sum(len(rs) for rs in by.values())
    text = (f"Greedy return over 20 episodes after {steps:,} environment steps, for each kind of replay, seeds "
            f"{seeds_of(by['uniform'])}, one run at a time (each in its own process, one torch thread, at nice 10 on "
            f"this project's 2-core machine beside other jobs: the load of each run is in its record). The CPU time "
            f"of a run is the process's own, which the other jobs do not stretch: a uniform run steps {span(rate)} "
            f"times per CPU second; at the median a prioritized run takes {cost['per'] / cost['uniform']:.1f} times "
            f"its CPU time and a LaBER run, which scores four times the batch, {cost['laber'] / cost['uniform']:.1f} "
            f"times:\n\n"
            + table(head, rows)
            + f"\n\n(sd: the sample standard deviation over the seeds.) A run is reproducible from its seed while the "
              f"library's arithmetic stays the same; any change in it makes a different run, as another seed would. "
              f"Against the returns this page gave before (measured 2026-11-24), the runs that returned the same to "
              f"the decimal shown: {', '.join(repro)}. With {under} of {total} runs under 500, the replays are not "
              f"told apart by this table: what it shows is whether each solves CartPole-v1 at this budget, and on "
              f"how many seeds.\n\n"
              "For the DQN, prioritized replay normalizes its importance weights by the largest weight in each batch. "
              "The paper's normalization by the largest weight over the whole memory divides by the weight of the "
              "smallest priority, which in a memory of 50,000 transitions is close to `eps ** alpha`; it shrinks the "
              "updates by orders of magnitude as β anneals, and gave 488.7, 282.0 and 410.6 on seeds 0 to 2 when "
              "measured on 2026-11-24 (not run again here).")
    return page_json('DQN on CartPole-v1 with each kind of replay', 'fastrl-replay train --seed S --replay '
                     f'uniform|per|laber  (S = {seeds_of(by["uniform"])}; 50,000 environment steps)', text,
                     [r for rs in by.values() for r in rs], conditions)

# ---- page 02 -----------------------------------------------------------------------------------------------------
BEFORE_02 = {'acrobot': {0: -77.6, 1: -77.2, 2: -82.0, 3: -73.5, 4: -84.7},
             'mountaincar': {0: -102.3, 1: -99.6, 2: -99.4}, 'mountaincar_per': {0: -101.5, 1: -100.3, 2: -98.2},
             'mountaincar_1step': {0: -108.1, 1: -178.2, 2: -103.4}}
LEVERS = dict(mountaincar='3-step returns, uniform replay (the defaults)',
              mountaincar_per='3-step returns, prioritized replay (`--replay per`)',
              mountaincar_1step='1-step returns, uniform replay (`n_steps=1`)')

def page_02(runs: Path, conditions: str) -> dict:
    ac, cp = load_runs(runs, '02', 'acrobot'), load_runs(runs, '01', 'uniform')
    mc = {c: load_runs(runs, '02', c) for c in LEVERS}
    rows = [[r['metrics']['env'], r['metrics']['replay'], r['seed'], f"{r['metrics']['env_steps']:,}",
             f"{fmt(r['metrics']['eval_mean'])} ± {fmt(r['metrics']['eval_std'])}", fmt(r['cpu_s']),
             f"{r['metrics']['env_steps'] / r['cpu_s']:,.0f}"] for r in [*ac, *cp, *mc['mountaincar']]]
    main = table(['env', 'replay', 'seed', 'steps', 'greedy return (20 episodes)', 'CPU s', 'env steps per CPU s'],
                 rows, 2)
    acr = [r['metrics']['eval_mean'] for r in ac]
    same_ac, cmp_ac = same_as(ac, BEFORE_02['acrobot'])
    mseeds = sorted({r['seed'] for rs in mc.values() for r in rs})
    lever_rows = [[name] + [next((fmt(r['metrics']['eval_mean']) for r in mc[c] if r['seed'] == s), '')
                            for s in mseeds] for c, name in LEVERS.items()]
    levers = table([f"MountainCar-v0, {mc['mountaincar'][0]['metrics']['env_steps']:,} steps",
                    *[f'seed {s}' for s in mseeds]], lever_rows)
    mcr = {c: [r['metrics']['eval_mean'] for r in rs] for c, rs in mc.items()}
    same_mc = {c: same_as(mc[c], BEFORE_02[c]) for c in LEVERS}
    text = (f"Greedy return over 20 episodes, `fastrl-replay train --env ENV --seed S` with the defaults, uniform "
            f"replay, one run at a time (each in its own process, one torch thread, at nice 10 on this project's "
            f"2-core machine beside other jobs: the load of each run is in its record; CPU time is the process's "
            f"own, which the other jobs do not stretch). The CartPole-v1 runs are the uniform runs of the section "
            f"above:\n\n{main}\n\n"
            f"The zoo's DQN reaches −76.6 on Acrobot-v1 at 100,000 steps and about −120 on MountainCar-v0 at "
            f"120,000 (one run each). Acrobot-v1 reached {span(acr, 1)} on seeds {seeds_of(ac)}, {mean_sd(acr)} over "
            f"the "
            f"{len(acr)} (mean and sample standard deviation; the aim was −100 or better on every seed: "
            f"{sum(x >= -100 for x in acr)} of {len(acr)}); {len(same_ac)} of {len(cmp_ac)} seeds returned, to the "
            f"decimal shown, what they returned when this page was last measured (2026-11-24), as a run does while "
            f"the library's arithmetic stays the same. Each Acrobot run took {span([r['cpu_s'] for r in ac])} s of "
            f"CPU time. CartPole-v1 with the defaults reaches {SOLVED} or more on "
            f"{sum(r['metrics']['eval_mean'] >= SOLVED for r in cp)} of {len(cp)} seeds. MountainCar-v0's settings "
            f"are the zoo's (with this library's 3-step Double DQN and `fit_flat_cos`); seeds "
            f"{seeds_of(mc['mountaincar'])} reached {', '.join(fmt(x) for x in mcr['mountaincar'])}, against the "
            f"zoo's −120. What decides "
            f"MountainCar is the reward that random exploration rarely finds, and this library has two levers on how "
            f"fast the memory spreads it. Measured on the same seeds:\n\n{levers}\n\n"
            f"Mean and sample standard deviation over the seeds: {mean_sd(mcr['mountaincar'])} with the defaults, "
            f"{mean_sd(mcr['mountaincar_per'])} with prioritized replay, {mean_sd(mcr['mountaincar_1step'])} with "
            f"one-step returns. Same to the decimal shown as when last measured (2026-11-24): "
            + ', '.join(f"{LEVERS[c].split(' (')[0]} {len(s)} of {len(k)}" for c, (s, k) in same_mc.items())
            + ".\n\n"
            "`dqn_learner` also takes a ready environment, any model and any memory: `dqn_learner(pixel_env("
            "'CartPole-v1'), model=PixelQNet(4, 2), memory=FrameReplay((80, 120), stack_size=4, n_steps=3, ...))` "
            "trains a convolutional DQN on stacks of rendered frames that the memory stores once each (the DQN page "
            "shows it; `tests/test_circular_pixels.py` runs a short one). Measured on 2026-11-24 and not run again "
            "here: on this machine's CPU a full run stepped at about 96 environment steps per second (each frame "
            "rendered) and, on seed 0, reached a greedy return of 30.0 after 50,000 steps and 61.2 after 150,000 (a "
            "random policy averages about 22): it learns from pixels, slowly.")
    command = (f"fastrl-replay train --env ENV --seed S  (S = {seeds_of(ac)} for Acrobot-v1, {seeds_of(cp)} for "
               f"CartPole-v1, {seeds_of(mc['mountaincar'])} for MountainCar-v0); fastrl-replay train --env "
               f"MountainCar-v0 --seed S --replay per; run_train('MountainCar-v0', seed=S, learner=dict(n_steps=1)); "
               f"each through python bench/learning_pages.py run PAGE CONFIG --seed S")
    return page_json('DQN on Acrobot, CartPole and MountainCar', command, text,
                     [*ac, *cp, *(r for rs in mc.values() for r in rs)], conditions)

# ---- page 07 -----------------------------------------------------------------------------------------------------
AGENTS_07 = dict(a2c_fifo=('A2C', 'trials in an `ExperienceReplay`'), dqn_reservoir=('DQN', '`ReservoirReplay`'),
                 dqn_balanced=('DQN', '`TaskBalancedReplay`'))

def page_07(runs: Path, conditions: str) -> dict:
    by = {c: load_runs(runs, '07', c) for c in AGENTS_07}
    rows = []
    for c, (agent, mem) in AGENTS_07.items():
        ms, k = [r['metrics'] for r in by[c]], len(by[c])
        rows.append([agent, mem, f"{sum(m['forgets_without_replay'] for m in ms)} of {k}",
                     f"{sum(m['retention'] >= 0.9 for m in ms)} of {k}",
                     f"{sum(m['mode2_ratio'] >= 0.9 for m in ms)} of {k}",
                     f"{sum(m['targets_met'] for m in ms)} of {k}",
                     f"{max(r['cpu_s'] for r in by[c]):.0f} s"])
    a2c = [r['metrics'] for r in by['a2c_fifo']]
    dqn = [r['metrics'] for c in ('dqn_reservoir', 'dqn_balanced') for r in by[c]]
    dqn_right = sum(m['mode1_after_no_replay'] >= 0.9 for m in dqn)
    seeds = sorted({r['seed'] for rs in by.values() for r in rs})
    text = (f"Seeds {', '.join(map(str, seeds))}, {a2c[0]['eval_trials']:,} evaluation trials per score, one run at a "
            f"time (each in its own process, one torch thread, at nice 10 on this project's 2-core machine beside "
            f"other jobs: the load of each run is in its record; the CPU time is the process's own). A2C with the "
            f"tutorial's agent and 100 trials per gradient step, {a2c[0]['budget']['steps1']:,} gradient steps in "
            f"mode 1 and {a2c[0]['budget']['steps2']:,} in mode 2, since an agent coming from mode 1 can stall for "
            f"several hundred steps choosing whichever of green and blue is shown second; the DQN "
            f"{dqn[0]['budget']['steps1']:,} environment steps per mode and one memory of "
            f"{dqn[0]['budget']['memory_sz']:,} rows through both modes. Retention is mode 1 after mode 2 with replay "
            f"over mode 1 before; the mode-2 ratio compares mode 2 after replay with an agent trained on mode 2 alone; "
            f"the targets are 0.9 for both:\n\n"
            + table(['agent', 'memory', 'forgot without replay', 'retention ≥ 0.9', 'mode-2 ratio ≥ 0.9', 'both',
                     'slowest seed (CPU)'], rows, 2)
            + f"\n\n(Forgot: mode 1 fell by 0.02 or more after mode 2 without replay.) Without replay the A2C's mode "
              f"1 went from {span([m['mode1_before'] for m in a2c], 2)} before mode 2 to "
              f"{span([m['mode1_after_no_replay'] for m in a2c], 2)} after it; with replay its retention is "
              f"{span([m['retention'] for m in a2c], 3)} and it reaches "
              f"{span([m['mode2_ratio'] for m in a2c], 2)} of a mode-2-only agent on mode 2. The DQN without replay "
              f"(a FIFO memory, which holds no mode-1 row after mode 2) still chooses right on mode 1 (0.9 or more) in "
              f"{dqn_right} of {len(dqn)} runs: it sees colours as RGB values, and the order of values it learns in "
              f"mode 2 (red below green below blue) extends to yellow in the right place; it forgot, by 0.02 or more, "
              f"in {sum(m['forgets_without_replay'] for m in dqn)} of {len(dqn)}, so the contrast between FIFO and "
              f"the continual memories is small for this DQN. The tutorial and the A2C page give the details.")
    return page_json('Replay against forgetting',
                     'fastrl-replay forgetting --seed S --agent a2c|dqn --memory fifo|reservoir|balanced --out DIR '
                     '(a2c with fifo, dqn with reservoir and balanced; through python bench/learning_pages.py run 07 '
                     'CONFIG --seed S)', text, [r for rs in by.values() for r in rs], conditions)

# ---- page 12 -----------------------------------------------------------------------------------------------------
RANDOM_12 = dict(mean=1.3323863636363635, steps=200_000, games=1_056)  # a random policy on Breakout, 2026-11-24

def page_12(runs: Path, conditions: str) -> dict:
    "The DQN on Breakout from `bench/atari_dqn_cpu.py`'s results file, `<runs>/12/atari_dqn_cpu.json`"
    r = json.loads((runs/'12'/'atari_dqn_cpu.json').read_text())
    ret, last = r['returns'], r['returns'][-50:]
    se = statistics.stdev(last) / len(last) ** .5
    fifths = [statistics.fmean(ret[len(ret) * i // 5:len(ret) * (i + 1) // 5]) for i in range(5)]
    rnd = RANDOM_12['mean']
    text = (f"A DQN with the Nature network on Breakout (`ALE/Breakout-v5`, `AtariPreprocessing`, 4 environments), its "
            f"replay memory a `CompressedFrameStorage` of 100,000 steps (blocks of 8, its default), on one torch "
            f"thread at nice 10 on this project's 2-core CPU beside other jobs (the load is in the record): "
            f"{r['env_steps']:,} environment steps in {r['wall_s'] / 60:.0f} minutes "
            f"({r['env_steps'] / r['wall_s']:.0f} steps/s of wall time), {len(ret)} games, exploration down to "
            f"{r['epsilon']:.2f} (it decays over the "
            f"first 100,000 steps). The mean return of the last 50 games, played while exploring, is "
            f"{statistics.fmean(last):.2f} ± {se:.2f} (standard error) against {rnd:.2f} for a random policy "
            f"({RANDOM_12['steps']:,} random steps, {RANDOM_12['games']:,} games, measured 2026-11-24), "
            f"{statistics.fmean(last) / rnd:.1f} times as much; by fifths of the games the mean return went "
            f"{', '.join(f'{x:.2f}' for x in fifths)}. The memory held {r['memory_bytes_per_transition']:.0f} "
            f"bytes per stored transition ({r['memory_rows']:,} rows). A run to the Nature paper's scores takes tens "
            f"of millions "
            f"of frames.")
    return dict(title='DQN on Breakout on the CPU, replay in compressed frames', date=r['machine']['started'][:10],
                machine=r['machine'], conditions=conditions,
                command=f"python bench/atari_dqn_cpu.py bench/results/atari_dqn_cpu.json {r['env_steps'] // 5_000}",
                text=text, returns=ret, env_steps=r['env_steps'], wall_s=r['wall_s'], random_return=rnd,
                memory_bytes_per_transition=r['memory_bytes_per_transition'])

PAGES = {'01': ('01_dqn_replays', page_01), '02': ('02_dqn_environments', page_02), '07': ('07_forgetting', page_07),
         '12': ('12_atari_dqn_cpu', page_12)}

def stored(runs: Path, into: Path, pages: list, conditions: str):
    "Write `into/<page>.json` for each of `pages` from the runs under `runs`"
    into.mkdir(parents=True, exist_ok=True)
    for p in pages:
        name, make = PAGES[p]
        (into/f'{name}.json').write_text(json.dumps(make(runs, conditions), indent=1, ensure_ascii=False) + '\n')
        print(f'wrote {into/name}.json')

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='action', required=True)
    r = sub.add_parser('run', help='one run of a config of a page')
    r.add_argument('page', choices=list(CONFIGS))
    r.add_argument('config')
    r.add_argument('--seed', type=int, default=0)
    r.add_argument('--runs', type=Path, default=Path('/work/runs/pages'))
    r.add_argument('--quick', action='store_true', help='a smoke run of a few steps, left out of the pages')
    sub.add_parser('list', help="the pages' configs and commands")
    s = sub.add_parser('stored', help='the stored pages from the runs')
    s.add_argument('--runs', type=Path, default=Path('/work/runs/pages'))
    s.add_argument('--into', type=Path, default=BENCH/'stored')
    s.add_argument('--pages', nargs='*', default=list(PAGES), choices=list(PAGES))
    s.add_argument('--conditions', default='one run at a time at nice 10, on a machine shared with other jobs '
                                           '(their load is in each record)')
    a = ap.parse_args()
    if a.action == 'run':
        if a.config not in CONFIGS[a.page]: ap.error(f'page {a.page} has configs {list(CONFIGS[a.page])}')
        run(a.page, a.config, a.seed, a.runs, a.quick)
    elif a.action == 'list':
        for p, cs in CONFIGS.items():
            for c, (cmd, _) in cs.items(): print(p, c, cmd)
    else: stored(a.runs, a.into, a.pages, a.conditions)
