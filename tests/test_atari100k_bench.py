"""The Atari-100k benchmark script (`bench/atari100k_bench.py`): its statistics, the table it builds from run folders,
what `run` does with a folder, the stored result, and the benchmarks page that shows every stored result."""
import json, re, statistics, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/'bench'))
import atari100k_bench as bench, benchmarks_page as page  # noqa: E402

STORED = ROOT/'bench'/'stored'/'16_atari100k.json'

def test_hns():
    "0 at the random agent's score, 1 at the human's, linear between and beyond"
    assert bench.hns('Pong', -20.7) == 0 and bench.hns('Pong', 14.6) == pytest.approx(1)
    assert bench.hns('Breakout', 16.1) == pytest.approx((16.1 - 1.7) / (30.5 - 1.7))
    assert bench.hns('Krull', 2851.5) == pytest.approx((2851.5 - 1598.0) / (2665.5 - 1598.0))  # DER above human: > 1
    assert bench.hns('Boxing', -1.9) == pytest.approx(-2 / 12)

def test_median_and_iqm():
    "The median of an even count is the middle pair's mean; IQM drops int(n/4) from each end of the sorted values"
    assert bench.median([3, 1, 2]) == 2 and bench.median([4, 1, 3, 2]) == 2.5 and bench.median([]) is None
    xs = [0.9, -0.1, 0.3, 100.0, 0.2, 0.5, -50.0, 0.4]  # sorted: -50, -0.1, 0.2, 0.3, 0.4, 0.5, 0.9, 100
    assert bench.iqm(xs) == pytest.approx((0.2 + 0.3 + 0.4 + 0.5) / 4)
    assert bench.iqm(list(range(10))) == pytest.approx(statistics.mean(range(2, 8)))  # int(2.5) = 2 cut each end
    assert bench.iqm([7.0]) == 7.0 and bench.iqm([1, 2, 3]) == 2 and bench.iqm([]) is None
    scipy = pytest.importorskip('scipy.stats')
    assert bench.iqm(xs) == pytest.approx(scipy.trim_mean(xs, 0.25))

def test_training_returns_in_either_shape():
    "Pairs, a dict of lists and dicts per episode read the same; bins hold the mean of the episodes ending in them"
    pairs = [[900, -21.0], [1800, -20.0], [2500, -19.0], [9_999, -15.0]]
    as_dict = dict(steps=[p[0] for p in pairs], returns=[p[1] for p in pairs])
    assert bench.episodes(pairs) == bench.episodes(as_dict) == [(900, -21.), (1800, -20.), (2500, -19.), (9999, -15.)]
    assert bench.episodes([dict(step=5, **{'return': 1.5})]) == [(5, 1.5)] and bench.episodes(None) == []
    assert bench.episodes([[r, s] for s, r in pairs]) == bench.episodes(pairs)  # `game_returns`: [return, step]
    rising = [[3.0, 800], [5.0, 1700]]  # returns that never fall: the larger column is the steps
    assert bench.episodes(rising) == bench.episodes([[800, 3.0], [1700, 5.0]]) == [(800, 3.0), (1700, 5.0)]
    assert bench.binned(bench.episodes(pairs), 1000, 10) == [-21.0, -20.0, -19.0] + [None] * 6 + [-15.0]

def _metrics(run: Path, game: str, seed: int, evals: list, train_returns, **kw):
    run.mkdir(parents=True)
    (run/'run.json').write_text(json.dumps(dict(env=f'ALE/{game}-v5', seed=seed, steps=100_000)))
    (run/'checkpoint').mkdir()
    m = dict(env=f'ALE/{game}-v5', algo='der', seed=seed, eval_returns=evals, eval_episodes=len(evals),
             eval_mean=statistics.mean(evals), env_steps=100_000, wall_s=7200.0, memory_s=720.0,
             memory_bytes_per_transition=7100.5, train_returns=train_returns) | kw
    (run/'metrics.json').write_text(json.dumps(m))

def _unfinished(run: Path, game: str, seed: int, steps=None):
    run.mkdir(parents=True)
    (run/'run.json').write_text(json.dumps(dict(env=f'ALE/{game}-v5', seed=seed, steps=100_000)))
    if steps is not None:
        (run/'checkpoint').mkdir()
        (run/'checkpoint'/'checkpoint.json').write_text(json.dumps(dict(state=dict(env_steps=steps))))

@pytest.fixture
def runs(tmp_path):
    "Finished runs of Pong (seeds 1 and 0, written in that order) and Breakout; Boxing and Krull not finished"
    r = tmp_path/'runs'
    _metrics(r/'Pong/seed1/der-ALE/Pong-v5-seed1-20260101-000000', 'Pong', 1, [-15.0, -17.0],
             dict(steps=[30_000, 95_000], returns=[-21.0, -16.0]), wall_s=3600.0, memory_s=900.0)
    _metrics(r/'Pong/seed0/der-ALE/Pong-v5-seed0-20260101-000000', 'Pong', 0, [-20.0, -19.0, -21.0],
             [[10_000, -21.0], [50_000, -20.0]])
    _metrics(r/'Breakout/seed0/der-ALE-Breakout-v5-seed0-20260101-000000', 'Breakout', 0, [10.0, 12.0], [[5_000, 1.0]])
    _unfinished(r/'Boxing/seed0/der-ALE/Boxing-v5-seed0-20260101-000000', 'Boxing', 0, steps=45_000)
    _unfinished(r/'Krull/seed2/der-ALE/Krull-v5-seed2-20260101-000000', 'Krull', 2)
    return r

def test_table_scores_finished_runs_only(runs):
    res = bench.table(runs)
    rows = {r['game']: r for r in res['rows']}
    assert list(rows) == ['Pong', 'Breakout', 'Boxing', 'Freeway', 'Krull', 'RoadRunner']  # the six, published order
    pong = rows['Pong']
    assert pong['seed_numbers'] == [0, 1] and pong['seeds'] == [-20.0, -16.0]  # seed order; mean of eval_returns
    assert pong['mean'] == -18.0 and pong['hns'] == pytest.approx([0.7 / 35.3, 4.7 / 35.3])
    published = (pong['random'], pong['human'], pong['der'], pong['otrainbow'], pong['spr'])
    assert published == (-20.7, 14.6, -19.3, 1.3, -5.9)
    assert pong['published_hns']['spr'] == pytest.approx(14.8 / 35.3)
    assert pong['memory_share'] == [0.1, 0.25] and pong['wall_s_per_100k'] == [7200.0, 3600.0]
    assert pong['bytes_per_transition'] == [7100.5, 7100.5] and pong['eval_episodes'] == [3, 2]
    assert pong['curves']['bin_steps'][:2] == [10_000, 20_000] and pong['curves']['bin_steps'][-1] == 100_000
    assert pong['curves']['returns'][0][0] == -21.0 and pong['curves']['returns'][0][4] == -20.0
    assert pong['curves']['returns'][1][2] == -21.0 and pong['curves']['returns'][1][9] == -16.0
    assert rows['Breakout']['seeds'] == [11.0] and rows['RoadRunner']['der'] == 9600.0
    assert rows['Boxing']['seeds'] == [] and rows['Boxing']['hns_mean'] is None and rows['Krull']['seeds'] == []
    unfinished = {(u['game'], u['seed']): u for u in res['unfinished']}
    assert unfinished[('Boxing', 0)]['env_steps'] == 45_000 and unfinished[('Krull', 2)]['status'] == 'in progress'
    assert len(unfinished) == 2

def test_table_aggregates(runs):
    "Mean and median over games of each game's mean HNS, IQM of all game x seed HNS; the published on the same games"
    agg = bench.table(runs)['aggregates']
    pong = [0.7 / 35.3, 4.7 / 35.3]
    breakout = (11.0 - 1.7) / 28.8
    assert agg['games'] == ['Pong', 'Breakout'] and agg['runs'] == 3
    assert agg['ours']['mean_hns'] == pytest.approx((statistics.mean(pong) + breakout) / 2)
    assert agg['ours']['median_hns'] == pytest.approx((statistics.mean(pong) + breakout) / 2)  # two games
    assert agg['ours']['iqm_hns'] == pytest.approx(statistics.mean(sorted(pong + [breakout])))  # 3 values: none cut
    assert agg['der']['mean_hns'] == pytest.approx((1.4 / 35.3 + 0.2 / 28.8) / 2)
    assert agg['spr']['median_hns'] == pytest.approx((14.8 / 35.3 + 15.4 / 28.8) / 2)
    assert agg['games_ours_at_least_der'] == 2  # Pong -18.0 >= -19.3; Breakout 11.0 >= 1.9

def test_table_text_and_figures(runs):
    res = bench.table(runs)
    assert 'Atari-100k' in res['title'] and res['protocol']['agent_steps'] == 100_000
    assert res['protocol']['seeds'] == [0, 1] and res['protocol']['eval_episodes'] == [2, 3]
    assert res['full_benchmark']['der'] == dict(mean=0.285, median=0.161)
    assert '| Pong | -20.7 | 14.6 | -19.3 | 1.3 | -5.9 | 0: -20.0, 1: -16.0 | -18.0 |' in res['text']
    assert 'Boxing seed 0 (checkpoint at 45,000 steps)' in res['text'] and 'Krull seed 2 (in progress)' in res['text']
    assert len(res['figures']) == 2
    curves = res['figures'][0]
    assert {t['name'] for t in curves['data']} == {'seed 0', 'seed 1'} and len(curves['data']) == 3
    html = page.figure_html(curves)
    assert 'plotly-graph-div' in html and 'cdn.plot.ly' not in html and '<script src=' not in html

def test_games_ours_at_least_der_counts(tmp_path):
    r = tmp_path/'runs'
    _metrics(r/'Pong/seed0/a', 'Pong', 0, [-19.3], [])
    _metrics(r/'Freeway/seed0/a', 'Freeway', 0, [27.8], [])
    res = bench.table(r)
    assert res['aggregates']['games_ours_at_least_der'] == 1 and res['unfinished'] == []
    assert res['rows'][0]['curves']['returns'] == [[None] * 10]

def test_run_plan(tmp_path):
    "`run` starts a new run, resumes one that has a checkpoint and no metrics.json, and leaves a finished one alone"
    root = tmp_path/'Pong'/'seed0'
    assert bench.plan(root) == ('start', None)
    _unfinished(root/'der-ALE'/'Pong-v5-seed0-20260101-000000', 'Pong', 0)  # stopped before its first checkpoint
    assert bench.plan(root) == ('start', None)
    _unfinished(root/'der-ALE'/'Pong-v5-seed0-20260101-000100', 'Pong', 0, steps=5_000)
    assert bench.plan(root) == ('resume', root/'der-ALE'/'Pong-v5-seed0-20260101-000100')
    (root/'der-ALE'/'Pong-v5-seed0-20260101-000100'/'metrics.json').write_text('{}')
    assert bench.plan(root) == ('done', root/'der-ALE'/'Pong-v5-seed0-20260101-000100')

def test_run_commands(tmp_path):
    root = bench.run_root(tmp_path, 'Breakout', 3)
    assert root == tmp_path/'Breakout'/'seed3'
    start = bench.train_command('start', root, 'Breakout', 3, 100_000, 5_000)
    assert start[1:] == ['train', '--algo', 'der', '--env', 'ALE/Breakout-v5', '--seed', '3', '--steps', '100000',
                         '--checkpoint-every', '5000', '--out', str(root), '--quiet']
    assert bench.train_command('resume', root, 'Breakout', 3, 100_000, 5_000, root/'r')[1:] == \
        ['train', '--resume', str(root/'r'), '--quiet']
    assert bench.thread_env(3)['OMP_NUM_THREADS'] == '3'

def test_run_leaves_a_finished_run_alone(tmp_path, monkeypatch):
    "A finished run starts no process"
    _metrics(tmp_path/'Pong/seed0/a', 'Pong', 0, [-19.0], [])
    monkeypatch.setattr(bench.subprocess, 'run', lambda *a, **k: pytest.fail('started a process'))
    assert bench.run('Pong', 0, tmp_path) == tmp_path/'Pong/seed0/a'

def test_stored_result():
    "The stored result (once written) names Atari-100k and has a row per game with its seeds"
    if not STORED.exists(): pytest.skip('bench/stored/16_atari100k.json not written yet')
    res = json.loads(STORED.read_text())
    assert 'Atari-100k' in res['title'] and res['rows'] and all('game' in r and 'seeds' in r for r in res['rows'])
    assert all(len(r['seeds']) == len(r['seed_numbers']) for r in res['rows'])

def test_every_stored_result_renders():
    "Each stored result has what the page needs; its figures are output cells drawn by the site's plotly.js"
    for p in sorted((ROOT/'bench'/'stored').glob('*.json')):
        r = json.loads(p.read_text())
        assert {'title', 'date', 'command'} <= set(r) and ('text' in r or 'runs' in r), p.name
        assert page.section(r).startswith(f"## {r['title']}"), p.name
    nb = page.benchmarks_notebook()
    figs = [c for c in nb['cells'] if c['cell_type'] == 'code']
    assert all(c['metadata']['tags'] == ['remove-input'] and 'plotly-graph-div' in c['outputs'][0]['data']['text/html']
               and c['source'].strip() for c in figs)  # myst-nb leaves out a code cell without source
    assert len({c['id'] for c in nb['cells']}) == len(nb['cells'])

def test_result_cells_put_figures_after_the_text(runs):
    res = bench.table(runs)
    cells = page.result_cells(res)
    assert [c['cell_type'] for c in cells] == ['markdown', 'code', 'code']
    assert cells[0]['source'].startswith('## Atari-100k') and '| Pong |' in cells[0]['source']
    assert 'Machine: ' in cells[0]['source']

def test_machine_records_of_the_finished_runs(runs):
    "The result's machine is the record each invocation of a finished run left; an unfinished run's are not used"
    rec = dict(cpu=dict(model='m'), load=dict(start=1.0, end=2.0))
    for root, r in ((runs/'Pong'/'seed0', rec), (runs/'Boxing'/'seed0', dict(rec, cpu=dict(model='other')))):
        (root/'machine.jsonl').write_text(json.dumps(dict(action='start', rc=0, machine=r)) + '\n')
    res = bench.table(runs)
    assert res['machine'] == rec and 'load average' in res['conditions']

@pytest.mark.slow
def test_quick_run_through_the_cli(tmp_path):
    "`run --quick` trains 300 steps with `fastrl-replay train --algo der`, then scores the run in its table"
    help_text = subprocess.run([bench.cli(), 'train', '--help'], capture_output=True, text=True).stdout
    if not re.search(r'--algo \{[^}]*\bder\b', help_text): pytest.skip('fastrl-replay train has no --algo der yet')
    subprocess.run([sys.executable, str(ROOT/'bench'/'atari100k_bench.py'), 'run', '--quick', '--runs', str(tmp_path)],
                   check=True, cwd=ROOT/'bench', timeout=1800)
    res = json.loads((tmp_path/'16_atari100k.quick.json').read_text())
    pong = res['rows'][0]
    assert pong['game'] == 'Pong' and pong['seed_numbers'] == [0] and len(pong['seeds']) == 1
    assert pong['env_steps'][0] >= 300 and 0 <= pong['memory_share'][0] <= 1 and res['unfinished'] == []
    assert bench.plan(tmp_path/'Pong'/'seed0')[0] == 'done'  # a second `run` would leave it alone

def test_warmup_is_the_presets():
    "The warm-up the speed paragraph discounts is DER's own"
    from fastrl_replay.agents.der import DERSettings
    assert bench.WARMUP == DERSettings().warmup

def test_speed_runs_give_the_range_per_100k(runs, tmp_path):
    "A short run timed apart: its steps, wall-clock and memory share, and the minutes per 100,000 steps either way"
    fast = tmp_path/'speed'
    run = fast/'Pong/seed9/der-ALE/Pong-v5-seed9-20260101-000000'
    _metrics(run, 'Pong', 9, [-21.0], [], env_steps=4_000, wall_s=240.0, memory_s=12.0)
    rec = dict(torch=dict(threads=2, cpu_capability='AVX2'), load=dict(start=1.0, end=2.0))
    (run.parents[1]/'machine.jsonl').write_text(json.dumps(dict(action='start', rc=0, machine=rec)) + '\n')
    res = bench.table(runs, speed_runs=fast)
    assert [(r['game'], r['seed'], r['threads']) for r in res['speed_runs']] == [('Pong', 9, 2)]
    assert res['speed_runs'][0]['memory_share'] == pytest.approx(0.05)
    assert ('4,000 agent steps (the first 1,600 fill the memory without updates) on 2 threads' in res['text']
            and '5.0% of it in the replay memory: 100 to 167 minutes per 100,000 steps' in res['text'])
    assert res['command'].endswith(f'--speed-runs {fast}')
