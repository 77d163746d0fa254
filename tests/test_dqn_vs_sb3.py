"Differential: our DQN and Stable-Baselines3's, from the same weights with the same random draws, take the same actions, store the same transitions and reach the same weights."
import sys
from pathlib import Path
import numpy as np, pytest, torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent/'bench'))
pytest.importorskip('stable_baselines3')
from dqn_lockstep import ZOO, streams, sb3_run, ours_run

def run(steps, **kw):
    torch.set_num_threads(1)
    D, U = streams(0, steps, ZOO['bs'])
    a, b = dict(actions=[], bursts=[]), dict(actions=[], bursts=[])
    ours_run(0, steps, D, U, b, sb3_run(0, steps, D, U, a), **kw)
    return a, b

def test_same_draws_same_run_bit_for_bit():
    a, b = run(1_536, fused=False)  # SB3's Adam; bursts of 128 gradient steps at steps 1,024, 1,280 and 1,536
    assert a['actions'] == b['actions'] and len(a['actions']) == 1_536
    assert len(a['bursts']) == len(b['bursts']) == 3
    for k, (x, y) in enumerate(zip(a['bursts'], b['bursts'])):
        assert x['n'] == y['n'] == 1_024 + 256 * k
        for c in ('obs', 'next_obs', 'act', 'rew', 'term'): np.testing.assert_array_equal(x[c], y[c].astype(x[c].dtype).reshape(x[c].shape))
        for p, q in zip(x['online'], y['online']): assert torch.equal(p, q)
        if k:  # the target that trained burst k: SB3 copies it after burst k - 1 when it collects again, ours at that burst's end
            for p, q in zip(x['target'], b['bursts'][k - 1]['target']): assert torch.equal(p, q)

def test_greedy_warmup_parts_the_runs():
    a, b = run(1_100, fused=False, random_warmup=False)  # ours explores by its schedule while the memory warms up
    diff = np.flatnonzero(np.array(a['actions'][:1_024]) != np.array(b['actions'][:1_024]))
    assert 0 < len(diff) and diff[0] < 1_000
