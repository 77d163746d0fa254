"LaBER against cpprb's reference helpers: the same weights, the same distribution of kept indexes; the LaBER memory."
import numpy as np, pytest, torch
from fastrl_replay.memory.experience_replay import ExperienceReplayException
from fastrl_replay.memory.laber import LaBERmean, LaBERlazy, LaBERmax, LaBERExperienceReplay
from fastrl_replay.test_utils import synth_transitions

import cpprb  # the reference implementation; the dev extra installs it
PAIRS = [(LaBERmean, cpprb.LaBERmean), (LaBERlazy, cpprb.LaBERlazy), (LaBERmax, cpprb.LaBERmax)]
PRIOS = np.random.default_rng(0).exponential(size=4 * 32) * (np.arange(4 * 32) % 5)  # a fifth of them 0

@pytest.mark.parametrize('ours,theirs', PAIRS)
@pytest.mark.parametrize('eps', [1e-6, 0.5])
def test_weights_equal_cpprb_on_the_same_indexes(ours, theirs, eps):
    out = ours(32, 4, eps=eps, seed=0)(priorities=PRIOS, obs=np.arange(128) * 2.)
    ref = theirs(32, 4, eps=eps)
    p = (PRIOS + eps) / (PRIOS + eps).sum()
    np.testing.assert_allclose(out['weights'], ref._normalize_weight(p, out['indexes']), rtol=1e-12)
    np.testing.assert_array_equal(out['obs'], out['indexes'] * 2.)
    assert out['indexes'].dtype == np.int64 and out['indexes'].shape == (32,)

@pytest.mark.parametrize('ours,theirs', PAIRS)
def test_index_distribution_equals_cpprbs(ours, theirs):
    "Counts of kept indexes over many draws: each library matches p, and the two match each other (chi-square)"
    prios = np.array([0., 1., 2., 3., 4., 5., 6., 9.])
    p = (prios + 1e-6) / (prios + 1e-6).sum()
    mine, ref = ours(2000, 1, seed=3), theirs(2000, 1)
    ref.rng = np.random.default_rng(3)
    a = sum(np.bincount(mine(priorities=np.tile(prios, 250))['indexes'] % 8, minlength=8) for _ in range(20))
    b = sum(np.bincount(ref(priorities=np.tile(prios, 250))['indexes'] % 8, minlength=8) for _ in range(20))
    live = p > 1e-6
    for counts in (a, b):
        exp = p[live] * counts.sum()
        assert ((counts[live] - exp) ** 2 / exp).sum() < 24.32  # 7 degrees of freedom, p = 0.001
        assert counts[~live].sum() <= 2
    table = np.stack([a[live], b[live]]).astype(float)
    exp = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    assert ((table - exp) ** 2 / exp).sum() < 22.46  # homogeneity, 6 degrees of freedom, p = 0.001

def test_torch_inputs_stay_tensors_and_seeds_repeat():
    pr = torch.rand(64, generator=torch.Generator().manual_seed(0))
    a = LaBERmean(16, 4, seed=5)(priorities=pr, obs=torch.arange(64.))
    b = LaBERmean(16, 4, seed=5)(priorities=pr, obs=torch.arange(64.))
    assert torch.equal(a['indexes'], b['indexes']) and torch.equal(a['obs'], a['indexes'].float())
    assert a['weights'].dtype == torch.float32
    p = (pr.double() + 1e-6) / (pr.double() + 1e-6).sum()
    torch.testing.assert_close(a['weights'], (p.mean() / p[a['indexes']]).float())

def test_memory_samples_by_score_with_closed_form_weights():
    scores = {}
    def score(b):
        s = b['reward'][:, 0].abs()
        scores['last'] = s.clone()
        return s
    mem = LaBERExperienceReplay(bs=8, max_sz=100, warmup_sz=1, m=4, variant='mean', eps=1e-6, score=score, seed=0)
    mem + synth_transitions(100)
    b, idxs = mem.sample()
    assert b['weight'].shape == (8, 1) and b['weight'].dtype == torch.float32
    assert torch.equal(b['step'], mem.memory['step'][idxs])
    p = (scores['last'].double() + 1e-6) / (scores['last'].double() + 1e-6).sum()
    r = mem.memory['reward'][idxs, 0].abs().double()
    torch.testing.assert_close(b['weight'][:, 0], (p.mean() / ((r + 1e-6) / (scores['last'].double() + 1e-6).sum())).float())
    again = LaBERExperienceReplay(bs=8, max_sz=100, warmup_sz=1, m=4, score=score, seed=0, memory=mem.memory)
    assert torch.equal(again.sample()[1], idxs)

def test_sample_counts_reset_when_rows_are_overwritten():
    mem = LaBERExperienceReplay(bs=4, max_sz=6, warmup_sz=1, score=lambda b: torch.ones(len(b['step'])), seed=0)
    mem + synth_transitions(6)
    for _ in range(5): mem.sample()
    assert int(mem.sample_counts.sum()) == 20
    before = mem.sample_counts.clone()
    mem + synth_transitions(2, start=6)
    assert mem.sample_counts[:2].tolist() == [0, 0] and torch.equal(mem.sample_counts[2:], before[2:])

@pytest.mark.parametrize('bad,msg', [(lambda b: torch.ones(3), 'expected shape (16,)'),
                                     (lambda b: -torch.ones(16), 'priorities must be finite and >= 0'),
                                     (lambda b: torch.full((16,), float('nan')), 'priorities must be finite')])
def test_bad_scores_raise_and_count_nothing(bad, msg):
    mem = LaBERExperienceReplay(bs=4, max_sz=10, warmup_sz=1, score=bad, seed=0) + synth_transitions(10)
    with pytest.raises(ExperienceReplayException, match=None) as e: mem.sample()
    assert msg in str(e.value)
    assert int(mem.sample_counts.sum()) == 0

@pytest.mark.cuda
def test_cuda_memory_scores_and_weights_on_the_device():
    seen = {}
    def score(b):
        seen['device'] = b['reward'].device.type
        seen['last'] = b['reward'][:, 0].abs().clone()
        return seen['last']
    mem = LaBERExperienceReplay(bs=8, max_sz=100, warmup_sz=1, m=4, variant='mean', eps=1e-6, score=score, device='cuda', seed=0)
    mem + synth_transitions(100)
    b, idxs = mem.sample()
    assert seen['device'] == 'cuda' and idxs.device.type == 'cuda' and b['weight'].device.type == 'cuda'
    assert torch.equal(b['step'], mem.memory['step'][idxs])
    s = seen['last'].double() + 1e-6
    r = mem.memory['reward'][idxs, 0].abs().double() + 1e-6
    torch.testing.assert_close(b['weight'][:, 0], ((s / s.sum()).mean() / (r / s.sum())).float())
