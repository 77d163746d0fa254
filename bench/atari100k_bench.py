"""Atari-100k: data-efficient Rainbow (`fastrl-replay train --algo der`) on six games, scored against published results.

Each run is one game and one seed, trained for 100,000 agent steps (400,000 frames) by the `fastrl-replay` command with
checkpoints, in its own folder `<runs>/<Game>/seed<S>/` (the command's `--out`; the run folder it makes lies inside).
`run` starts a run, resumes it from its checkpoint if it was stopped (a run folder with a checkpoint and no
metrics.json), or leaves a finished one alone, so it can be called again and again until the run is done. `table`
scores every finished run (the mean of its evaluation episodes' returns), human-normalises it (HNS = (score - random) /
(human - random)) and sets it beside the published DER, OTRainbow and SPR scores of the same game; the aggregates are
the mean, median and interquartile mean (IQM: the 25% trimmed mean of all game x seed HNS pooled, as rliable computes
it) over the games that have finished runs. Unfinished runs are listed with their step count, never scored.

    python bench/atari100k_bench.py run --game Pong --seed 0   # start, resume, or leave a finished run alone
    python bench/atari100k_bench.py table --runs /work/runs/atari100k --into bench/stored/16_atari100k.json
    python bench/atari100k_bench.py run --quick                # smoke: 300 steps in a temporary folder, then its table
"""
import argparse, json, math, os, re, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path
from machine import machine_record, records  # first: the load average as the run starts

ROOT = Path(__file__).resolve().parent.parent
RUNS = Path('/work/runs/atari100k')
STEPS = 100_000
WARMUP = 1_600  # `DERSettings.warmup`: agent steps acted at random and stored before the first update
PEERS = ('ale-py', 'gymnasium')
# raw scores: random and human as the Atari-100k papers normalise by; DER, OTRainbow and SPR at 100k steps as
# A-LIX's Table 5 gives them (`SOURCES`)
PUBLISHED = {
    'Pong': dict(random=-20.7, human=14.6, der=-19.3, otrainbow=1.3, spr=-5.9),
    'Breakout': dict(random=1.7, human=30.5, der=1.9, otrainbow=9.8, spr=17.1),
    'Boxing': dict(random=0.1, human=12.1, der=0.2, otrainbow=2.5, spr=35.8),
    'Freeway': dict(random=0.0, human=29.6, der=27.9, otrainbow=25.0, spr=24.4),
    'Krull': dict(random=1598.0, human=2665.5, der=2851.5, otrainbow=3277.9, spr=3688.9),
    'RoadRunner': dict(random=11.5, human=7845.0, der=9600.0, otrainbow=2696.7, spr=14220.5)}
AGENTS = ('der', 'otrainbow', 'spr')
NAMES = dict(der='DER', otrainbow='OTRainbow', spr='SPR')
FULL_BENCHMARK = dict(  # human-normalised mean and median over all 26 games of Atari-100k, as published
    der=dict(mean=0.285, median=0.161), otrainbow=dict(mean=0.264, median=0.204), spr=dict(mean=0.704, median=0.415))
SOURCES = dict(
    random_human='the scores the Atari-100k papers normalise by; the same in A-LIX\'s Table 5 and in mila-iqia/spr '
                 'analysis/100k_comparison.ipynb (random_scores, human_scores)',
    der='van Hasselt, Hessel, Aslanides, "When to use parametric models in reinforcement learning?" (NeurIPS 2019), at '
        "100k steps, as A-LIX's Table 5 gives it; the same in mila-iqia/spr analysis/100k_comparison.ipynb "
        '(der_scores)',
    otrainbow="Kielak 2019, at 100k steps, as A-LIX's Table 5 gives it (Cetin, Ball, Roberts, Celiktutan, "
              '"Stabilizing off-policy deep reinforcement learning from pixels", ICML 2022)',
    spr='Schwarzer et al., "Data-efficient reinforcement learning with self-predictive representations" (ICLR 2021), '
        "at 100k steps, as A-LIX's Table 5 gives it",
    full_benchmark="A-LIX's Tables 3 and 5; SPR's median 0.415 is also in the SPR paper's abstract")
TITLE = 'Atari-100k: data-efficient Rainbow on six games against published DER, OTRainbow and SPR'

# ---- the statistics ----------------------------------------------------------------------------------------------
def hns(game:str, score:float) -> float:
    "The human-normalised score of `score` in `game`: 0 is the random agent's, 1 the human's"
    p = PUBLISHED[game]
    return (score - p['random']) / (p['human'] - p['random'])

def median(xs) -> float|None: return statistics.median(xs) if len(xs) else None
def mean(xs) -> float|None: return statistics.fmean(xs) if len(xs) else None

def iqm(xs) -> float|None:
    "Interquartile mean: the mean of what is left after cutting int(n/4) values from each end (scipy's `trim_mean`)"
    xs = sorted(xs)
    if not xs: return None
    k = int(0.25 * len(xs))
    return statistics.fmean(xs[k:len(xs) - k])

# ---- run folders -------------------------------------------------------------------------------------------------
def run_root(runs:Path, game:str, seed:int) -> Path:
    "The folder a game's seed trains in: the `--out` of its `fastrl-replay train`"
    return Path(runs)/game/f'seed{seed}'

def run_folders(root:Path) -> list:
    "The run folders (holding run.json or metrics.json) under `root`, oldest name first"
    if not Path(root).is_dir(): return []
    found = {p.parent for n in ('run.json', 'metrics.json') for p in Path(root).rglob(n)}
    return sorted(found, key=lambda p: (p.name, str(p)))

def has_checkpoint(run:Path) -> bool: return (run/'checkpoint').is_dir()

def plan(root:Path) -> tuple:
    "What `run` does for the folder `root`: ('done', run), ('resume', run) or ('start', None)"
    folders = run_folders(root)
    done = [p for p in folders if (p/'metrics.json').exists()]
    if done: return 'done', done[-1]
    resumable = [p for p in folders if (p/'run.json').exists() and has_checkpoint(p)]
    return ('resume', resumable[-1]) if resumable else ('start', None)

def cli() -> str:
    "The `fastrl-replay` command of this checkout's environment, else the one on the PATH"
    local = ROOT/'.venv'/'bin'/'fastrl-replay'
    return str(local) if local.exists() else shutil.which('fastrl-replay') or 'fastrl-replay'

def train_command(action:str, root:Path, game:str, seed:int, steps:int, checkpoint_every:int, run=None,
                  extra:tuple=()) -> list:
    "The `fastrl-replay train` command that starts (with `extra` arguments) or resumes the run of `game` and `seed`"
    if action == 'resume': return [cli(), 'train', '--resume', str(run), '--quiet']
    return [cli(), 'train', '--algo', 'der', '--env', f'ALE/{game}-v5', '--seed', str(seed), '--steps', str(steps),
            '--checkpoint-every', str(checkpoint_every), '--out', str(root), '--quiet', *extra]

def thread_env(threads:int) -> dict:
    "This process's environment with `threads` threads for OpenMP, MKL and numba"
    return os.environ | {k: str(threads) for k in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'NUMBA_NUM_THREADS')}

def run(game:str, seed:int, runs:Path, steps:int=STEPS, checkpoint_every:int=5_000, threads:int=1,
        extra:tuple=()) -> Path|None:
    "Start (`extra`: more `train` arguments), resume or leave alone the run of `game` and `seed`; its folder once done"
    root = run_root(runs, game, seed)
    action, folder = plan(root)
    if action == 'done':
        print(f'{game} seed {seed}: finished, {folder/"metrics.json"}')
        return folder
    cmd = train_command(action, root, game, seed, steps, checkpoint_every, folder, extra)
    print(f'{game} seed {seed}: {action} ({" ".join(cmd)})', flush=True)
    root.mkdir(parents=True, exist_ok=True)
    rc = subprocess.run(cmd, env=thread_env(threads)).returncode
    with open(root/'machine.jsonl', 'a') as f:  # one record per invocation: a resumed run has several
        f.write(json.dumps(dict(action=action, rc=rc, machine=machine_record(*PEERS, torch_threads=threads))) + '\n')
    if rc != 0: sys.exit(f'{game} seed {seed}: fastrl-replay train exited with status {rc}')
    action, folder = plan(root)
    return folder if action == 'done' else None

# ---- reading runs ------------------------------------------------------------------------------------------------
def _steps_like(xs:list) -> bool:
    "Whether `xs` could be the steps episodes ended at: whole, not negative, never decreasing"
    return all(float(x).is_integer() and x >= 0 for x in xs) and all(a <= b for a, b in zip(xs, xs[1:]))

def episodes(train_returns) -> list:
    "Training episodes as (step it ended at, return), from `{'steps', 'returns'}`, dicts, or pairs in either order"
    if not train_returns: return []
    if isinstance(train_returns, dict): return list(zip(map(int, train_returns['steps']),
                                                        map(float, train_returns['returns'])))
    if isinstance(train_returns[0], dict):
        return [(int(e.get('step', e.get('env_step'))), float(e['return'])) for e in train_returns]
    a, b = [e[0] for e in train_returns], [e[1] for e in train_returns]
    steps_first = _steps_like(a) and (not _steps_like(b) or a[-1] >= b[-1])  # der's game_returns: [return, step]
    steps, rets = (a, b) if steps_first else (b, a)
    return [(int(x), float(r)) for x, r in zip(steps, rets)]

def binned(eps:list, width:int, n_bins:int) -> list:
    "The mean return of the episodes ending in each `width` steps, `n_bins` bins; None where none ended"
    sums, counts = [0.] * n_bins, [0] * n_bins
    for step, ret in eps:
        i = min(max(math.ceil(step / width) - 1, 0), n_bins - 1)
        sums[i] += ret; counts[i] += 1
    return [round(s / c, 3) if c else None for s, c in zip(sums, counts)]

def game_of(env:str) -> str:
    "'ALE/Pong-v5' -> 'Pong'"
    m = re.fullmatch(r'(?:ALE/)?(\w+?)(?:NoFrameskip)?-v\d+', env or '')
    return m.group(1) if m else env

def checkpoint_steps(run:Path):
    "The environment steps the run's checkpoint was written at, read from its manifest; None if it cannot say"
    try: s = json.loads((run/'checkpoint'/'checkpoint.json').read_text())['state']['env_steps']
    except (OSError, ValueError, KeyError, TypeError): return None
    if isinstance(s, dict) and '__scalar__' in s: s = s['__scalar__'][1]
    return s if isinstance(s, int) else None

def seed_of(root:Path): return int(root.name[4:]) if root.name[4:].lstrip('-').isdigit() else None

def finished_run(run:Path, root:Path) -> dict:
    "The figures of one finished run, from its metrics.json (game and seed from the folder `root` where it lacks them)"
    m = json.loads((run/'metrics.json').read_text())
    score = mean(m['eval_returns']) if m.get('eval_returns') else m['eval_mean']
    steps, wall, mem_s = m.get('env_steps'), m.get('wall_s'), m.get('memory_s')
    game = game_of(m['env']) if isinstance(m.get('env'), str) else root.parent.name
    return dict(game=game, seed=int(m.get('seed', seed_of(root))), score=score, eval_episodes=m.get('eval_episodes',
                len(m.get('eval_returns') or [])), env_steps=steps, wall_s=wall, memory_s=mem_s,
                wall_s_per_100k=wall * 100_000 / steps if wall and steps else None,
                memory_share=mem_s / wall if mem_s is not None and wall else None,
                bytes_per_transition=m.get('memory_bytes_per_transition'), episodes=episodes(m.get('train_returns')),
                run=str(run))

def unfinished_run(run:Path, root:Path) -> dict:
    "Where an unfinished run stands: its game, seed and the steps of its checkpoint ('in progress' if unknown)"
    try: s = json.loads((run/'run.json').read_text())
    except (OSError, ValueError): s = {}
    game = game_of(s['env']) if isinstance(s.get('env'), str) else root.parent.name
    seed = s.get('seed', seed_of(root))
    steps = checkpoint_steps(run)
    return dict(game=game, seed=seed, env_steps=steps, status='in progress' if steps is None else
                f'checkpoint at {steps:,} steps', run=str(run))

def collect(runs:Path) -> tuple:
    "The finished runs (one per game and seed, the latest), the unfinished ones, and the finished runs' machines"
    finished, unfinished, machines = {}, [], []
    for root in sorted(p for p in Path(runs).glob('*/seed*') if p.is_dir()) if Path(runs).is_dir() else []:
        action, folder = plan(root)
        if action != 'done':
            unfinished += [unfinished_run(f, root) for f in run_folders(root)[-1:]]
            continue
        r = finished_run(folder, root)
        finished[(r['game'], r['seed'])] = r
        if (root/'machine.jsonl').exists():  # the machine of each invocation that trained the run
            machines += [json.loads(l) for l in (root/'machine.jsonl').read_text().splitlines() if l.strip()]
    return finished, unfinished, records(machines) if machines else []

# ---- the table ---------------------------------------------------------------------------------------------------
def row(game:str, runs:list) -> dict:
    "One game's row: published scores and HNS, and each seed's score, HNS, learning curve, wall-clock and memory"
    p, runs = PUBLISHED[game], sorted(runs, key=lambda r: r['seed'])
    scores = [r['score'] for r in runs]
    steps = max([r['env_steps'] or 0 for r in runs] + [e[0] for r in runs for e in r['episodes']] + [0])
    width = max(1, math.ceil(steps / 10))
    return dict(game=game, env=f'ALE/{game}-v5', **p, published_hns={a: hns(game, p[a]) for a in AGENTS},
                seed_numbers=[r['seed'] for r in runs], seeds=scores, mean=mean(scores),
                hns=[hns(game, s) for s in scores], hns_mean=mean([hns(game, s) for s in scores]),
                eval_episodes=[r['eval_episodes'] for r in runs], env_steps=[r['env_steps'] for r in runs],
                wall_s=[r['wall_s'] for r in runs], wall_s_per_100k=[r['wall_s_per_100k'] for r in runs],
                memory_s=[r['memory_s'] for r in runs], memory_share=[r['memory_share'] for r in runs],
                bytes_per_transition=[r['bytes_per_transition'] for r in runs],
                curves=dict(bin_steps=[width * (i + 1) for i in range(10)] if runs else [],
                            returns=[binned(r['episodes'], width, 10) for r in runs]),
                runs=[r['run'] for r in runs])

def aggregates(rows:list) -> dict:
    "Mean, median and IQM of our HNS over the games with finished runs; the published agents' on the same games"
    scored = [r for r in rows if r['seeds']]
    games = [r['game'] for r in scored]
    out = dict(games=games, runs=sum(len(r['seeds']) for r in scored),
               ours=dict(mean_hns=mean([r['hns_mean'] for r in scored]),
                         median_hns=median([r['hns_mean'] for r in scored]),
                         iqm_hns=iqm([h for r in scored for h in r['hns']])))
    for a in AGENTS:
        out[a] = dict(mean_hns=mean([r['published_hns'][a] for r in scored]),
                      median_hns=median([r['published_hns'][a] for r in scored]))
    out['games_ours_at_least_der'] = sum(r['mean'] >= r['der'] for r in scored)
    return out

def protocol(rows:list, steps:int=STEPS) -> dict:
    "The evaluation protocol of the runs"
    seeds = sorted({s for r in rows for s in r['seed_numbers']})
    episodes = sorted({e for r in rows for e in r['eval_episodes'] if e is not None})
    return dict(agent_steps=steps, frames=4 * steps, frame_skip=4, sticky_actions=False, repeat_action_probability=0.0,
                max_frames_per_episode=108_000, life_loss_terminal_in_training=True,
                eval_episodes=episodes[0] if len(episodes) == 1 else episodes, eval_epsilon=0.001, seeds=seeds,
                score='the mean return of the evaluation episodes after training, per seed; a game\'s score the mean '
                      'over its seeds')

def _n(k:int, what:str) -> str: return f'{k} {what}' + ('' if k == 1 else 's')

def _f(x, nd=1) -> str:
    "A number for the page: '—' if missing, thousands separated"
    return '—' if x is None else f'{x:,.{nd}f}'

def text(res:dict) -> str:
    "The result as the benchmarks page's markdown: the protocol, the table, the aggregates, the costs, the sources"
    rows, agg, pr = res['rows'], res['aggregates'], res['protocol']
    n_eval = _n(pr['eval_episodes'], 'episode') if isinstance(pr['eval_episodes'], int) else 'its episodes'
    head = (f"Data-efficient Rainbow (`fastrl-replay train --algo der`) for {pr['agent_steps']:,} agent steps "
            f"({pr['frames']:,} frames) per game and seed: no sticky actions, episodes capped at "
            f"{pr['max_frames_per_episode']:,} frames, a lost life ends an episode in training (not in evaluation), "
            f"evaluation over {n_eval} at epsilon {pr['eval_epsilon']} after training. "
            'A score is the mean evaluation return of a seed; HNS = (score - random) / (human - random). DER, '
            'OTRainbow and SPR are the published scores (sources below).')
    t = ['| game | random | human | DER | OTRainbow | SPR | ours, per seed | ours, mean | HNS ours | HNS DER '
         '| HNS OTRainbow | HNS SPR |', '|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|']
    for r in rows:
        per_seed = ', '.join(f'{s}: {_f(x)}' for s, x in zip(r['seed_numbers'], r['seeds'])) or 'no finished run'
        ph = r['published_hns']
        t.append(f"| {r['game']} | {_f(r['random'])} | {_f(r['human'])} | {_f(r['der'])} | {_f(r['otrainbow'])} | "
                 f"{_f(r['spr'])} | {per_seed} | {_f(r['mean'])} | {_f(r['hns_mean'], 3)} | {_f(ph['der'], 3)} | "
                 f"{_f(ph['otrainbow'], 3)} | {_f(ph['spr'], 3)} |")
    parts = [head, '\n'.join(t)]
    if agg['games']:
        o = agg['ours']
        parts.append(f"Over the {_n(len(agg['games']), 'game')} with finished runs ({', '.join(agg['games'])}; "
                     f"{_n(agg['runs'], 'run')}): our HNS mean {_f(o['mean_hns'], 3)}, median "
                     f"{_f(o['median_hns'], 3)}, IQM {_f(o['iqm_hns'], 3)} (all game x seed pooled); on the same games "
                     + '; '.join(f"{NAMES[a]} mean {_f(agg[a]['mean_hns'], 3)}, median {_f(agg[a]['median_hns'], 3)}"
                                 for a in AGENTS)
                     + f". Our mean score is at least DER's in {agg['games_ours_at_least_der']} of "
                       f"{len(agg['games'])} games.")
    else: parts.append('**No run has finished yet**: the table holds the published scores only.')
    fb = res['full_benchmark']
    parts.append('For scale, over all 26 games of Atari-100k (not comparable with the six-game figures above): '
                 + '; '.join(f"{NAMES[a]} mean {fb[a]['mean']}, median {fb[a]['median']}" for a in AGENTS) + '.')
    costs = [f"| {r['game']} | {s} | {_f(n, 0)} | {_f(w / 3600 if w else None, 2)} h | "
             f"{_f(100 * m if m is not None else None)}% | {_f(b, 0)} |"
             for r in rows for s, n, w, m, b in zip(r['seed_numbers'], r['env_steps'], r['wall_s_per_100k'],
                                                   r['memory_share'], r['bytes_per_transition'])]
    if costs:
        parts.append('Cost per run: wall-clock per 100,000 agent steps (training; evaluation not counted), the share '
                     'of it spent in the replay memory, and the memory\'s bytes per stored transition.\n\n'
                     '| game | seed | agent steps | wall-clock per 100k | in the replay memory '
                     '| bytes per transition |\n'
                     '|---|---:|---:|---:|---:|---:|\n' + '\n'.join(costs))
    for r in res.get('speed_runs', []):
        lo, hi = r['wall_s'] / r['env_steps'], r['wall_s'] / max(r['env_steps'] - WARMUP, 1)
        parts.append(f"A short run alone on the machine: {r['game']} seed {r['seed']}, {_f(r['env_steps'], 0)} agent "
                     f"steps (the first {_f(WARMUP, 0)} fill the memory without updates) on {r['threads']} threads "
                     f"(torch's {r['capability']} kernels; load {r['load']['start']} at the start, {r['load']['end']} "
                     f"at the end) in {_f(r['wall_s'], 0)} s of wall-clock, {_f(100 * r['memory_share'])}% of it "
                     f"in the replay memory: {_f(lo * 100_000 / 60, 0)} to {_f(hi * 100_000 / 60, 0)} minutes per "
                     f"100,000 steps (the warm-up steps counted as costly as a learning step, or as free).")
    if res['unfinished']:
        parts.append('Not finished, so not scored: ' + '; '.join(f"{u['game']} seed {u['seed']} ({u['status']})"
                                                                 for u in res['unfinished']) + '.')
    labels = dict(random_human='random and human', full_benchmark='26-game aggregates') | NAMES
    parts.append('Sources of the published numbers:\n\n' + '\n'.join(f'- {labels.get(k, k)}: {v}.'
                                                                     for k, v in res['sources'].items()))
    return '\n\n'.join(parts)

def figures(rows:list) -> list:
    "Plotly figures as JSON: each game's binned training returns per seed; each run's wall-clock and memory share"
    import plotly.graph_objects as go, plotly.io as pio
    from plotly.subplots import make_subplots
    scored = [r for r in rows if r['seeds']]
    if not scored: return []
    cols = min(3, len(scored)); n = math.ceil(len(scored) / cols)
    curves = make_subplots(rows=n, cols=cols, subplot_titles=[r['game'] for r in scored])
    for i, r in enumerate(scored):
        at = dict(row=i // cols + 1, col=i % cols + 1)
        for s, ys in zip(r['seed_numbers'], r['curves']['returns']):
            curves.add_trace(go.Scatter(x=r['curves']['bin_steps'], y=ys, mode='lines+markers', name=f'seed {s}',
                                        legendgroup=f'seed {s}', showlegend=i == 0, connectgaps=True), **at)
        curves.add_hline(y=r['der'], line_dash='dot', line_color='grey', annotation_text='DER (eval)', **at)
    curves.update_layout(title='Training returns (exploring), mean of the episodes ending in each tenth of the run',
                         height=300 * n + 120)
    labels = [f"{r['game']} {s}" for r in scored for s in r['seed_numbers']]
    cost = make_subplots(rows=1, cols=2, subplot_titles=['wall-clock per 100,000 agent steps (h)',
                                                         'share of it in the replay memory (%)'])
    cost.add_trace(go.Bar(x=labels, y=[w / 3600 if w else None for r in scored for w in r['wall_s_per_100k']],
                          name='wall-clock'), row=1, col=1)
    cost.add_trace(go.Bar(x=labels, y=[100 * m if m is not None else None for r in scored for m in r['memory_share']],
                          name='replay memory'), row=1, col=2)
    cost.update_layout(title='Cost of each run', showlegend=False, height=380)
    out = []
    for fig in (curves, cost):
        d = json.loads(pio.to_json(fig))
        d['layout'].pop('template', None)  # plotly's default template, put back when the page draws the figure
        out.append(d)
    return out

def speed_run(metrics:Path) -> dict:
    "A short run's speed: its game, seed, steps, wall-clock, memory share, threads and the machine's load"
    m, root = json.loads(metrics.read_text()), metrics.parents[2]
    rec = [json.loads(l) for l in (root/'machine.jsonl').read_text().splitlines() if l.strip()][-1]['machine']
    return dict(game=root.parent.name, seed=m['seed'], env_steps=m['env_steps'], wall_s=m['wall_s'],
                memory_share=m['memory_s'] / m['wall_s'], threads=rec['torch']['threads'],
                capability=rec['torch']['cpu_capability'], load=rec['load'], machine=rec)

def table(runs:Path, steps:int=STEPS, speed_runs:Path|None=None) -> dict:
    "The Atari-100k result of the runs under `runs`: rows, aggregates, unfinished runs, protocol, sources, machines"
    finished, unfinished, machines = collect(runs)
    rows = [row(g, [r for (game, _), r in finished.items() if game == g]) for g in PUBLISHED]
    res = dict(title=TITLE, bench='atari100k', date=time.strftime('%Y-%m-%d'),
               machine=(machines[0] if len(machines) == 1 else machines) if machines else machine_record(*PEERS),
               conditions='Each run record gives the load average at the start and the end of the invocation that '
                          'trained (or resumed) it; runs on a machine shared with other jobs' if machines else
                          'No run has a machine record yet: the record is that of the machine that built the table',
               command='python bench/atari100k_bench.py run --game GAME --seed SEED (each game and seed, again after '
                       f'an interruption); python bench/atari100k_bench.py table --runs {runs} --into '
                       'bench/stored/16_atari100k.json',
               protocol=protocol(rows, steps), rows=rows, aggregates=aggregates(rows), full_benchmark=FULL_BENCHMARK,
               unfinished=unfinished, sources=SOURCES)
    if speed_runs is not None:
        res['speed_runs'] = [speed_run(m) for m in sorted(Path(speed_runs).glob('*/seed*/*/*/metrics.json'))]
        res['command'] += f' --speed-runs {speed_runs}'
    res['text'] = text(res)
    res['figures'] = figures(rows)
    return res

def write_table(runs:Path, into:Path, steps:int=STEPS, speed_runs:Path|None=None) -> dict:
    res = table(runs, steps, speed_runs)
    into.parent.mkdir(parents=True, exist_ok=True)
    into.write_text(json.dumps(res, indent=1, ensure_ascii=False) + '\n')
    print(res['text'])
    print(f'written to {into}')
    return res

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest='cmd', required=True)
    r = sub.add_parser('run', help='start, resume or leave alone the run of one game and seed')
    r.add_argument('--game', choices=list(PUBLISHED), default='Pong')
    r.add_argument('--seed', type=int, default=0)
    r.add_argument('--steps', type=int, default=STEPS, help='agent steps (default: 100,000)')
    r.add_argument('--runs', type=Path, help=f'folder of all the runs (default: {RUNS}; --quick: a temporary one)')
    r.add_argument('--checkpoint-every', type=int, default=5_000, help='agent steps between checkpoints')
    r.add_argument('--threads', type=int, default=1, help='threads of torch, OpenMP and MKL in the run')
    r.add_argument('--eval-episodes', type=int, help="evaluation episodes (default: fastrl-replay's for der)")
    r.add_argument('--quick', action='store_true', help='a smoke run: 300 steps, then the table of its folder')
    t = sub.add_parser('table', help='score the finished runs into a stored result')
    t.add_argument('--runs', type=Path, default=RUNS)
    t.add_argument('--into', type=Path, default=ROOT/'bench'/'stored'/'16_atari100k.json')
    t.add_argument('--steps', type=int, default=STEPS, help='the agent steps of the protocol the runs followed')
    t.add_argument('--speed-runs', type=Path, help='a folder of short runs made alone on the machine, timed apart')
    a = p.parse_args(argv)
    if a.cmd == 'table': return write_table(a.runs, a.into, a.steps, a.speed_runs)
    extra = () if a.eval_episodes is None else ('--eval-episodes', str(a.eval_episodes))
    if a.quick:  # a memory as large as DER's warm-up (1,600 steps, so no learning step) and one evaluation game
        a.steps, a.checkpoint_every, a.runs = 300, 100, a.runs or Path(tempfile.mkdtemp(prefix='atari100k-'))
        extra = ('--replay-size', '1600', '--eval-episodes', '1')
    run(a.game, a.seed, a.runs or RUNS, a.steps, a.checkpoint_every, a.threads, extra)
    if a.quick: return write_table(a.runs, a.runs/'16_atari100k.quick.json', a.steps)

if __name__ == '__main__': main()
