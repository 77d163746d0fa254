"""What a memory's lock costs one thread: `replay_bench.py` and `per_bench.py` (quick), run alternately against two
checkouts of the library, the one without the lock (`--before`) and the one with it (`--after`), in one run of this
script, so that both see the same machine load.

Each pair of runs goes before, after, then after, before (so neither always runs first). Only our rows are compared:
the median over the runs of each operation, and after / before as a throughput ratio (1.00: no cost; 0.95: 5% slower).
Results are printed and written to bench/results/lock_cost.json.

Run from the repository root:

    .venv/bin/python bench/lock_cost.py --before ../main --after .          # 2 pairs, about 8 minutes
"""
import argparse, json, os, statistics, subprocess, sys, tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE/'results'/'lock_cost.json'
BENCHES = {'replay_bench.py': ['--dims', '17', '--peers', 'cpprb', '--rounds', '1'], 'per_bench.py': ['--peers', 'cpprb', '--rounds', '1']}

def ours(script:str, report:dict) -> dict:
    "Our operations in a report, as throughputs (higher is faster): name -> value"
    if script == 'replay_bench.py':
        med = report['dims']['17']['median']
        return {f'{n} {op}': med[n][op] for n in ('ours', 'ours[numpy]', 'ours[append]') for op in ('add1', 'add256', 'sample')}
    med = report['median']['ours']
    return {f'per {op}': (med[op] if op == 'add256' else 1e3 / med[op]) for op in ('add256', 'sample', 'sample_update')}  # ms per call as calls/s

def run(script:str, root:Path, tmp:Path) -> dict:
    "One quick run of `script` importing the library from `root`"
    env = {**os.environ, 'PYTHONPATH': str(root)}
    where = subprocess.run([sys.executable, '-c', 'import fastrl_replay; print(fastrl_replay.__file__)'], env=env, cwd=HERE,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).resolve().is_relative_to(root.resolve()), f'{root} is not the library imported: {where}'
    out = tmp/'out.json'
    subprocess.run([sys.executable, str(HERE/script), '--quick', '--out', str(out), *BENCHES[script]], env=env, cwd=HERE,
                   check=True, stdout=subprocess.DEVNULL)
    return ours(script, json.loads(out.read_text()))

def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--before', type=Path, required=True, help='checkout of the library without the lock')
    p.add_argument('--after', type=Path, required=True, help='checkout of the library with the lock')
    p.add_argument('--pairs', type=int, default=2, help='before/after pairs of runs of each benchmark')
    p.add_argument('--out', type=Path, default=OUT)
    args = p.parse_args()
    runs = {'before': [], 'after': []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            order = ('before', 'after') if i % 2 == 0 else ('after', 'before')
            for which in order:
                res = {}
                for script in BENCHES: res.update(run(script, getattr(args, which), Path(tmp)))
                runs[which].append(res)
                print(f'pair {i + 1}/{args.pairs}: {which} done', flush=True)
    med = {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}
    ratio = {k: med['after'][k] / med['before'][k] for k in med['before']}
    print(f'\n{"operation":<22}{"before /s":>14}{"after /s":>14}{"after/before":>14}')
    for k in ratio: print(f'{k:<22}{med["before"][k]:>14,.0f}{med["after"][k]:>14,.0f}{ratio[k]:>14.3f}')
    print(f'median ratio {statistics.median(ratio.values()):.3f}')
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(runs=runs, median=med, ratio=ratio, pairs=args.pairs), indent=1))

if __name__ == '__main__': main()
