"`SumTree` against a NumPy reference, the statistics of its samplers, and bad input that must leave it untouched."
import math, warnings
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st, HealthCheck
from fastrl_replay.memory.sumtree import SumTree
from fastrl_replay.errors import ExperienceReplayException

CHI2_7DOF_P001 = 24.32  # chi-square critical value at p = 0.001 for 7 degrees of freedom

class Reference:
    "Leaves in a plain array, written one at a time, so the last of repeated indices wins"
    def __init__(self, capacity):
        self.leaves = np.zeros(capacity)
    def set(self, idxs, values):
        for i, v in zip(idxs, values): self.leaves[i] = v
    @property
    def min(self): return self.leaves[self.leaves > 0].min() if (self.leaves > 0).any() else math.inf

def padded(t, ref):
    "The reference leaves padded to the tree's power-of-two size: 0 in the sum tree, +inf for leaves holding 0 in the min tree"
    sums, mins = np.zeros(t.size), np.full(t.size, math.inf)
    sums[:t.capacity] = ref.leaves
    mins[:t.capacity] = np.where(ref.leaves > 0, ref.leaves, math.inf)
    return sums, mins

def check_against(t, ref):
    "Every internal node is the sum (the min) of the leaves below it, and the public API agrees with `ref`"
    sums, mins = padded(t, ref)
    st_, mt = t.sum_tree.cpu().numpy(), t.min_tree.cpu().numpy()
    for level in range(t.depth + 1):  # level 0 is the root; the nodes of a level are 2**level .. 2**(level+1) - 1
        nodes = slice(2 ** level, 2 ** (level + 1))
        np.testing.assert_array_equal(st_[nodes], sums.reshape(2 ** level, -1).sum(1))
        np.testing.assert_array_equal(mt[nodes], mins.reshape(2 ** level, -1).min(1))
    assert t.total == ref.leaves.sum()
    assert t.min == ref.min
    np.testing.assert_array_equal(t.get(torch.arange(t.capacity)).cpu().numpy(), ref.leaves)
    np.testing.assert_array_equal(t.leaves.cpu().numpy(), ref.leaves)

def snapshot(t): return t.sum_tree.clone(), t.min_tree.clone()

def assert_bit_identical(a, b):
    for x, y in zip(a, b): assert torch.equal(x.view(torch.int64), y.view(torch.int64))

# values that are multiples of 1/4 up to 16, a third of them 0: every sum is exact in float64, so the tree and
# NumPy must agree to the bit whatever order they add in
dyadic = st.one_of(st.just(0.), st.integers(0, 64).map(lambda k: k / 4))

@st.composite
def histories(draw, values=dyadic):
    "A capacity (not only powers of two) and a few batches of writes, with repeated indices within a batch"
    cap = draw(st.integers(1, 40))
    batch = st.lists(st.tuples(st.integers(0, cap - 1), values), max_size=12)
    return cap, draw(st.lists(batch, min_size=1, max_size=6))

BACKENDS = ['numba', 'torch']

@pytest.mark.parametrize('backend', BACKENDS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.data())
def test_matches_numpy_reference(backend, hist, data):
    cap, batches = hist
    t, ref = SumTree(cap, backend=backend), Reference(cap)
    assert (t.total, t.min) == (0., math.inf)
    for batch in batches:
        idxs, values = [i for i, _ in batch], [v for _, v in batch]
        as_ = data.draw(st.sampled_from(['tensor', 'list', 'numpy']))
        if as_ == 'tensor': t.set(torch.tensor(idxs, dtype=torch.long), torch.tensor(values, dtype=torch.float64))
        elif as_ == 'numpy': t.set(np.array(idxs, dtype=np.int64), np.array(values, dtype=np.float32))
        else: t.set(idxs, values)
        ref.set(idxs, values)
        check_against(t, ref)
        total = ref.leaves.sum()
        if total == 0:
            with pytest.raises(ValueError, match='no mass'): t.find([0.])
            continue
        cum = np.cumsum(ref.leaves)
        fracs = data.draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=20))
        qs = np.concatenate([np.array(fracs) * total, cum[cum < total], [0.]])  # random masses and every boundary
        np.testing.assert_array_equal(t.find(torch.from_numpy(qs)).numpy(), np.searchsorted(cum, qs, side='right'))
        # a query equal to the total goes to the last leaf with mass
        assert t.find([total]).item() == np.flatnonzero(ref.leaves)[-1]

ANY_FLOATS = st.one_of(st.just(0.), st.floats(0, 1e6), st.floats(0, 1e-6))

@pytest.mark.parametrize('backend', BACKENDS)
@settings(max_examples=150, deadline=None)
@given(histories(values=ANY_FLOATS), st.data())
def test_arbitrary_floats_structure_and_no_zero_leaf(backend, hist, data):
    "With any floats the nodes are still exactly `left + right` of their children, and `find` never lands on a 0 leaf"
    cap, batches = hist
    t, ref = SumTree(cap, backend=backend), Reference(cap)
    for batch in batches:
        t.set([i for i, _ in batch], [v for _, v in batch])
        ref.set([i for i, _ in batch], [v for _, v in batch])
    sums, mins = padded(t, ref)
    tree, mtree = np.zeros(2 * t.size), np.full(2 * t.size, math.inf)
    tree[t.size:], mtree[t.size:] = sums, mins
    for k in range(t.size - 1, 0, -1):
        tree[k], mtree[k] = tree[2 * k] + tree[2 * k + 1], min(mtree[2 * k], mtree[2 * k + 1])
    np.testing.assert_array_equal(t.sum_tree.numpy()[1:], tree[1:])
    np.testing.assert_array_equal(t.min_tree.numpy()[1:], mtree[1:])
    assert t.min == ref.min
    assert t.total == pytest.approx(math.fsum(ref.leaves), rel=1e-12, abs=0)
    if t.total > 0:
        fracs = data.draw(st.lists(st.floats(0, 1), min_size=1, max_size=20))
        qs = torch.tensor(fracs, dtype=torch.float64) * t.sum_tree[1]
        qs = torch.cat([qs, t.sum_tree[1:2], torch.tensor([np.nextafter(t.total, 0)])])
        assert (t.get(t.find(qs)) > 0).all()

@settings(max_examples=200, deadline=None)
@given(histories(values=ANY_FLOATS), st.integers(0, 2**32 - 1))
def test_numba_and_torch_backends_agree_to_the_bit(hist, seed):
    "The compiled loops and the level-by-level tensor code build the same trees and draw the same leaves"
    cap, batches = hist
    a, b = SumTree(cap, backend='numba'), SumTree(cap, backend='torch')
    for batch in batches:
        idxs, values = [i for i, _ in batch], [v for _, v in batch]
        a.set(idxs, values); b.set(idxs, values)
        assert_bit_identical(snapshot(a), snapshot(b))
    if a.total > 0:
        for method in ('sample', 'stratified_sample'):
            draws = getattr(a, method)(64, torch.Generator().manual_seed(seed))
            assert torch.equal(draws, getattr(b, method)(64, torch.Generator().manual_seed(seed)))
        qs = torch.rand(64, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * a.sum_tree[1]
        assert torch.equal(a.find(qs), b.find(qs))

def test_backend_choice():
    assert SumTree(4).backend == 'numba'
    assert SumTree(4, backend='torch').backend == 'torch'
    with pytest.raises(ValueError, match="backend must be 'numba' or 'torch', got 'cuda'"): SumTree(4, backend='cuda')
    with pytest.raises(ExperienceReplayException, match="device must hold values .*, got 'meta'"):
        SumTree(4, device='meta')  # `as_device`'s: a device that keeps no values, as one the machine lacks, is refused

@pytest.mark.cuda
def test_the_numba_backend_runs_on_the_cpu_only():
    with pytest.raises(ValueError, match="backend 'numba' runs on the CPU only, got device cuda"):
        SumTree(4, device='cuda', backend='numba')

def test_repeated_indices_last_write_wins_in_a_big_batch():
    t, g = SumTree(3), torch.Generator().manual_seed(0)
    idxs = torch.randint(3, (10_000,), generator=g)
    values = torch.arange(10_000, dtype=torch.float64)
    t.set(idxs, values)
    last = [max(j for j in range(10_000) if idxs[j] == i) for i in range(3)]
    assert t.leaves.tolist() == [float(j) for j in last]
    assert t.total == float(sum(last))

def test_capacity_one_and_float32_values():
    t = SumTree(1)
    assert (t.size, t.depth) == (1, 0)
    t.set([0, 0], torch.tensor([0.1, 0.3], dtype=torch.float32))
    assert t.total == float(torch.tensor(0.3, dtype=torch.float32))
    assert t.find([0., t.total]).tolist() == [0, 0]
    assert t.sample(5, torch.Generator().manual_seed(0)).tolist() == [0] * 5

def test_python_floats_are_kept_as_float64():
    t = SumTree(4).set([0, 1], [0.1, 65536.64453125])
    assert t.get([0, 1]).tolist() == [0.1, 65536.64453125]
    assert t.find([0.1 + 65536.64453125 - 1e-9]).item() == 1

def test_values_that_require_grad_are_detached():
    td = torch.tensor([0.5, 2.], requires_grad=True)
    t = SumTree(4).set([1, 2], td.abs() + 0.01)
    assert not t.sum_tree.requires_grad and not t.min_tree.requires_grad
    assert t.get([1, 2]).tolist() == [float(torch.tensor(0.51)), float(torch.tensor(2.01))]

def test_no_drift_after_many_updates():
    "Recomputing parents from children: after a long history the total is exactly the sum of the current leaves"
    t, g = SumTree(1000), torch.Generator().manual_seed(0)
    for _ in range(300):
        t.set(torch.randint(1000, (64,), generator=g), torch.rand(64, generator=g, dtype=torch.float64) * 1e3)
    t.set(torch.arange(1000), torch.full((1000,), 0.25, dtype=torch.float64))
    assert t.total == 250.
    assert t.min == 0.25

def chi2(counts, probs):
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())

VALUES = torch.tensor([3., 1., 4., 1.5, 9., 2.6, 5., 0.5], dtype=torch.float64)

@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('method', ['sample', 'stratified_sample'])
def test_frequencies_match_values_chi_square(method, backend):
    t, n = SumTree(8, backend=backend).set(range(8), VALUES), 200_000
    draws = getattr(t, method)(n, torch.Generator().manual_seed(1234))
    assert draws.dtype == torch.int64 and draws.shape == (n,)
    counts = torch.bincount(draws, minlength=8).double()
    probs = VALUES / VALUES.sum()
    assert chi2(counts, probs) < CHI2_7DOF_P001
    if method == 'stratified_sample':
        # one draw per slice: a leaf gets its share of the slices, give or take its two boundary slices
        assert ((counts - probs * n).abs() <= 2).all()
        assert (draws.diff() >= 0).all()

def test_independent_draws_are_not_stratified():
    "The chi-square statistic of independent draws varies with the seed as it should: not always tiny"
    t = SumTree(8).set(range(8), VALUES)
    stats = [chi2(torch.bincount(t.sample(2000, torch.Generator().manual_seed(s)), minlength=8).double(), VALUES / VALUES.sum())
             for s in range(20)]
    assert max(stats) > 3  # stratified draws stay near 0

@pytest.mark.parametrize('method', ['sample', 'stratified_sample'])
def test_zero_leaves_and_padding_never_drawn(method):
    values = torch.tensor([0., 1e-300, 0., 7., 0., 0., 1e10, 0., 0.1, 0., 0.], dtype=torch.float64)  # capacity 11 -> 16
    t = SumTree(11).set(range(11), values)
    draws = getattr(t, method)(100_000, torch.Generator().manual_seed(0))
    assert set(draws.unique().tolist()) <= {1, 3, 6, 8}
    assert (t.get(draws) > 0).all()
    edges = torch.cumsum(values, 0)
    assert (t.get(t.find(torch.cat([edges, torch.tensor([0.])]))) > 0).all()

def test_seeded_samples_are_reproducible():
    t = SumTree(100).set(range(100), torch.rand(100, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    for method in (t.sample, t.stratified_sample):
        a, b = method(256, torch.Generator().manual_seed(7)), method(256, torch.Generator().manual_seed(7))
        assert torch.equal(a, b)
        assert not torch.equal(a, method(256, torch.Generator().manual_seed(8)))
    torch.manual_seed(3); a = t.sample(64)
    torch.manual_seed(3); assert torch.equal(a, t.sample(64))

BAD_SETS = [
    ([0, 1], [1., -1.], 'values must be finite and >= 0, got [-1.0]'),
    ([0], [float('nan')], 'got [nan]'),
    ([0, 2], [1., float('inf')], 'got [inf]'),
    ([0], [-0.5], 'got [-0.5]'),
    ([0, 10], [1., 1.], 'leaf indices must be in [0, 10), got [10]'),
    ([-1, 3], [1., 1.], 'got [-1]'),
    (torch.tensor([1., 2.]), [1., 1.], 'leaf indices must be integers, got dtype float32'),
    ([True], [1.], 'integers, got dtype bool'),
    ([0, 1, 2], [1., 2.], 'expected one value per leaf index, got 3 indices and 2 values'),
    ([0], [1., 2.], 'got 1 indices and 2 values'),
    ([0], torch.tensor([1 + 1j]), 'values must be real numbers, got dtype complex64'),
]

@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('idxs,values,msg', BAD_SETS)
def test_bad_input_raises_and_changes_nothing(idxs, values, msg, backend):
    t = SumTree(10, backend=backend).set([0, 3, 4, 9], [1., 2., 0., 5.])
    before = snapshot(t)
    with pytest.raises(ValueError) as e: t.set(idxs, values)
    assert msg in str(e.value)
    assert_bit_identical(before, snapshot(t))

@pytest.mark.parametrize('backend', BACKENDS)
def test_bad_queries_and_arguments(backend):
    t = SumTree(10, backend=backend).set([0, 3], [1., 2.])
    before = snapshot(t)
    for call, msg in [(lambda: t.get([10]), 'leaf indices must be in [0, 10)'),
                      (lambda: t.find([3.5]), 'query masses must be in [0, total=3.0], got [3.5]'),
                      (lambda: t.find([-1.]), 'got [-1.0]'),
                      (lambda: t.find([float('nan')]), 'got [nan]'),
                      (lambda: t.sample(0), 'n must be a positive int, got 0'),
                      (lambda: t.stratified_sample(2.5), 'n must be a positive int, got 2.5'),
                      (lambda: SumTree(0), 'capacity must be a positive int'),
                      (lambda: SumTree(True), 'capacity must be a positive int')]:
        with pytest.raises(ValueError, match=None) as e: call()
        assert msg in str(e.value)
    assert_bit_identical(before, snapshot(t))

@pytest.mark.parametrize('method', ['sample', 'stratified_sample'])
def test_no_mass_raises(method):
    for t in (SumTree(5), SumTree(5).set([1, 2], [3., 4.]).set([2, 1], [0., 0.])):
        with pytest.raises(ValueError, match='the tree has no mass'): getattr(t, method)(4, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match='the tree has no mass'): SumTree(5).find([0.])

def test_unchecked_set_matches_checked():
    g = torch.Generator().manual_seed(0)
    a, b = SumTree(37), SumTree(37)
    for _ in range(20):
        i, v = torch.randint(37, (16,), generator=g), torch.rand(16, generator=g, dtype=torch.float64)
        a.set(i, v); b.set(i, v, check=False)
    assert_bit_identical(snapshot(a), snapshot(b))
    assert torch.equal(a.sample(32, torch.Generator().manual_seed(1)), b.sample(32, torch.Generator().manual_seed(1), check=False))

@pytest.mark.cuda
def test_cuda_matches_cpu():
    g = torch.Generator().manual_seed(0)
    cpu, gpu = SumTree(1000), SumTree(1000, device='cuda')
    for _ in range(10):
        i = torch.randint(1000, (4096,), generator=g)  # many repeats per batch
        v = torch.rand(4096, generator=g, dtype=torch.float64)
        cpu.set(i, v); gpu.set(i.cuda(), v.cuda(), check=False)
    assert torch.equal(cpu.sum_tree, gpu.sum_tree.cpu()) and torch.equal(cpu.min_tree, gpu.min_tree.cpu())
    qs = torch.rand(10_000, generator=g, dtype=torch.float64) * cpu.sum_tree[1]
    assert torch.equal(cpu.find(qs), gpu.find(qs.cuda()).cpu())
    gg = torch.Generator('cuda')
    for method in ('sample', 'stratified_sample'):
        a = getattr(gpu, method)(256, gg.manual_seed(5))
        assert a.device.type == 'cuda' and a.dtype == torch.int64
        assert torch.equal(a, getattr(gpu, method)(256, gg.manual_seed(5)))
        assert (gpu.get(a) > 0).all()
    with pytest.raises(ValueError, match='generator is on cpu'): gpu.sample(4, torch.Generator())
    before = snapshot(gpu)
    with pytest.raises(ValueError, match='finite and >= 0'): gpu.set(torch.tensor([1], device='cuda'), torch.tensor([-1.], device='cuda'))
    assert_bit_identical(before, snapshot(gpu))

# --- bad input: the exact message, and both trees unchanged ------------------------------------------------------

@pytest.mark.parametrize('call,msg', [
    (lambda t: t.set([0, 1], [1., -2.]), 'values must be finite and >= 0, got [-2.0]'),
    (lambda t: t.set([0, 1], [float('nan'), math.inf]), 'values must be finite and >= 0, got [nan, inf]'),
    (lambda t: t.set([0, 5], [1., 1.]), 'leaf indices must be in [0, 5), got [5]'),
    (lambda t: t.set([-1], [1.]), 'leaf indices must be in [0, 5), got [-1]'),
    (lambda t: t.set([0.5], [1.]), 'leaf indices must be integers, got dtype float64'),
    (lambda t: t.set([0, 1, 2], [1., 2.]), 'expected one value per leaf index, got 3 indices and 2 values'),
    (lambda t: t.get([7]), 'leaf indices must be in [0, 5), got [7]'),
    (lambda t: t.find([7.5]), 'query masses must be in [0, total=7.0], got [7.5]'),
    (lambda t: t.find([float('nan')]), 'query masses must be in [0, total=7.0], got [nan]'),
    (lambda t: t.sample(0), 'n must be a positive int, got 0'),
])
@pytest.mark.parametrize('backend', ['numba', 'torch'])
def test_bad_input_names_the_problem_and_changes_nothing(call, msg, backend):
    t = SumTree(5, backend=backend).set(range(5), [1., 2., 0., 4., 0.])
    before = t.sum_tree.clone(), t.min_tree.clone()
    with pytest.raises(ValueError) as e: call(t)
    assert msg in str(e.value), (msg, str(e.value))
    assert torch.equal(t.sum_tree, before[0]) and torch.equal(t.min_tree, before[1])

@pytest.mark.parametrize('call', [lambda: SumTree(3).find([0.]), lambda: SumTree(3).sample(4),
                                  lambda: SumTree(3).set([0], [0.]).stratified_sample(4)])
def test_a_tree_without_mass_cannot_be_sampled(call):
    with pytest.raises(ValueError, match='the tree has no mass'): call()


@pytest.mark.parametrize('norm', ['memory', 'batch'])
def test_weights_of_a_tiny_smallest_priority_do_not_overflow(norm):
    "A priority 10^310 times the smallest: its weight is (10^-310)^β, not the 0 of an overflowed (p / p_min)^-β, and nothing warns"
    from fastrl_replay.memory.sumtree import per_weights
    p = np.array([1e10, 1.0, 1e-300])
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        w = per_weights(p, 0.4, norm, p_min=1e-300)
    np.testing.assert_allclose(w, [1e-310 ** 0.4, 1e-300 ** 0.4, 1.0], rtol=1e-12)

# --- the compiled kernels against plain loops written here --------------------------------------------------------

def plain_tree(leaves, size):
    "Both trees of `leaves` built bottom up, every node from its two children"
    sums, mins = np.zeros(2 * size), np.full(2 * size, math.inf)
    sums[size:size + len(leaves)] = leaves
    mins[size:size + len(leaves)] = np.where(leaves > 0, leaves, math.inf)
    for k in range(size - 1, 0, -1): sums[k], mins[k] = sums[2 * k] + sums[2 * k + 1], min(mins[2 * k], mins[2 * k + 1])
    return sums, mins

def assert_trees_are(t, sums, mins):
    "Both trees of `t`, nodes 1 on, hold exactly the bits of `sums` and `mins`"
    for a, b in ((t.sum_tree.numpy(), sums), (t.min_tree.numpy(), mins)):
        assert np.array_equal(a[1:].view(np.int64), b[1:].view(np.int64))

def test_fill_matches_a_tree_built_from_its_leaves():
    "Every run of leaves, wrapping or not, over leaves already holding arbitrary floats, for capacities 1 to 13"
    rng = np.random.default_rng(0)
    for cap in range(1, 14):
        for start in range(cap):
            for n in range(cap + 1):
                t = SumTree(cap)
                before = rng.random(cap) * 10. ** rng.integers(-3, 4, cap) * (rng.random(cap) < 0.7)
                t.set(np.arange(cap), before)
                value = float(rng.choice([0., 0.3, 1e-200, 7.5]))
                t.fill(start, n, value)
                leaves = before.copy()
                leaves[(start + np.arange(n)) % cap] = value
                assert_trees_are(t, *plain_tree(leaves, t.size))

def walk_per_leaf(sums, mins, size, idxs, vals):
    "The plain `set`: write the leaves in order, then walk up from each written leaf, one path at a time"
    for i, v in zip(idxs, vals): sums[i + size], mins[i + size] = v, v if v > 0 else math.inf
    for i in idxs:
        k = (i + size) >> 1
        while k:
            sums[k], mins[k] = sums[2 * k] + sums[2 * k + 1], min(mins[2 * k], mins[2 * k + 1])
            k >>= 1

@settings(max_examples=300, deadline=None)
@given(st.integers(1, 70), st.lists(st.tuples(st.integers(0, 10**6), ANY_FLOATS), min_size=1, max_size=40),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_set_matches_per_leaf_walks(cap, writes, in_order, seed):
    "In order (a parent walked once) or not, `set` leaves both trees as plain walks up from each leaf do, bit for bit"
    idxs = np.array([i % cap for i, _ in writes], np.int64)
    vals = np.array([v for _, v in writes])
    if in_order: idxs = np.sort(idxs)
    t = SumTree(cap)
    start = np.random.default_rng(seed).random(cap) * (np.random.default_rng(seed + 1).random(cap) < 0.6)
    t.set(np.arange(cap), start)
    sums, mins = t.sum_tree.numpy().copy(), t.min_tree.numpy().copy()
    t.set(idxs, vals, check=False)
    walk_per_leaf(sums, mins, t.size, idxs, vals)
    assert_trees_are(t, sums, mins)

@pytest.mark.parametrize('norm', ['memory', 'batch', None])
def test_leaf_weights_match_per_weights(norm):
    "The compiled weights of drawn leaves are `per_weights` of their values, as float32, bit for bit, for any beta"
    from fastrl_replay.memory.sumtree import per_weights, leaf_weights
    rng = np.random.default_rng(1)
    t = SumTree(1000).set(np.arange(1000), rng.random(1000) ** 4 * 1e3 + 1e-9)
    idxs = t.stratified_sample(512, torch.Generator().manual_seed(0)).numpy()
    p, codes = t.sum_tree.numpy()[idxs + t.size], {'memory': 0, 'batch': 1, None: 2}
    for beta in (0., 0.4, 0.5, 1., 2., 1, 3, 0.123456789):
        out = np.empty(len(idxs), np.float32)
        leaf_weights(t.host_sums, t.size, idxs, float(beta), codes[norm], t.host_mins[1], 1000., t.host_sums[1], out)
        want = per_weights(p, beta, norm, p_min=t.host_mins[1], n_rows=1000, total=t.host_sums[1]).astype(np.float32)
        assert np.array_equal(out.view(np.int32), want.view(np.int32)), beta
        assert np.array_equal(out, t.weights(idxs, beta, norm, n_rows=1000).numpy())
