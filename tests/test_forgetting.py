"The forgetting experiment end to end on tiny budgets: metrics, report, memories, and the command"
import json
import pytest, torch
from fastrl_replay.forgetting import run_forgetting
from fastrl_replay.cli import main

KEYS = {'mode1_before', 'mode1_after_no_replay', 'mode1_after_replay', 'mode2_after_replay', 'mode2_only', 'seed', 'agent',
        'memory', 'wall_s'}
RATES = ['mode1_before', 'mode2_before', 'mode1_after_no_replay', 'mode2_after_no_replay', 'mode1_after_replay',
         'mode2_after_replay', 'mode2_only']


def _check(out, m, agent, memory, n_eval):
    saved = json.loads((out/'metrics.json').read_text())
    assert KEYS <= set(saved) and (saved['agent'], saved['memory']) == (agent, memory)
    for k in RATES:  # rates of n_eval trials: multiples of 1/n_eval in [0, 1]
        assert 0 <= saved[k] <= 1 and round(saved[k] * n_eval, 6) == round(saved[k] * n_eval)
    for k, cm in saved['confusion'].items(): assert sum(map(sum, cm)) == n_eval
    html = (out/'report.html').read_text()
    assert html.count('class="plotly-graph-div"') == 2 and '<script src="http' not in html  # plotly.js inlined: offline
    assert saved['retention'] == pytest.approx(saved['mode1_after_replay'] / saved['mode1_before'])
    return saved


def test_a2c_balanced_tiny(tmp_path):
    m = run_forgetting(seed=1, agent='a2c', memory='balanced', out=tmp_path, eval_trials=100, steps1=8, steps2=4,
                       memory_sz=500, curve_every=4, curve_trials=20)
    saved = _check(tmp_path, m, 'a2c', 'balanced', 100)
    assert saved['memory_rows'] == 500  # 800 mode-1 trials written, none of mode 2
    branches = [r[1] for r in saved['curve']]
    assert branches == ['mode 1'] * 3 + ['mode 2, no replay'] * 2 + ['mode 2, replay'] * 2 + ['mode 2 only'] * 2
    assert [r[0] for r in saved['curve'][:5]] == [0, 400, 800, 800, 1200]


def test_a2c_same_seed_same_metrics(tmp_path):
    kw = dict(seed=3, agent='a2c', memory='fifo', eval_trials=50, steps1=3, steps2=3, memory_sz=300, curve_every=3, curve_trials=10)
    a, b = (run_forgetting(out=tmp_path/d, **kw) for d in 'ab')
    assert all(a[k] == b[k] for k in RATES)


@pytest.mark.parametrize('memory', ['fifo', 'reservoir', 'balanced'])
def test_dqn_memories_keep_mode1_rows_or_not(tmp_path, memory):
    "After a mode 2 longer than the memory, FIFO holds no mode-1 row; reservoir and balanced memories still do"
    m = run_forgetting(seed=0, agent='dqn', memory=memory, out=tmp_path, eval_trials=50, steps1=400, steps2=600,
                       memory_sz=200, curve_every=50, curve_trials=10)
    saved = _check(tmp_path, m, 'dqn', memory, 50)
    left = saved['mode1_rows_left']
    assert left['no_replay'] == 0
    if memory == 'fifo': assert left['replay'] == 0 and saved['mode1_after_replay'] == saved['mode1_after_no_replay']
    else: assert left['replay'] > 20  # reservoir: about 200 * 400/1000 * 2/3 rows show yellow; balanced: about 100 * 2/3


def test_bad_settings():
    with pytest.raises(ValueError, match="agent must be 'a2c' or 'dqn'"): run_forgetting(agent='ppo')
    with pytest.raises(ValueError, match="memory must be 'fifo', 'reservoir' or 'balanced'"): run_forgetting(memory='lru')
    with pytest.raises(ValueError, match=r"unknown settings \['steps'\]"): run_forgetting(steps=3)


def test_command(tmp_path, capsys):
    main(['forgetting', '--seed', '2', '--agent', 'a2c', '--memory', 'reservoir', '--out', str(tmp_path), '--eval-trials', '60',
          '--steps1', '3', '--steps2', '2'])
    out = capsys.readouterr().out
    assert 'a2c, reservoir memory, seed 2' in out and f"report: {tmp_path/'report.html'}" in out
    saved = json.loads((tmp_path/'metrics.json').read_text())
    assert (saved['budget']['steps1'], saved['budget']['steps2'], saved['eval_trials']) == (3, 2, 60)
    with pytest.raises(SystemExit): main(['forgetting', '--agent', 'sac'])
    with pytest.raises(SystemExit): main(['forgetting', '--steps1', '0'])
