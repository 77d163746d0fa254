"`PrioritizedExperienceReplay`: sampling statistics, importance weights, a reference model under random histories, late updates."
import math
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st, HealthCheck
from fastrl_replay.memory.experience_replay import ExperienceReplayException, WarmupNotReached
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.sumtree import SumTree
from fastrl_replay.test_utils import synth_transitions

CHI2_7DOF_P001 = 24.32  # chi-square critical value at p = 0.001 for 7 degrees of freedom
PRIOS = torch.tensor([3., 1., 4., 1.5, 9., 2.6, 5., 0.5], dtype=torch.float64)

def per(path='compiled', **kw):
    "A prioritized memory on the compiled CPU path, or on the tensor path the GPU uses"
    return PrioritizedExperienceReplay(**kw, tree_backend='torch' if path == 'tensor' else None)

PATHS = ['compiled', 'tensor']

def chi2(counts, probs):
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())

@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('stratified', [True, False])
def test_frequencies_match_priorities_chi_square(path, stratified):
    m = per(path, bs=4096, max_sz=8, warmup_sz=8, stratified=stratified, seed=1234) + synth_transitions(8)
    m.set_priority(range(8), PRIOS)
    counts = torch.zeros(8, dtype=torch.float64)
    for _ in range(50): counts += torch.bincount(m.sample()[1], minlength=8)
    probs = PRIOS / PRIOS.sum()
    stat = chi2(counts, probs)
    assert stat < CHI2_7DOF_P001
    assert torch.equal(m.sample_counts[:8].double(), counts)
    if stratified: assert ((counts - probs * counts.sum()).abs() <= 2 * 50).all()  # at most two slices off per batch

@pytest.mark.parametrize('path', PATHS)
def test_importance_weights_closed_form(path):
    m = per(path, bs=64, max_sz=10, warmup_sz=1, alpha=1., beta=0.7, beta_steps=0, seed=0) + synth_transitions(8)
    m.set_priority(range(8), PRIOS)
    n, total, pmin = 8, float(PRIOS.sum()), 0.5
    for norm in ('memory', 'batch', None):
        m.weight_norm = norm
        b, idxs = m.sample()
        p = PRIOS[idxs]
        raw = (n * p / total) ** -0.7
        expected = {'memory': raw / (n * pmin / total) ** -0.7, 'batch': raw / raw.max(), None: raw}[norm]
        torch.testing.assert_close(b['weight'][:, 0], expected.float(), rtol=1e-6, atol=0)
        assert b['weight'].dtype == torch.float32 and b['weight'].shape == (64, 1)
        torch.testing.assert_close(m.weights(idxs, beta=0.7), expected.float()[:, None], rtol=1e-6, atol=0)

def test_beta_anneals_linearly_then_stays():
    m = per(bs=2, max_sz=4, warmup_sz=1, beta=0.2, beta_end=1., beta_steps=8, seed=0) + synth_transitions(4)
    seen = []
    for _ in range(10): seen.append(m.current_beta); m.sample()
    np.testing.assert_allclose(seen, [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1., 1.])

class Reference:
    "Priorities and TD errors kept in plain arrays, following the rules one row at a time"
    def __init__(self, max_sz, alpha, eps):
        self.max_sz, self.alpha, self.eps = max_sz, alpha, eps
        self.prio, self.td = np.zeros(max_sz), np.zeros(max_sz, np.float32)
        self.written, self.sampled = np.zeros(max_sz, np.int64), np.full(max_sz, -1, np.int64)
        self.counts = np.zeros(max_sz, np.int64)
        self.ptr, self.len, self.time, self.maxp, self.stale = 0, 0, 0, 1., 0
    def add(self, n):
        self.time += 1
        for _ in range(n):
            i = self.ptr % self.max_sz
            self.prio[i], self.td[i], self.written[i], self.counts[i] = self.maxp, 0., self.time, 0
            self.ptr, self.len = i + 1, min(self.len + 1, self.max_sz)
    def sampled_rows(self, idxs):
        self.time += 1
        for i in idxs: self.sampled[i], self.counts[i] = self.time, self.counts[i] + 1
    def update(self, tds, idxs):
        for td, i in zip(tds, idxs):
            if 0 <= self.sampled[i] < self.written[i]: self.stale += 1; continue
            self.td[i] = td
            self.prio[i] = (abs(float(np.float32(td))) + self.eps) ** self.alpha
            self.maxp = max(self.maxp, self.prio[i])
    def set(self, idxs, prios):
        for p, i in zip(prios, idxs): self.prio[i] = p; self.maxp = max(self.maxp, p)

ops = st.one_of(st.tuples(st.just('add'), st.integers(1, 9)),
                st.tuples(st.just('sample'), st.integers(1, 6)),
                st.tuples(st.just('update'), st.lists(st.floats(-50, 50, width=32), min_size=1, max_size=8)),
                st.tuples(st.just('late'), st.integers(1, 9)),
                st.tuples(st.just('set'), st.lists(st.floats(0, 10), min_size=1, max_size=4)))

@pytest.mark.parametrize('path', PATHS)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 12), st.sampled_from([0., 0.5, 1.]), st.lists(ops, min_size=1, max_size=25), st.data())
def test_matches_reference_under_random_histories(path, max_sz, alpha, history, data):
    "Priorities, TD errors, draw counts and skipped late updates follow the rules, whatever the order of events"
    m = per(path, bs=4, max_sz=max_sz, warmup_sz=1, alpha=alpha, eps=1e-3, seed=0)
    ref = Reference(max_sz, alpha, 1e-3)
    pending = []  # sampled batches whose update has not come yet
    step = 0
    for op, arg in history:
        if op == 'add' or (len(m) == 0 and op != 'add'):
            n = arg if op == 'add' else 1
            m + synth_transitions(n, start=step); ref.add(n); step += n
        elif op == 'sample' and ref.prio[:len(m)].sum() == 0:
            if path == 'compiled':  # the tensor path skips this check, as it would wait for a GPU
                with pytest.raises(ExperienceReplayException, match='every row has priority 0'): m.sample(arg)
        elif op == 'sample':
            _, idxs = m.sample(arg)
            ref.sampled_rows(idxs.tolist())
            pending.append(idxs)
        elif op in ('update', 'late') and pending:
            idxs = pending.pop(0 if op == 'late' else -1)
            tds = data.draw(st.lists(st.floats(-50, 50, width=32), min_size=len(idxs), max_size=len(idxs)))
            m.update_td(torch.tensor(tds), idxs); ref.update(tds, idxs.tolist())
        elif op == 'set':
            idxs = data.draw(st.lists(st.integers(0, len(m) - 1), min_size=len(arg), max_size=len(arg)))
            m.set_priority(idxs, arg); ref.set(idxs, arg)
        n = len(m)
        np.testing.assert_allclose(m.get_priority(range(max_sz)).numpy(), np.where(np.arange(max_sz) < n, ref.prio, 0.),
                                   rtol=1e-12)
        np.testing.assert_array_equal(m.memory['td_error'][:, 0].numpy(), ref.td[:n])
        np.testing.assert_array_equal(m.sample_counts[:n].numpy(), ref.counts[:n])
        assert m.n_stale == ref.stale
        assert m.max_priority == pytest.approx(ref.maxp, rel=1e-12)
        assert m.tree.total == pytest.approx(ref.prio[:n].sum(), rel=1e-9, abs=1e-12)

@pytest.mark.parametrize('path', PATHS)
def test_repeated_indices_last_update_wins(path):
    m = per(path, bs=4, max_sz=6, warmup_sz=1, alpha=1., eps=1e-9, seed=0) + synth_transitions(6)
    m.update_td(torch.tensor([1., 2., 3., -4.]), torch.tensor([2, 5, 2, 2]))
    assert m.memory['td_error'][[2, 5], 0].tolist() == [-4., 2.]
    torch.testing.assert_close(m.get_priority([2, 5]), torch.tensor([4., 2.], dtype=torch.float64) + 1e-9)

@pytest.mark.parametrize('path', PATHS)
def test_update_for_an_overwritten_row_is_ignored(path):
    m = per(path, bs=3, max_sz=5, warmup_sz=5, alpha=1., eps=1e-9, seed=0) + synth_transitions(5)
    m.set_priority(range(5), [1., 1., 0., 1., 0.])
    _, idxs = m.sample()
    assert idxs.tolist() == [0, 1, 3]
    m + synth_transitions(2, start=5)  # rows 0 and 1 now hold steps 5 and 6
    m.update_td(torch.tensor([10., 20., 30.]), idxs)
    assert m.memory['step'][:2, 0].tolist() == [5, 6]
    assert m.memory['td_error'][[0, 1, 3], 0].tolist() == [0., 0., 30.]
    assert m.get_priority([0, 1, 3]).tolist() == [1., 1., pytest.approx(30.)]
    assert m.n_stale == 2
    _, again = m.sample()  # once sampled again, rows 0 and 1 take updates again
    m.update_td(torch.full((3,), 2.), again)
    assert (m.memory['td_error'][again, 0] == 2.).all()

BAD_UPDATES = [
    (lambda m: m.update_td(torch.tensor([1., float('inf')]), torch.tensor([0, 1])), 'NaN or inf'),
    (lambda m: m.update_td(torch.tensor([1., 1.]), torch.tensor([0, 6])), 'indices [6] are out of range for a memory of 6 rows'),
    (lambda m: m.update_td(torch.tensor([1., 1.]), torch.tensor([-1, 0])), 'indices [-1] are out of range'),
    (lambda m: m.update_td(torch.ones(3), torch.tensor([0, 1])), 'expected shape (2,) or (2, 1) for 2 indices, got (3,)'),
    (lambda m: m.update_td(torch.ones(2, dtype=torch.int64), [0, 1]), 'expected a float dtype, got int64'),
    (lambda m: m.update_td(torch.tensor([1e39], dtype=torch.float64), [0]), 'NaN or inf'),
    (lambda m: m.update_td(torch.ones(2), torch.tensor([0., 1.])), 'indices must be a 1-d sequence of ints'),
    (lambda m: m.set_priority([0, 1], [1., -2.]), 'values must be finite and >= 0, got [-2.0]'),
    (lambda m: m.set_priority([0, 9], [1., 2.]), 'indices [9] are out of range'),
    (lambda m: m + {**synth_transitions(1), 'state': torch.zeros(1, 3)}, "column 'state': expected shape (n, 4), got (1, 3)"),
]

@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('call,msg', BAD_UPDATES)
def test_bad_input_raises_and_changes_nothing(path, call, msg):
    m = per(path, bs=4, max_sz=8, warmup_sz=1, seed=0) + synth_transitions(6)
    _, idxs = m.sample()
    m.update_td(torch.tensor([0.5, 1., 2., 4.]), idxs)
    before = (m.tree.sum_tree.clone(), m.tree.min_tree.clone(), m.memory['td_error'].clone(), m.sample_counts.clone(),
              m.handed.clone(), m.max_priority, m.n_stale, m.pointer, len(m))
    with pytest.raises(ExperienceReplayException) as e: call(m)
    assert msg in str(e.value)
    after = (m.tree.sum_tree, m.tree.min_tree, m.memory['td_error'], m.sample_counts, m.handed,
             m.max_priority, m.n_stale, m.pointer, len(m))
    for a, b in zip(before, after):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b

def test_compiled_and_tensor_paths_agree():
    "The CPU's compiled path and the tensor path the GPU takes give the same samples, weights and priorities"
    a, b = (per(p, bs=32, max_sz=50, warmup_sz=10, alpha=0.6, beta=0.4, beta_steps=20, seed=7) for p in PATHS)
    g = torch.Generator().manual_seed(0)
    for step in range(40):
        rows = synth_transitions(7, start=7 * step)
        a + rows; b + rows
        if len(a) < 10: continue
        (ba, ia), (bb, ib) = a.sample(), b.sample()
        assert torch.equal(ia, ib)
        torch.testing.assert_close(ba['weight'], bb['weight'], rtol=1e-6, atol=0)
        td = torch.randn(32, generator=g)
        if step % 3 == 0: a + synth_transitions(5); b + synth_transitions(5)  # some updates arrive late
        a.update_td(td, ia); b.update_td(td, ib)
        torch.testing.assert_close(a.get_priority(range(50)), b.get_priority(range(50)), rtol=1e-12, atol=0)
        assert a.n_stale == b.n_stale and torch.equal(a.sample_counts, b.sample_counts)
    assert a.n_stale > 0

def test_warmup_and_slicing():
    m = per(bs=4, max_sz=10, warmup_sz=5, seed=0) + synth_transitions(4)
    with pytest.raises(WarmupNotReached): m.sample()
    m + synth_transitions(4, start=4)
    m.update_td(torch.arange(8.), torch.arange(8))
    part = m[2:6]
    assert isinstance(part, PrioritizedExperienceReplay) and len(part) == 4
    assert torch.equal(part.get_priority(range(4)), m.get_priority([2, 3, 4, 5]))
    assert part.memory['step'][:, 0].tolist() == [2, 3, 4, 5]

@pytest.mark.cuda
@pytest.mark.parametrize('tree_device', [None, 'cuda'])
def test_cuda_sample_and_update_stay_on_the_device(tree_device):
    c = PrioritizedExperienceReplay(bs=64, max_sz=100, warmup_sz=10, alpha=1., eps=1e-9, device='cuda',
                                    tree_device=tree_device, seed=3)
    assert c.tree.device.type == (tree_device or 'cpu') and c.generator.device.type == (tree_device or 'cpu')
    for step in range(10): c + synth_transitions(13, start=13 * step)
    b, idxs = c.sample()
    assert idxs.device.type == 'cuda' and b['weight'].device.type == 'cuda' and b['state'].device.type == 'cuda'
    td = torch.rand(64, device='cuda') + 0.5
    c.update_td(td, idxs)
    rows, vals = idxs.cpu().tolist(), td.cpu().tolist()
    last = {r: v for r, v in zip(rows, vals)}
    torch.testing.assert_close(c.get_priority(list(last)).cpu(), torch.tensor(list(last.values()), dtype=torch.float64) + 1e-9)
    assert c.tree.total == pytest.approx(c.get_priority(range(100)).sum().item())

@pytest.mark.cuda
@pytest.mark.parametrize('weight_norm', ['memory', 'batch', None])
def test_cuda_storage_with_the_cpu_tree_equals_cpu_storage(weight_norm):
    "The same seed gives the same rows, weights, priorities and TD errors whether the transitions live on the GPU or not"
    mems = [PrioritizedExperienceReplay(bs=32, max_sz=50, warmup_sz=10, alpha=0.7, weight_norm=weight_norm, device=d, seed=1)
            for d in ('cpu', 'cuda')]
    g = torch.Generator().manual_seed(0)
    for step in range(12):
        new = synth_transitions(7, start=7 * step)
        td = torch.randn(32, generator=g)
        for m in mems:
            m + new.to(m.device)
            if len(m) < 10: continue
            b, idxs = m.sample()
            assert idxs.device.type == b['weight'].device.type == b['state'].device.type == m.device.type
            m + synth_transitions(3, start=1000 + 3 * step).to(m.device)  # rows sampled above may be overwritten: stale
            m.update_td(td[:, None].to(m.device), idxs)
    cpu, gpu = mems
    assert torch.equal(cpu.get_priority(range(50)), gpu.get_priority(range(50)))
    assert torch.equal(cpu.memory['td_error'], gpu.memory['td_error'].cpu())
    assert torch.equal(cpu.sample_counts, gpu.sample_counts) and cpu.n_stale == gpu.n_stale > 0
    (b0, i0), (b1, i1) = cpu.sample(), gpu.sample()
    assert torch.equal(i0, i1.cpu()) and torch.equal(b0['weight'], b1['weight'].cpu()) and torch.equal(b0['step'], b1['step'].cpu())

def test_sampling_draws_on_the_tree_device():
    m = PrioritizedExperienceReplay(bs=4, max_sz=8, warmup_sz=1, seed=0) + synth_transitions(8)
    assert m.tree.device.type == m.generator.device.type == 'cpu' and m.tree.backend == 'numba'
    assert m[2:5].tree.device.type == 'cpu' and m[2:5].sampler.settings()['tree_device'] == torch.device('cpu')

@pytest.mark.cuda
def test_a_generator_on_the_storage_device_is_refused_when_the_tree_is_on_the_cpu():
    with pytest.raises(ExperienceReplayException, match=r'generator is on cuda(:0)?, sampling draws on cpu'):
        PrioritizedExperienceReplay(device='cuda', generator=torch.Generator('cuda'))


def test_a_tree_device_this_machine_lacks_is_refused_when_made():
    "`tree_device` (and a sum tree's `device`) go through `as_device`: a device the machine lacks is refused at once"
    absent = f'cuda:{torch.cuda.device_count()}'  # one past the last CUDA device: none on any machine
    with pytest.raises(ExperienceReplayException, match=f"tree_device '{absent}' is not available: this machine has"):
        PrioritizedExperienceReplay(bs=2, max_sz=8, warmup_sz=2, tree_device=absent)
    with pytest.raises(ExperienceReplayException, match=f"device '{absent}' is not available"):
        SumTree(8, device=absent)
    mem = PrioritizedExperienceReplay(bs=2, max_sz=8, warmup_sz=2, tree_device=None)
    assert mem.sampler.tree_device == torch.device('cpu')


@pytest.mark.parametrize('stratified', [True, False])
@pytest.mark.parametrize('weight_norm', ['memory', 'batch', None])
def test_compiled_passes_match_the_tree_called_step_by_step(stratified, weight_norm):
    "The one-kernel add, sample and update equal a `SumTree` driven call by call, as the rules say: bit for bit"
    C, alpha, eps, beta = 50, 0.6, 1e-6, 0.4
    m = per(bs=16, max_sz=C, warmup_sz=1, alpha=alpha, beta=beta, beta_steps=0, eps=eps, stratified=stratified,
            weight_norm=weight_norm, seed=3)
    ref, g, rng = SumTree(C), torch.Generator(), torch.Generator().manual_seed(0)
    g.set_state(m.generator.get_state())
    s = dict(maxp=1., ptr=0, n=0, stale=0, counts=np.zeros(C, np.int64), td=np.zeros(C, np.float32))
    def add(k, start):
        m + synth_transitions(k, start=start)
        ref.fill(s['ptr'], k, s['maxp'])
        rows = (s['ptr'] + np.arange(k)) % C
        s['counts'][rows], s['td'][rows], s['ptr'], s['n'] = 0, 0., (s['ptr'] + k) % C, min(s['n'] + k, C)
    for step in range(60):
        add(int(torch.randint(1, 23, (1,), generator=rng)), 1000 * step)
        b, idxs = m.sample()
        want = (ref.stratified_sample if stratified else ref.sample)(16, g)
        assert torch.equal(idxs, want)
        np.add.at(s['counts'], want.numpy(), 1)
        assert torch.equal(b['weight'][:, 0], ref.weights(want, beta, weight_norm, n_rows=s['n']))
        if step % 4 == 1: add(9, 1000 * step + 500)  # some sampled rows are overwritten before their update: stale
        fresh = m.sampler.fresh(idxs)
        td = torch.randn(16, generator=rng) * 10 ** float(torch.randint(-3, 3, (1,), generator=rng))
        m.update_td(td, idxs)
        rows, tds, s['stale'] = idxs[fresh].tolist(), td[fresh].tolist(), s['stale'] + int((~fresh).sum())
        pri = [(abs(x) + eps) ** alpha for x in tds]
        ref.set(np.array(rows, np.int64), np.array(pri))
        for r, x in zip(rows, tds): s['td'][r] = x
        s['maxp'] = max([s['maxp']] + pri)
        assert torch.equal(m.tree.sum_tree, ref.sum_tree) and torch.equal(m.tree.min_tree, ref.min_tree)
        assert m.max_priority == s['maxp'] and m.n_stale == s['stale']
        assert np.array_equal(m.sample_counts.numpy(), s['counts'])
        assert np.array_equal(m.sampler.td_errors.numpy(), s['td'])
