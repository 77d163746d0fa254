"""Stored results made from the results files of one sitting: `python bench/pages.py [--results DIR]`.

Each page below reads what a benchmark script wrote under `bench/results/` (its figures and its `machine` records) and
writes `bench/stored/<page>.json` with its title, date, records, command and text: the tables are the results' own
figures, each ratio taken against the peers of the same run. Run the scripts first (see each page's `command`), then
this, then `python bench/benchmarks_page.py` to look at the page."""
import argparse, json, statistics
import numpy as np
from pathlib import Path
from machine import records, read_results

BENCH = Path(__file__).resolve().parent
AVX2 = ("run under `bench/avx2.sh`, which limits torch, oneDNN, MKL, NumPy and numba to AVX2 as on an AVX2-only CPU "
        "(the cores stay Zen 5's)")

def fmt(x, digits=0) -> str: return f'{x:,.{digits}f}'
def ratio(x) -> str: return f'{x:.2f}x'

def table(head: list, rows: list, left: int = 1) -> str:
    "A markdown table, the first `left` columns left-aligned and the others right-aligned"
    align = '|' + '---|' * left + '---:|' * (len(head) - left)
    return '\n'.join([f"| {' | '.join(head)} |", align] + [f"| {' | '.join(map(str, r))} |" for r in rows])

def page(name: str, title: str, command: str, text, sources: list, conditions: str, into: Path = BENCH/'stored',
         **extra):
    "`<into>/<name>.json` from results `sources` (`text` None: a timing, `runs` in `extra`), dated by the first record"
    rec = records(sources)
    date = rec[0]['started'] if rec and rec[0] else None
    out = dict(title=title, date=date, machine=rec[0] if len(rec) == 1 else rec, conditions=conditions,
               command=command, **({} if text is None else dict(text=text)), **extra)
    into.mkdir(parents=True, exist_ok=True)
    (into/f'{name}.json').write_text(json.dumps(out, indent=1, ensure_ascii=False) + '\n')
    print(f'wrote {into/name}.json')

def replay_text(r: dict, p: dict) -> str:
    "The transition memory's and the prioritized memory's throughput against their peers"
    s, out = r['settings'], []
    out.append(f"`bench/replay_bench.py` times `ExperienceReplay` against cpprb, Stable-Baselines3's `ReplayBuffer`, "
               f"TorchRL (`LazyTensorStorage`) and rlox (a Rust core) on the same data: capacity {fmt(s['capacity'])}, "
               f"float32 observations, an action of {s['action_dim']}, a reward and a done flag; median of "
               f"{s['rounds']} interleaved rounds, transitions per second (higher is better). `ours` adds torch "
               f"tensors with `+`, `ours[numpy]` NumPy arrays with `+`, `ours[append]` one transition without a batch "
               f"dimension.")
    for d, v in r['dims'].items():
        med, libs = v['median'], list(v['median'])
        rows = [[f'`{k}`', fmt(med[k]['add1']), fmt(med[k]['add256']), fmt(med[k]['sample'])] for k in libs]
        out.append(f'Observations of {d} features:\n\n' + table(['library', 'add 1', 'add 256', 'sample 256'], rows))
        ours = [k for k in libs if k.startswith('ours')]
        rr = [[f'`{k}`'] + [ratio(v['ratios'][k][f'vs {q}'][c]) for q in ('sb3', 'rlox')
                            for c in ('add1', 'add256', 'sample')] for k in ours]
        out.append('Ours against SB3 and rlox:\n\n' + table(
            ['library', 'add 1 / SB3', 'add 256 / SB3', 'sample / SB3', 'add 1 / rlox', 'add 256 / rlox',
             'sample / rlox'], rr))
    ps = p['settings']
    rows = [[f'`{k}`', fmt(v['add256']), f"{v['sample']:.4f}", f"{v['sample_update']:.4f}"]
            for k, v in p['median'].items()]
    out.append(f"`bench/per_bench.py` does the same for prioritized replay against cpprb's `PrioritizedReplayBuffer`, "
               f"TorchRL's `PrioritizedSampler` and Tianshou's `PrioritizedReplayBuffer`: capacity "
               f"{fmt(ps['capacity'])}, batch {ps['batch']}, alpha = {ps['alpha']}, beta = {ps['beta']}, median of "
               f"{ps['rounds']} interleaved rounds:\n\n"
               + table(['library', 'add 256 (transitions/s)', 'sample 256 (ms)', 'sample + update 256 (ms)'], rows))
    b, best = p['ratios']['vs best peer'], p['ratios']['best peer']
    out.append(f"Against the best peer: {ratio(b['add256'])} on adds ({best['add256']}), {ratio(b['sample'])} on "
               f"sampling ({best['sample']}) and {ratio(b['sample_update'])} on sample + update "
               f"({best['sample_update']}).")
    return '\n\n'.join(out)

def adapters_text(a: dict) -> str:
    "One call of each adapter and of the native memory against its peer"
    s, rows = a['settings'], []
    for case, libs in a['median_s'].items():
        peer = next(iter(libs.values()))
        for i, (lib, t) in enumerate(libs.items()):
            rows.append([case, lib, f'{t * 1e6:.2f}', '' if i == 0 else ratio(peer / t)])
    return (f"One `add` (and `sample(256)`) of each adapter against its peer, and one transition added to the native "
            f"memory against SB3's `add`: medians of {s['rounds']} rounds of {fmt(s['calls'])} calls, the libraries "
            f"alternating, timed in the calling thread's {s['clock']} time; the calls add a pool of {s['pool']} "
            f"prepared transitions in turn, as a training loop adds the step it has just made. The ratio is the "
            f"peer's time over ours (higher: ours is faster).\n\n"
            + table(['case', 'library', 'µs per call', 'ours / peer'], rows))

def first_use_text(f: dict) -> str:
    "A memory's first use in a new process, with numba's cache empty and filled"
    keys = ('import_torch_s', 'import_memory_s', 'make_s', 'add_s', 'sample_s', 'update_s', 'process_s')
    rows = []
    for case, v in f['runs'].items():
        for cache, runs in v.items():
            med = {k: statistics.median(r[k] for r in runs) for k in keys if all(k in r for r in runs)}
            memory = sum(med.get(k, 0.) for k in keys[1:6])
            rows.append([case, cache] + [f'{med[k]:.3f}' if k in med else '' for k in keys] + [f'{memory:.2f}'])
    return ("`bench/first_use_bench.py` starts a new Python process per case that imports torch, imports the memory, "
            "makes it, adds its first rows, samples and updates once, with numba's cache of compiled kernels empty "
            "(`cold`: the first run after install compiles them) and then filled (`warm`: every later process loads "
            "them). Seconds; `first use` is the memory's part (import, make, add, sample, update), without Python's "
            "start and torch's import.\n\n"
            + table(['case', 'cache', 'import torch', 'import memory', 'make', 'add', 'sample', 'update',
                     'whole process', 'first use'], rows))

def frames_text(f: dict) -> str:
    "The frame memory's bytes, adds and samples against the peers' image memories"
    s, med = f['setup'], f['median']
    rows = [[f'`{k}`', fmt(v['bytes_per_transition']), fmt(v['adds_per_s']), f"{v['sample32_ms']:.3f}"]
            for k, v in med.items()]
    r = f['ratios']
    return (f"`bench/frames_bench.py`: 84x84 uint8 frames stacked by {s['stack']}, capacity {fmt(s['capacity'])}, "
            f"episodes of {fmt(s['episode'])} steps, {fmt(s['steps'])} single adds, then `sample({s['batch']})`; "
            f"median of {s['rounds']} round(s). Ours stores each frame once and builds the stacks at sample time; SB3 "
            f"stores both stacks of every transition.\n\n"
            + table(['library', 'bytes / transition', 'adds / s', f"sample({s['batch']}) ms"], rows)
            + f"\n\nOurs against the best peer: memory {r['memory_vs_best_peer']:.3f}x (lower is better), adds "
              f"{ratio(r['adds_vs_best_peer'])}, sampling {ratio(r['sample_speed_vs_best_peer'])} (higher is better).")

def atari_text(a: dict) -> str:
    "The compressed frame memory on real frames against the peers' compressed and uncompressed image memories"
    from atari_bench import table as atari_table
    return (f"`bench/atari_bench.py --quick`: {fmt(a['steps'])} random-policy steps of Pong through "
            f"`AtariPreprocessing` (84x84 grayscale, frame skip 4), fed to each memory in a fresh process one step "
            f"per call, {a['threads']} torch thread. Ours gets single frames and stacks 4 at sample time; the peers "
            f"get each transition's stacked observations. Bytes per transition in RAM are the growth of the process's "
            f"anonymous resident memory over the adds, or the arrays' `nbytes` where marked (the uncompressed SB3 and "
            f"TorchRL buffers, timed on fewer transitions).\n\n" + atari_table(a['rows']))

def agents_text(d: dict, speed: list) -> str:
    "Environment steps per second of the DQN, and CPU time per step of SAC and TD3, against SB3's"
    s, m = d['settings'], d['median']
    out = [f"`bench/dqn_bench.py`: the DQN on CartPole-v1 with rl-zoo's settings (batch {s['bs']}, train_freq "
           f"{s['train_freq']}, gradient_steps {s['gradient_steps']}, hidden {s['hidden']}), {fmt(s['steps'])} "
           f"environment steps, seeds {s['seeds']}: ours {fmt(m['ours']['steps_per_s'])} environment steps per second, "
           f"SB3 {fmt(m['sb3']['steps_per_s'])} ({ratio(d['ratio']['steps_per_s'])}). Returns after so short a run "
           f"are not comparable: the learning comparison is the DQN page's."]
    rows = [[r['algo'].upper(), r['env'], fmt(r['steps']), f"{r['ours_cpu_ms_per_step']:.2f}",
             f"{r['sb3_cpu_ms_per_step']:.2f}", ratio(r['ratio'])] for r in speed]
    out.append("`bench/continuous_bench.py --speed`: process CPU time per environment step (one gradient step each) "
               "of SAC and TD3 against SB3's with the same networks and settings, one torch thread (ours: the agents' "
               "default layers, `nn.Linear` and, for a first layer of few inputs, its subclass `NarrowLinear`):\n\n"
               + table(['agent', 'environment', 'steps', 'ours (ms)', 'SB3 (ms)', 'SB3 / ours'], rows))
    return '\n\n'.join(out)

def latest(speed: list) -> list:
    "The last of the speed results of each agent, environment and step count (the file keeps every sitting's)"
    last = {(r['algo'], r['env'], r['steps']): r for r in speed}
    return list(last.values())

def ratio_of(x: float, y: float) -> str: return ratio(x / y) if y else ''

def checkpoint_text(c: dict, mm: dict) -> str:
    "Saving and loading a full memory against the peers' formats, and a memory in memory-mapped files"
    ram, mapped = mm['ram'], mm['mapped']
    out = [f"With `storage_dir=` (on `ExperienceReplay`, its prioritized and LaBER forms, `FrameStorage` and "
           f"`FrameReplay`), the columns live in memory-mapped files instead of RAM. `bench/memmap_bench.py` adds "
           f"{mapped['stored_bytes'] / 2**30:.2f} GiB of 1 KiB transitions to each: in RAM the process's resident "
           f"memory grew by {ram['rss_growth'] / 2**30:.2f} GiB, with the files by "
           f"{mapped['rss_growth'] / 2**30:.2f} GiB; "
           f"sample(256) took {mapped['sample256_ms']:.3f} ms against {ram['sample256_ms']:.3f} ms in RAM "
           f"({mapped['sample256_ms'] / ram['sample256_ms']:.2f}x the time), and the adds ran at "
           f"{fmt(mapped['adds_per_s'])} against {fmt(ram['adds_per_s'])} transitions a second. The checkpoint of such "
           f"a memory is a manifest over those same files, with no copy.",
           f"`bench/checkpoint_bench.py` times saving and loading a full memory of {fmt(1_000_000)} low-dimensional "
           f"transitions and of {fmt(200_000)} 84x84 frames against the peers' own formats, each configuration in a "
           f"fresh process, {c['rounds']} round{'s' if c['rounds'] > 1 else ''} in a shuffled order per round. `load` "
           f"reads a checkpoint the page cache holds (each library's is read once, untimed, after its save); `cold "
           f"load` reads it again after its pages were flushed and dropped (`posix_fadvise(POSIX_FADV_DONTNEED)`), as "
           f"after "
           f"a reboot. Ours writes each array as a `.npy` file through the page cache, 4 MB at a time with its CRC-32, "
           f"and by default (`durable=True`) flushes every file and directory (`fsync`) before it swaps the new "
           f"directory in; `ours[no fsync]` is `save(dir, durable=False)`. No peer flushes its files: `sb3[fsync]` and "
           f"`tianshou[fsync]` are their saves followed by the `fsync` of the file and its directory that makes them "
           f"durable, the peers to compare a durable save with. Ours checks every byte it loads against its CRC-32; no "
           f"peer checks anything. Each cell gives the median over the rounds and, in brackets, the best round."]
    names = {'lowdim': '1M transitions', 'frames': '200k frames'}
    rows = []
    for case, t in c['results'].items():
        for i, (lib, v) in enumerate(t.items()):
            rows.append([names[case] if i == 0 else '', lib] + [f"{v[k]:.3f} ({v[k + '_best']:.3f})"
                                                                   for k in ('save_s', 'load_s', 'load_cold_s')]
                        + [fmt(v['bytes'] / 1e6, 1)])
    out.append(table(['case', 'library', 'save (s)', 'load (s)', 'cold load (s)', 'on disk (MB)'], rows, 2))
    ratios = []
    for case, t in c['results'].items():
        for mine, peers, what in (('ours', ('tianshou[fsync]', 'sb3[fsync]'), 'durable, against the durable peers'),
                                  ('ours[no fsync]', ('torchrl', 'tianshou', 'sb3', 'cpprb'), 'no fsync, against every '
                                   'peer that does not flush'), ('ours[per]', ('torchrl[per]',),
                                                                  "prioritized, against TorchRL's")):
            ps = [p for p in peers if p in t]
            if mine not in t or not ps: continue
            cells = []
            for k in ('save_s', 'load_s', 'load_cold_s'):
                best = min(ps, key=lambda p: t[p][k])
                cells.append(f"{ratio(t[best][k] / t[mine][k])} ({best})")
            ratios.append([f'{names[case]}, {what}', *cells])
    out.append("Ours as a ratio of the fastest peer's speed (the peer's median time over ours: above 1, ours is "
               "faster):\n\n" + table(['', 'save', 'load', 'cold load'], ratios))
    o = c['results']['lowdim'].get('ours', {})
    if 'save_peak_growth' in o:
        out.append(f"Saving the {fmt(o['bytes'] / 1e6)} MB low-dimensional memory grew the process's peak resident "
                   f"memory by {fmt(o['save_peak_growth'] / 1e6)} MB (no copy of the storage is made), loading it by "
                   f"{fmt(o['load_peak_growth'] / 1e6)} MB, the memory's own size and the pieces read.")
    return '\n\n'.join(out)

def ray_text(r: dict) -> str:
    "Inserts and samples of the sharded memory on Ray against one memory in this process and TorchRL's Ray buffer"
    s, res = r['settings'], r['results']
    one = next(x for x in res if x['kind'] == 'one memory (this process)')
    ins = [[x['shards'], x['writers'], fmt(x['insert_rows_s'])] for x in res
           if x['kind'] == 'RayReplay' and 'insert_rows_s' in x]
    smp = {(x['shards'], x['prefetch']): x['sample_batches_s'] for x in res
           if x['kind'] == 'RayReplay' and 'sample_batches_s' in x}
    srows = [[m, fmt(smp[m, 0]), fmt(smp[m, 2]), ratio(smp[m, 2] / smp[m, 0])] for m in sorted({m for m, _ in smp})]
    trl = {x['kind']: x for x in res if x['kind'].startswith('TorchRL')}
    tu, tp = trl.get('TorchRL RayReplayBuffer (uniform)', {}), trl.get('TorchRL RayReplayBuffer (prioritized)', {})
    dqn = {x['actors']: x['env_steps_s'] for x in res if x['kind'].startswith('dqn')}
    one_shard = next(x['insert_rows_s'] for x in res if x['kind'] == 'RayReplay' and x.get('shards') == 1
                     and x.get('writers') == 1)
    out = [f"`bench/ray_bench.py --quick`: a prioritized memory of {fmt(100_000)} CartPole-sized rows split evenly "
           f"over 1, 2 or 4 `RayReplay` shards, on Ray started locally with `num_cpus=2` on this 2-core machine, so "
           f"the writers, the shards and the driver share the same two cores: these are per-shard costs, not a scaling "
           f"curve. Writers insert batches of 64 ({s['n_write']} per writer); a sample is 256 rows and its TD errors "
           f"sent back ({s['n_sample']} samples, after a fill of {fmt(s['fill'])} rows).",
           'Inserts (rows per second over all writers):\n\n' + table(['shards', 'writers', 'rows / s'], ins),
           'Samples with their TD updates (batches per second), without and with prefetch 2 and asynchronous TD '
           'updates:\n\n' + table(['shards', 'no prefetch', 'prefetch 2', 'prefetch gain'], srows),
           f"One `PrioritizedExperienceReplay` in this process took {fmt(one['insert_rows_s'])} rows/s (its timed "
           f"loop also makes each batch, which the Ray writers send ready-made) and sampled "
           f"{fmt(one['sample_batches_s'])} batches/s with their TD updates, "
           f"{ratio(one['sample_batches_s'] / smp[1, 2])} one shard's rate with prefetch: each Ray sample is calls "
           f"between processes. TorchRL's "
           f"`RayReplayBuffer` (one actor, blocking calls) took {fmt(tu.get('insert_rows_s', 0))} rows/s "
           f"(one shard of ours from one writer: {ratio_of(one_shard, tu.get('insert_rows_s', 0))}), sampled "
           f"{fmt(tu.get('sample_batches_s', 0))} uniform batches/s and "
           + (f"{fmt(tp['sample_batches_s'])} prioritized sample-and-update batches/s (ours with one shard and "
              f"prefetch: {ratio_of(smp[1, 2], tp['sample_batches_s'])})." if 'sample_batches_s' in tp else
              f"its prioritized sample-and-update failed ({tp.get('error', 'not run')}).")]
    if dqn:
        out.append(f"The DQN (`dqn_ray_learner`, 2 shards) stepped {fmt(dqn.get(0, 0))} environment steps/s in one "
                   f"process, " + ', '.join(f'{fmt(v)} with {k} collector{"s" if k > 1 else ""}'
                                             for k, v in dqn.items() if k) + " on the same two cores: more collectors "
                   "or shards are more processes on the same cores here. Scaling to more cores is not measured.")
    return '\n\n'.join(out)

def thread_ratios(t: dict) -> list:
    "Per workload of `bench/threads_bench.py`: its name, the median rates of one thread and the default, round ratios"
    out = []
    for kind, name in (('dqn', '`dqn_learner`'), ('learner', "the first tutorial's plain `Learner`")):
        d, o = t['runs'][f'{kind} threads=default'], t['runs'][f'{kind} threads=1']
        out.append((name, statistics.median(o), statistics.median(d), [b / a for a, b in zip(d, o)]))
    return out

def threads_note(t: dict, beside: dict|None = None) -> str:
    "What `bench/threads_bench.py`'s rounds say: one thread against torch's default, alone and beside busy processes"
    th, n = t['machine']['torch']['threads'], len(next(iter(t['runs'].values())))
    out = [f"The runs go in {n} round{'s' if n > 1 else ''}, the settings alternating, each in a fresh process; "
           f"torch's default here is {th} thread{'s' if th > 1 else ''}."]
    for res, when in ((t, 'With nothing else running'), (beside, None)):
        if res is None: continue
        if when is None: when = (f"Beside {res['beside']} busy process{'es' if res['beside'] > 1 else ''} (Python "
                                 f"spinning on a core, `--beside {res['beside']}`), as beside another job")
        out.append(f"{when}, one thread against the default (higher: one thread is faster): " + '; '.join(
            f"{name} {fmt(o)} against {fmt(d)} environment steps/s ({ratio(o / d)}; per round "
            f"{', '.join(ratio(x) for x in r)})" for name, o, d, r in thread_ratios(res)) + '.')
    out.append("`dqn_learner`, `run_forgetting` and the command line fit on one thread (`TorchThreads`, "
               "`torch_threads`, restored afterwards), which holds its speed when other work shares the cores and "
               "costs what the first figures say when nothing does. A `Learner` of your own chooses with "
               "`TorchThreads()` among its callbacks, or a fit inside `with torch_threads(1):`.")
    return ' '.join(out)

def dqn_sb3_text(learning: dict, lockstep: dict, speed: dict) -> str:
    "Our DQN against SB3's: the settings, the lockstep run, the returns over seeds, the speed"
    from dqn_bench import curve_means, SOLVED
    from scipy.stats import mannwhitneyu
    z = speed['settings']
    out = [f"**Against Stable-Baselines3.** `bench/dqn_bench.py` trains Stable-Baselines3's DQN and ours with "
           f"rl-baselines3-zoo's CartPole hyperparameters, the same in both: two layers of {z['hidden'][0]}, torch's "
           f"Adam at a constant {z['lr']}, batches of {z['bs']} from a memory of {fmt(z['buffer'])} warmed up with "
           f"{fmt(z['learning_starts'])} uniformly random steps, ε from 1 to {z['final_eps']} over the first "
           f"{z['exploration_fraction']:.0%} of the steps, {z['gradient_steps']} gradient steps after every "
           f"{z['train_freq']} environment steps (SB3's `train_freq` and `gradient_steps`; ours "
           f"`dqn_learner(train_every={z['train_freq']}, grad_steps={z['gradient_steps']})`), gradients clipped at "
           f"norm {z['max_grad_norm']:g}, one-step targets without Double DQN."]
    ls, first = lockstep['settings'], lockstep['first']
    same = (f"the two runs are the same bit for bit: the same actions, the same stored transitions and the same "
            f"weights after every one of {lockstep['bursts']} training bursts ({fmt(lockstep['actions'])} steps, "
            f"{fmt(lockstep['bursts'] * z['gradient_steps'])} gradient steps)" if first is None else
            f"the two runs first differ at burst {first} (first different action at step {lockstep['first_action']})")
    out.append(f"`bench/dqn_lockstep.py` runs the two side by side from the same initial weights, with the same coin "
               f"for ε and the same random action at every environment step and the same replayed rows at every "
               f"gradient step. With torch's default Adam in both (`--unfused`, seed {ls['seed']}), {same}; "
               f"`tests/test_dqn_vs_sb3.py` checks the first three bursts. Our fused Adam rounds differently in the "
               f"last bits, and Adam's normalization of near-zero gradients amplifies that into a different run, as "
               f"a different seed would be.")
    runs = learning['runs']
    steps = learning['settings']['steps']
    ret = {k: [r['eval_mean'] for r in v] for k, v in runs.items()}
    u = mannwhitneyu(ret['sb3'], ret['ours'], alternative='two-sided')
    seeds = [r['seed'] for r in runs['ours']]
    rows = [[name, ', '.join(f'{x:g}' for x in ret[k]), f"{sum(x >= SOLVED for x in ret[k])} of {len(ret[k])}",
             fmt(statistics.median(ret[k]), 1), fmt(statistics.fmean(ret[k]), 1)]
            for k, name in (('sb3', f"Stable-Baselines3 {learning['machine']['versions'].get('stable-baselines3')}"),
                            ('ours', 'fastrl_replay'))]
    curves = {k: np.nanmean([curve_means(r['curve'], steps) for r in v], 0) for k, v in runs.items()}
    cpu = {k: statistics.median(r['cpu_steps_per_s'] for r in v) for k, v in runs.items()}
    verdict = ('the two distributions cannot be told apart at the 5% level' if u.pvalue >= 0.05 else
               'the two distributions differ at the 5% level')
    out.append(f"Greedy return at "
               f"{fmt(steps)} steps over {len(seeds)} seeds ({seeds[0]} to {seeds[-1]}; the two libraries alternate "
               f"seed by seed in one process):\n\n"
               + table(['', 'greedy return by seed', f'solved (≥ {SOLVED:.0f})', 'median', 'mean'], rows, 2)
               + f"\n\nMann-Whitney U = {u.statistic:.1f}, two-sided p = {u.pvalue:.2f} on the greedy returns: "
                 f"{verdict}. The mean training return per 5,000 steps went "
                 f"{', '.join(f'{x:.0f}' for x in curves['sb3'])} for SB3 and "
                 f"{', '.join(f'{x:.0f}' for x in curves['ours'])} for ours. In these runs ours trained at "
                 f"{fmt(cpu['ours'])} and SB3 at {fmt(cpu['sb3'])} environment steps per CPU second at the median "
                 f"({ratio(cpu['ours'] / cpu['sb3'])}).")
    sm, sr = speed['median'], speed['ratio']
    out.append(f"Speed on the quiet machine (`bench/dqn_bench.py --quick`: seed {speed['settings']['seeds'][0]}, "
               f"{fmt(speed['settings']['steps'])} steps, the libraries alternating in one process): ours "
               f"{fmt(sm['ours']['steps_per_s'])} environment steps per second, SB3 {fmt(sm['sb3']['steps_per_s'])} "
               f"({ratio(sr['steps_per_s'])}).")
    out.append("Where the speed comes from: `TransitionLoader` serves each batch of transitions whole, as a fastai "
               "`DataLoader` with no per-item pipeline; one environment steps without a vector wrapper; `update_td` "
               "is one compiled pass; and `dqn_learner` trains with `LeanLearner`, a `Learner` whose events go only "
               "to the callbacks that handle them, recorded by a `LeanRecorder`, which trains and records "
               "identically.")
    return '\n\n'.join(out)

ATARI_PROSE = [
    "Real frames: random-policy steps of each game through `AtariPreprocessing` (84x84 grayscale, frame skip 4, v5 "
    "sticky actions), fed to each memory in a fresh process, one at a time, one step per call, with torch on one "
    "intra-op thread in every library's process (`--threads 1`, training's setting). Each row holds the transitions "
    "it states: {counts}. This library's memories get single frames and build stacks of 4 at sample time "
    "(`sample(32)` returns 32 transitions with their stacked states and next states); the peers get the stacked "
    "observation of each transition (and the stacked next observation, but for SB3's `optimize_memory_usage`). Bytes "
    "per transition are the growth of the process's anonymous resident memory over the adds (everything the memory "
    "allocates: arrays, Python objects, heap fragments), but for the uncompressed SB3 and TorchRL buffers, whose "
    "bytes are the exact `nbytes` of their arrays, which grow linearly with the capacity. TorchRL's "
    "`CompressedListStorage` compresses each tensor of an item alone, with its default codec (zlib on Python 3.11) "
    "or zstd level 3 as its `compression_fn`; its own checkpoint, `rb.dumps`, memory-maps one file per tensor of "
    "every item and fails past the kernel's map limit, so its checkpoint is `torch.save(rb.state_dict())` of its "
    "first 1,000 transitions, its size and time scaled, as the table marks.",
    "The compressed tier, `CompressedFrameStorage`: blocks of 8 consecutive frames, each a standard zstd frame at "
    "level 3 written with the `zstandard` package's public API, with a dictionary of 32 KiB trained once on the "
    "first 2,048 frames (the blocks written before it are compressed again with it). An add stores the frame in the "
    "open block, kept decoded, and compresses the block once its 8th frame is written. A sample takes the open "
    "block's rows as they are, sorts the others by block and row, decodes each block it needs once, whole, with one "
    "`zstandard` call, and copies each run of consecutive rows into the batch as one slice; reads stay on the "
    "calling thread. A transition needs 5 consecutive frames (a stack of 4 and the next frame), which lie in one "
    "block of 8 half the time and in two otherwise, so a sample decodes about one and a half blocks a transition "
    "where the uncompressed `FrameStorage` copies 5 frames."]

def atari_replay_page(run: Path) -> tuple:
    "Page 11's text, results and rows from the one-thread results `t1_<game>*.json` of `run` (one file or more a game)"
    from atari_bench import GAMES, NAMES, table as atari_table, goals
    res = [json.loads(f.read_text()) for g in GAMES for f in sorted(run.glob(f't1_{g}*.json'))]
    rows = [r for x in res for r in x['rows']]
    held = {}
    for r in rows: held.setdefault(r['transitions'], {}).setdefault(r['library'], None)
    counts = '; '.join(f"{fmt(n)} for {', '.join(dict.fromkeys(NAMES[l].split(' (')[0] for l in libs))}"
                       for n, libs in sorted(held.items(), reverse=True))
    one, _ = goals(rows, [])
    return '\n\n'.join([ATARI_PROSE[0].format(counts=counts), atari_table(rows), one, ATARI_PROSE[1]]), res, rows

def builders(results: Path) -> dict:
    "Each page's name, title, command, text and results, by page number, made when called"
    R = lambda n: json.loads((results/n).read_text())
    def p04():
        replay, per = R('replay_bench.json'), R('per_bench.json')
        return ('04_replay_speed', 'Replay speed: add and sample against cpprb, SB3, TorchRL, rlox and Tianshou',
                'bench/avx2.sh python bench/replay_bench.py --quick; bench/avx2.sh python bench/per_bench.py --quick',
                replay_text(replay, per), [replay, per], {})
    def p10():
        a = R('adapters_bench.json')
        return ('10_one_transition', 'One transition and the adapters against their peers',
                'bench/avx2.sh python bench/adapters_bench.py --quick', adapters_text(a), [a], {})
    def p17():
        f = R('first_use_bench.json')
        return ('17_first_use', 'First use of a memory in a new process',
                'bench/avx2.sh python bench/first_use_bench.py --quick', first_use_text(f), [f], {})
    def p18():
        fr, at = R('frames_bench.json'), R('atari_run/t1_Pong.json')
        return ('18_frame_memory', 'Frame memory against cpprb, Tianshou, SB3 and TorchRL',
                'bench/avx2.sh python bench/frames_bench.py --quick; bench/avx2.sh python bench/atari_bench.py --quick '
                '--out bench/results/atari_run/t1_Pong.json', frames_text(fr) + '\n\n' + atari_text(at), [fr, at], {})
    def p19():
        d, speed = R('dqn_bench.json'), latest(read_results(results/'speed.jsonl'))
        return ('19_agent_speed', 'Agent speed against SB3: DQN, SAC and TD3',
                'bench/avx2.sh python bench/dqn_bench.py --quick; bench/avx2.sh python bench/continuous_bench.py '
                '--speed sac|td3 --steps 500 --out bench/results/speed.jsonl', agents_text(d, speed), [d, *speed], {})
    def p03():
        lock, speed = R('dqn_lockstep.json'), R('dqn_bench.json')
        parts = [json.loads(f.read_text()) for f in sorted(results.glob('dqn_seeds*.json'))]  # seeds run in parts
        learning = dict(parts[0], runs={k: sorted((r for x in parts for r in x['runs'][k]), key=lambda r: r['seed'])
                                        for k in ('sb3', 'ours')})
        return ('03_dqn_vs_sb3', 'DQN against Stable-Baselines3',
                f"python bench/dqn_bench.py --seeds {' '.join(str(r['seed']) for r in learning['runs']['ours'])} --out "
                'bench/results/dqn_seeds*.json; python '
                'bench/dqn_lockstep.py --seed 0 --steps 8000 --unfused; bench/avx2.sh python bench/dqn_bench.py '
                '--quick',
                dqn_sb3_text(learning, lock, speed), [*parts, lock, speed], {})
    def p05():
        c, mm = R('checkpoint_bench.json'), R('memmap_bench.json')
        return ('05_checkpoints', 'Saving and loading full memories, and memories in files',
                'bench/avx2.sh python bench/checkpoint_bench.py --quick; bench/avx2.sh python bench/memmap_bench.py',
                checkpoint_text(c, mm), [c, mm], {})
    def p06():
        r = R('ray_bench.json')
        return ('06_ray', 'Sharded replay on Ray', 'bench/avx2.sh python bench/ray_bench.py --quick', ray_text(r),
                [r], {})
    def p08():
        t, n = R('threads.json'), lambda t: len(next(iter(t['runs'].values())))
        b = R('threads_beside.json') if (results/'threads_beside.json').exists() else None
        cmd = f"bench/avx2.sh python bench/threads_bench.py --repeats {n(t)}" + (
            '' if b is None else f"; bench/avx2.sh python bench/threads_bench.py --repeats {n(b)} --beside "
                                 f"{b['beside']} --out bench/results/threads_beside.json")
        beside = {} if b is None else {f"{k}, beside {b['beside']} busy": v for k, v in b['runs'].items()}
        extra = dict(runs=t['runs'] | beside, units=t['units'], note=threads_note(t, b))
        return ('08_threads', 'Torch threads: the default against one', cmd, None, [t] + ([b] if b else []), extra)
    def p09():
        c = R('09_cleanrl_swap.json')
        cmd = 'bench/avx2.sh ' + c['command'].replace('; python', '; bench/avx2.sh python')
        return ('09_cleanrl_swap', c['title'], cmd,
                c['text'], list(c['results'].values()), dict(torch=c['torch'], gymnasium=c['gymnasium'],
                                                              results=c['results']))
    def p11():
        text, res, rows = atari_replay_page(results/'atari_run11')
        cmd = '; '.join(f"bench/avx2.sh python bench/atari_bench.py --games {x['rows'][0]['game']} --steps "
                        f"{x['steps']} --libs {' '.join(r['library'] for r in x['rows'])}" for x in res)
        return ('11_atari_replay', 'Atari replay: compressed frames against the peers', cmd, text, res, dict(rows=rows))
    return dict(zip(('04', '10', '17', '18', '19', '03', '05', '06', '08', '09', '11'),
                    (p04, p10, p17, p18, p19, p03, p05, p06, p08, p09, p11)))

QUIET = ('04', '10', '17', '18', '19')  # bench_quiet.sh's pages; the others come from bench_quiet_more.sh's results

def main(results: Path, conditions: str, pages: list, into: Path):
    make = builders(results)
    for n in pages:
        name, title, command, text, res, extra = make[n]()
        page(name, title, command, text, res, conditions, into, **extra)

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--results', type=Path, default=BENCH/'results', help='the results files of one sitting')
    ap.add_argument('--conditions', default=f'{AVX2}; nothing else ran on the machine (its load is in the record)')
    ap.add_argument('--pages', nargs='+', default=list(QUIET), help='the pages to write (03 05 06 08 09 11: the '
                    "results of bench_quiet_more.sh, with dqn_seeds.json and dqn_lockstep.json for 03)")
    ap.add_argument('--into', type=Path, default=BENCH/'stored', help='the folder the stored pages go to')
    main(**vars(ap.parse_args()))
