"""Stored results made from the results files of one sitting: `python bench/pages.py [--results DIR]`.

Each page below reads what a benchmark script wrote under `bench/results/` (its figures and its `machine` records) and
writes `bench/stored/<page>.json` with its title, date, records, command and text: the tables are the results' own
figures, each ratio taken against the peers of the same run. Run the scripts first (see each page's `command`), then
this, then `python bench/benchmarks_page.py` to look at the page."""
import argparse, json, statistics
from pathlib import Path
from machine import records, read_results

BENCH = Path(__file__).resolve().parent
AVX2 = ("run under `bench/avx2.sh`, which limits torch, oneDNN, MKL, NumPy and numba to AVX2 as on an AVX2-only CPU "
        "(the cores stay Zen 5's)")

def fmt(x, digits=0) -> str: return f'{x:,.{digits}f}'
def ratio(x) -> str: return f'{x:.2f}x'

def table(head: list, rows: list) -> str:
    "A markdown table, the first column left-aligned and the others right-aligned"
    align = '|---|' + '---:|' * (len(head) - 1)
    return '\n'.join([f"| {' | '.join(head)} |", align] + [f"| {' | '.join(map(str, r))} |" for r in rows])

def page(name: str, title: str, command: str, text: str, results: list, conditions: str, **extra):
    "Write `bench/stored/<name>.json`: its date is the first record's start"
    rec = records(results)
    date = rec[0]['started'] if rec and rec[0] else None
    out = dict(title=title, date=date, machine=rec[0] if len(rec) == 1 else rec, conditions=conditions,
               command=command, text=text, **extra)
    (BENCH/'stored'/f'{name}.json').write_text(json.dumps(out, indent=1, ensure_ascii=False) + '\n')
    print(f'wrote bench/stored/{name}.json')

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
               "of SAC and TD3 against SB3's with the same networks and settings, `nn.Linear` layers, one torch "
               "thread:\n\n" + table(['agent', 'environment', 'steps', 'ours (ms)', 'SB3 (ms)', 'SB3 / ours'], rows))
    return '\n\n'.join(out)

def main(results: Path, conditions: str):
    R = lambda n: json.loads((results/n).read_text())
    replay, per = R('replay_bench.json'), R('per_bench.json')
    page('04_replay_speed', 'Replay speed: add and sample against cpprb, SB3, TorchRL, rlox and Tianshou',
         'bench/avx2.sh python bench/replay_bench.py --quick; bench/avx2.sh python bench/per_bench.py --quick',
         replay_text(replay, per), [replay, per], conditions)
    a = R('adapters_bench.json')
    page('10_one_transition', 'One transition and the adapters against their peers',
         'bench/avx2.sh python bench/adapters_bench.py --quick', adapters_text(a), [a], conditions)
    f = R('first_use_bench.json')
    page('17_first_use', 'First use of a memory in a new process',
         'bench/avx2.sh python bench/first_use_bench.py --quick', first_use_text(f), [f], conditions)
    fr, at = R('frames_bench.json'), R('atari_run/t1_Pong.json')
    page('18_frame_memory', 'Frame memory against cpprb, Tianshou, SB3 and TorchRL',
         'bench/avx2.sh python bench/frames_bench.py --quick; bench/avx2.sh python bench/atari_bench.py --quick '
         '--out bench/results/atari_run/t1_Pong.json', frames_text(fr) + '\n\n' + atari_text(at), [fr, at],
         conditions)
    d, speed = R('dqn_bench.json'), read_results(results/'speed.jsonl')
    page('19_agent_speed', 'Agent speed against SB3: DQN, SAC and TD3',
         'bench/avx2.sh python bench/dqn_bench.py --quick; bench/avx2.sh python bench/continuous_bench.py --speed '
         'sac|td3 --steps 500 --out bench/results/speed.jsonl', agents_text(d, speed), [d, *speed], conditions)

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--results', type=Path, default=BENCH/'results', help='the results files of one sitting')
    ap.add_argument('--conditions', default=f'{AVX2}; nothing else ran on the machine (its load is in the record)')
    main(**vars(ap.parse_args()))
