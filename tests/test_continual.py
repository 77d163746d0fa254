"Statistical and protocol tests of the continual-learning memories: reservoir inclusion, task shares, bad input, checkpoints"
import numpy as np, pytest, torch
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.errors import CheckpointError
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.continual import ReservoirReplay, TaskBalancedReplay
from fastrl_replay.memory.persist import load_memory


def numbered(lo, hi, task=None):
    b = {'x': torch.arange(lo, hi)[:, None].float()}
    if task is not None: b['task'] = torch.full((hi - lo, 1), task, dtype=torch.int64)
    return b


@pytest.mark.parametrize('chunk', [3, 50])
def test_reservoir_inclusion_probabilities(chunk):
    "Each of n rows ends in a memory of k with probability k/n, whatever the batch sizes: 2,000 seeded memories"
    k, n, reps = 10, 50, 2000
    counts = np.zeros(n)
    for seed in range(reps):
        mem = ReservoirReplay(bs=1, max_sz=k, warmup_sz=1, seed=seed)
        for i in range(0, n, chunk): mem + numbered(i, min(i + chunk, n))
        kept = mem.memory['x'][:, 0].long().numpy()
        assert len(np.unique(kept)) == k
        counts[kept] += 1
    p = counts / reps
    sd = np.sqrt(k / n * (1 - k / n) / reps)  # 0.0089
    assert np.abs(p - k / n).max() < 5 * sd, p
    chi2 = ((counts - reps * k / n) ** 2 / (reps * k / n * (1 - k / n))).sum()
    assert chi2 < 100, chi2  # 49 degrees of freedom (a little fewer: the counts sum to reps * k); p < 1e-4 above 100


def test_reservoir_fills_then_keeps_a_uniform_sample_of_a_long_stream():
    mem = ReservoirReplay(bs=8, max_sz=100, warmup_sz=1, seed=0)
    mem + numbered(0, 60)
    assert (len(mem), mem.seen) == (60, 60)
    assert mem.memory['x'][:, 0].tolist() == list(range(60))  # until full, rows go in order
    for i in range(60, 100_000, 1000): mem + numbered(i, min(i + 1000, 100_000))
    x = mem.memory['x'][:, 0].numpy()
    assert (len(mem), mem.seen, mem.pointer) == (100, 100_000, 100)
    assert 30_000 < x.mean() < 70_000  # uniform over [0, 1e5): mean 50,000, sd of the mean about 2,900
    assert (x < 50_000).sum() > 30


def test_reservoir_is_reproducible_and_seeded():
    a, b, c = (ReservoirReplay(max_sz=20, warmup_sz=1, seed=s) for s in (1, 1, 2))
    for m in (a, b, c): m + numbered(0, 500)
    assert torch.equal(a.memory['x'], b.memory['x'])
    assert not torch.equal(a.memory['x'], c.memory['x'])


def _snapshot(mem):
    st = mem.state_dict()
    return (len(mem), getattr(mem.storage, 'seen', None), getattr(mem.storage, 'clock', None),
            None if mem.memory is None else {k: v.clone() for k, v in mem.memory.items()},
            st['sampler']['generator'].clone(), st['storage'].get('generator', torch.zeros(1)).clone())


@pytest.mark.parametrize('make', [lambda: ReservoirReplay(max_sz=20, warmup_sz=1, seed=0),
                                  lambda: TaskBalancedReplay(max_sz=20, warmup_sz=1, seed=0)])
@pytest.mark.parametrize('bad, msg', [
    ({'x': torch.zeros(3, 2)}, "column 'x': expected shape (n, 1)"),
    ({'y': torch.zeros(3, 1)}, 'missing'),
    ({'x': torch.zeros(3, 1, dtype=torch.int64)}, 'int64 cannot be stored as float32'),
    ({'x': torch.zeros(3, 1), 'td_error': torch.full((3, 1), float('nan'))}, 'NaN'),
])
def test_bad_batches_leave_the_memory_unchanged(make, bad, msg):
    mem = make()
    mem + numbered(0, 30)
    before = _snapshot(mem)
    with pytest.raises(ExperienceReplayException, match=msg.replace('(', r'\(').replace(')', r'\)')): mem + bad
    after = _snapshot(mem)
    assert before[:3] == after[:3]
    assert all(torch.equal(before[3][k], after[3][k]) for k in before[3])
    assert torch.equal(before[4], after[4]) and torch.equal(before[5], after[5])


def test_bad_tasks_leave_the_memory_unchanged():
    mem = TaskBalancedReplay(max_sz=20, warmup_sz=1, seed=0, memory=numbered(0, 10))
    before = _snapshot(mem)
    for bad, msg in (({**numbered(0, 3), 'task': -torch.ones(3, 1, dtype=torch.int64)}, 'ints >= 0'),
                     ({**numbered(0, 3), 'task': torch.ones(3, 1)}, "column 'task': expected task ids"),
                     ({**numbered(0, 3), 'task': torch.ones(2, 1, dtype=torch.int64)}, 'batch size')):
        with pytest.raises(ExperienceReplayException, match=msg): mem + bad
    with pytest.raises(ExperienceReplayException, match='task must be an int >= 0'): mem.task = 1.5
    after = _snapshot(mem)
    assert before[:3] == after[:3] and torch.equal(before[3]['x'], after[3]['x']) and mem.task == 0
    with pytest.raises(ExperienceReplayException, match="'task': expected shape \\(n, 1\\) int64"):
        TaskBalancedReplay(memory={**numbered(0, 3), 'task': torch.ones(3, 2, dtype=torch.int64)})


def test_task_shares_follow_the_tasks_seen():
    "A full memory gives each of k tasks max_sz // k rows, each task its most recent"
    mem = TaskBalancedReplay(max_sz=120, warmup_sz=1, seed=0)
    mem + numbered(0, 500, task=0)
    assert mem.counts() == {0: 120}
    mem + numbered(1000, 1030, task=1)  # under its share of 60: takes rows from task 0
    assert mem.counts() == {0: 90, 1: 30}
    for i in range(1030, 1300, 9): mem + numbered(i, min(i + 9, 1300), task=1)
    assert mem.counts() == {0: 60, 1: 60}
    x, t = mem.memory['x'][:, 0].long(), mem.memory['task'][:, 0]
    assert sorted(x[t == 0].tolist()) == list(range(440, 500))
    assert sorted(x[t == 1].tolist()) == list(range(1240, 1300))
    mem.task = 2
    mem + numbered(2000, 2100)
    assert mem.counts() == {0: 40, 1: 40, 2: 40}
    assert sorted(mem.memory['x'][mem.memory['task'][:, 0] == 2, 0].long().tolist()) == list(range(2060, 2100))


def test_task_shares_with_interleaved_tasks_match_a_row_by_row_reference():
    "Batches of mixed tasks give the same memory as adding their rows one at a time"
    rng = np.random.default_rng(0)
    tasks = rng.integers(0, 3, 700)
    a, b = TaskBalancedReplay(max_sz=90, warmup_sz=1, seed=0), TaskBalancedReplay(max_sz=90, warmup_sz=1, seed=0)
    x = torch.arange(700)[:, None].float()
    t = torch.from_numpy(tasks)[:, None]
    for i in range(0, 700, 37): a + {'x': x[i:i + 37], 'task': t[i:i + 37]}
    for i in range(700): b.append({'x': x[i], 'task': t[i]})
    assert torch.equal(a.memory['x'], b.memory['x']) and torch.equal(a.memory['task'], b.memory['task'])
    counts = a.counts()
    assert sum(counts.values()) == 90 and max(counts.values()) - min(counts.values()) <= 2


def test_balanced_sampling_draws_tasks_evenly():
    mem = TaskBalancedReplay(bs=20_000, max_sz=1000, warmup_sz=1, seed=0)
    mem + numbered(0, 900, task=0); mem + numbered(900, 980, task=1); mem + numbered(980, 1000, task=5)
    assert mem.counts() == {0: 900, 1: 80, 5: 20}
    b, idxs = mem.sample()
    frac = np.bincount(b['task'][:, 0].numpy(), minlength=6)[[0, 1, 5]] / 20_000
    assert np.abs(frac - 1 / 3).max() < 5 * np.sqrt(2 / 9 / 20_000), frac
    rows5 = b['x'][b['task'][:, 0] == 5, 0].long()
    assert set(rows5.tolist()) == set(range(980, 1000))  # every row of the small task is drawn
    assert torch.equal(b['x'], mem.memory['x'][idxs])


def test_protocol_slicing_td_and_append():
    for mem in (ReservoirReplay(bs=8, max_sz=50, warmup_sz=1, seed=0), TaskBalancedReplay(bs=8, max_sz=50, warmup_sz=1, seed=0)):
        mem + numbered(0, 40)
        mem.append({'x': torch.tensor([99.])})
        assert len(mem) == 41 and mem.memory['x'][-1, 0] == 99
        b, idxs = mem.sample()
        mem.update_td(torch.arange(8).float(), idxs)
        assert torch.equal(mem.memory['td_error'][idxs[-1], 0], torch.tensor(7.)) or len(set(idxs.tolist())) < 8
        part = mem[10:20]
        assert type(part) is type(mem) and len(part) == 10
        assert torch.equal(part.memory['x'], mem.memory['x'][10:20])


@pytest.mark.parametrize('make', [lambda m: ReservoirReplay(bs=16, max_sz=64, warmup_sz=1, seed=5, memory=m),
                                  lambda m: TaskBalancedReplay(bs=16, max_sz=64, warmup_sz=1, seed=5, task=3, memory=m)])
def test_checkpoint_round_trip_samples_and_evicts_alike(tmp_path, make):
    mem = make(numbered(0, 200))
    if isinstance(mem, TaskBalancedReplay): mem + numbered(200, 230, task=1)
    mem.save(tmp_path/'ckpt')
    back = load_memory(tmp_path/'ckpt')
    assert type(back) is type(mem) and back.settings() == mem.settings()
    for _ in range(3):
        (b1, i1), (b2, i2) = mem.sample(), back.sample()
        assert torch.equal(i1, i2) and torch.equal(b1['x'], b2['x'])
    mem + numbered(500, 700); back + numbered(500, 700)
    assert torch.equal(mem.memory['x'], back.memory['x'])
    assert type(mem).load(tmp_path/'ckpt').state_dict()['bs'] == 16
    with pytest.raises(CheckpointError, match='holds a'): ExperienceReplay.load(tmp_path/'ckpt')
