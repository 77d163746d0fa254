"`CircularReplayBuffer` against a naive memory of full stacked transitions, its named edge cases, bad input and priorities."
import numpy as np, pytest, torch
from scipy.stats import chi2
from hypothesis import given, settings, strategies as st, HealthCheck
from fastrl_replay.core import BD
from fastrl_replay.compat.reagent import CircularReplayBuffer, NoValidTransitions
from fastrl_replay.memory.experience_replay import ExperienceReplayException, WarmupNotReached

OBS = (2,)

def frame(serial, env): return np.array([serial + 1, env], np.int32)  # every stored frame names its step
def final_frame(serial, env): return np.array([-(serial + 1), env], np.int32)  # and every kept final observation
ZERO = np.zeros(OBS, np.int32)

class NaiveMemory:
    """Every step ever added, and for each one the full stacked transition it starts, built from the whole history.
    It keeps stacks and next stacks in full, so it never needs a stored frame: it is right whatever was overwritten."""
    def __init__(self, stack, n, gamma, padding):
        self.S, self.n, self.gamma, self.padding = stack, n, gamma, padding
        self.steps, self.episodes, self.open = [], [], {}  # open: env -> index of its running episode

    def add(self, env, reward, term, trunc):
        s = len(self.steps)
        ep = self.open.get(env)
        if ep is None: ep = self.open[env] = len(self.episodes); self.episodes.append([])
        self.episodes[ep].append(s)
        self.steps.append(dict(env=env, reward=np.float32(reward), term=term, trunc=trunc and not term, ep=ep,
                               pos=len(self.episodes[ep]) - 1, final=final_frame(s, env) if trunc and not term else None))
        if term or trunc: del self.open[env]
        return s

    def frame_at(self, ep, pos, end_frame):
        "The frame at step `pos` of episode `ep`: padding before it starts, `end_frame` one past its last stored step"
        steps = self.episodes[ep]
        if pos < 0: return ZERO if self.padding == 'zero' else frame(steps[0], self.steps[steps[0]]['env'])
        if pos < len(steps): return frame(steps[pos], self.steps[steps[pos]]['env'])
        return end_frame

    def transition(self, s):
        """The transition starting at serial `s` and the serials it reads, or None while it is incomplete (it needs a
        step not added yet)"""
        st_ = self.steps[s]
        ep, p, steps = st_['ep'], st_['pos'], self.episodes[st_['ep']]
        R, k, end = 0, 0, None
        for i in range(self.n):
            if p + i >= len(steps): return None
            x = self.steps[steps[p + i]]
            R, k = R + self.gamma ** i * float(x['reward']), i + 1
            if x['term'] or x['trunc']: end = x; break
        if end is None and p + k >= len(steps): return None
        end_frame = None if end is None else (ZERO if end['term'] else end['final'])
        stack = lambda q: np.stack([self.frame_at(ep, j, end_frame) for j in range(q - self.S + 1, q + 1)])
        state, nxt = stack(p), stack(p + k)
        if self.S == 1: state, nxt = state[0], nxt[0]
        reads = steps[max(p - self.S + 1, 0):min(p + k, len(steps) - 1) + 1]
        return dict(state=state, next_state=nxt, reward=np.float32(R), discount=np.float32(self.gamma ** k),
                    terminated=bool(end is not None and end['term']), truncated=bool(end is not None and end['trunc']),
                    horizon=k, env_id=st_['env'], episode_id=ep + 1, reads=reads)

def serial_at(buf, row): return buf.add_count - 1 - (buf.add_count - 1 - row) % buf.replay_capacity

def check_all(buf, ref):
    "Every stored index: valid exactly when the naive transition is complete and stored, and then equal to it"
    size, lo = buf.size, buf.add_count - buf.replay_capacity
    valid = buf.valid_mask()
    assert not valid[size:].any()
    for row in range(size):
        s = serial_at(buf, row)
        tr = ref.transition(s)
        stored = tr is not None and min(tr['reads']) >= lo
        assert valid[row] == stored, (row, s, tr and tr['reads'], lo)
        assert buf.is_valid_transition(row) == stored
        if not stored and tr is not None:  # complete but rejected: a step it reads was overwritten, so a naive read
            gone = [d for d in tr['reads'] if d < lo]  # of its row would return another step's data
            assert gone and all(buf.storage.obs[d % buf.replay_capacity][0] != d + 1 for d in gone)
    rows = np.flatnonzero(valid)
    if not len(rows):
        with pytest.raises(NoValidTransitions): buf.sample_index_batch(4)
        return
    b = buf.sample_transition_batch(indices=rows)
    for j, row in enumerate(rows):
        tr = ref.transition(serial_at(buf, row))
        for key in ('state', 'next_state'): np.testing.assert_array_equal(b[key][j].numpy(), tr[key])
        assert b['reward'][j, 0].item() == tr['reward'] and b['reward'].dtype == torch.float32
        assert b['discount'][j, 0].item() == tr['discount']
        for key in ('terminated', 'truncated', 'horizon', 'env_id', 'episode_id'): assert b[key][j, 0].item() == tr[key], key
        assert b['action'][j, 0].item() == serial_at(buf, row) % 3
    all_valid = buf.sample_all_valid_transitions()
    assert torch.equal(all_valid['indices'], torch.from_numpy(rows))
    assert torch.equal(all_valid['state'], b['state'])

ENDS = {'': (False, False), 'term': (True, False), 'trunc': (False, True), 'both': (True, True)}

@st.composite
def histories(draw):
    cap, stack, n = draw(st.integers(1, 14)), draw(st.integers(1, 4)), draw(st.integers(1, 5))
    n_envs = draw(st.integers(1, 3))
    step = st.tuples(st.integers(0, n_envs - 1), st.sampled_from(['', '', '', '', 'term', 'trunc', 'both']), st.integers(-8, 8))
    return dict(cap=cap, stack=stack, n=n, gamma=draw(st.sampled_from([0.5, 0.9, 0.99])),
                padding=draw(st.sampled_from(['zero', 'first'])), prioritized=draw(st.booleans()),
                steps=draw(st.lists(step, min_size=1, max_size=45)), batched=draw(st.booleans()))

def fill(h):
    "A buffer and a naive memory fed the same steps of `h`, checked after every add"
    buf = CircularReplayBuffer(OBS, h['stack'], h['cap'], 4, update_horizon=h['n'], gamma=h['gamma'], observation_dtype=np.int32,
                               padding=h['padding'], prioritized=h['prioritized'], alpha=1., eps=0.5, warmup_sz=1, seed=0)
    ref = NaiveMemory(h['stack'], h['n'], h['gamma'], h['padding'])
    for env, end, r in h['steps']:
        term, trunc = ENDS[end]
        s = ref.add(env, r / 4, term, trunc)
        nxt = final_frame(s, env) if trunc else None
        if h['batched']:
            row = dict(state=frame(s, env)[None], action=np.array([[s % 3]]), reward=np.array([[r / 4]], np.float32),
                       terminated=np.array([[term]]), truncated=np.array([[trunc]]), env_id=np.array([[env]]),
                       next_state=(nxt if nxt is not None else ZERO)[None])
            buf + BD(row)
        else: buf.add(frame(s, env), s % 3, r / 4, term, truncated=trunc, next_observation=nxt, env_id=env)
        check_all(buf, ref)
        if h['prioritized']:  # exactly the valid transitions hold priority, and sampling draws only them
            valid = buf.valid_mask()[:buf.size]
            np.testing.assert_array_equal(buf.get_priority(np.arange(buf.size)).numpy() > 0, valid)
            if valid.any():
                b, idxs = buf.sample()
                assert valid[idxs.numpy()].all()
                buf.update_td(torch.arange(len(idxs), dtype=torch.float32), idxs)
    return buf, ref

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories())
def test_matches_naive_memory(h):
    fill(h)

def test_uniform_samples_only_valid_and_all_of_them():
    h = dict(cap=12, stack=3, n=2, gamma=0.9, padding='zero', prioritized=False, batched=False,
             steps=[(i % 2, 'term' if i % 7 == 6 else '', 1) for i in range(40)])
    buf, _ = fill(h)
    valid = np.flatnonzero(buf.valid_mask())
    draws = buf.sample_index_batch(3000).numpy()
    assert set(draws.tolist()) == set(valid.tolist())
    counts = np.bincount(draws, minlength=12)[valid]  # uniform over the valid ones: chi-square, p = 0.001
    expected = 3000 / len(valid)
    assert ((counts - expected) ** 2 / expected).sum() < chi2.ppf(0.999, len(valid) - 1)

# --- named edge cases --------------------------------------------------------------------------------------------

def buffer(stack=4, n=1, cap=16, padding='zero', gamma=0.5, **kw):
    return CircularReplayBuffer(OBS, stack, cap, 2, update_horizon=n, gamma=gamma, observation_dtype=np.int32,
                                padding=padding, seed=0, **kw)

def firsts(t): return t[..., 0].tolist()  # the serial + 1 of each frame (0 for padding, negative for a final frame)

@pytest.mark.parametrize('padding, states, next_states', [
    ('zero', [[0, 0, 0, 1], [0, 0, 1, 2]], [[0, 0, 1, 2], [0, 1, 2, 0]]),
    ('first', [[1, 1, 1, 1], [1, 1, 1, 2]], [[1, 1, 1, 2], [1, 1, 2, 0]])])
def test_episode_shorter_than_stack(padding, states, next_states):
    buf = buffer(padding=padding)
    buf.add(frame(0, 0), 0, 1., False)
    buf.add(frame(1, 0), 0, 1., True)
    b = buf.sample_transition_batch(indices=[0, 1])
    assert firsts(b['state']) == states and firsts(b['next_state']) == next_states
    assert b['terminated'].flatten().tolist() == [False, True]

def test_termination_on_the_first_step():
    buf = buffer(n=3)
    buf.add(frame(0, 0), 1, 2., True)
    buf.add(frame(1, 0), 0, 5., False)  # the next episode
    b = buf.sample_transition_batch(indices=[0])
    assert firsts(b['state']) == [[0, 0, 0, 1]] and firsts(b['next_state']) == [[0, 0, 1, 0]]
    assert (b['reward'].item(), b['discount'].item(), b['horizon'].item(), b['terminated'].item()) == (2., 0.5, 1, True)
    assert not buf.is_valid_transition(1)

@pytest.mark.parametrize('end', ['term', 'trunc'])
def test_episode_shorter_than_n(end):
    buf = buffer(stack=2, n=5)
    for s in range(3):
        last = s == 2
        buf.add(frame(s, 0), 0, float(s + 1), last and end == 'term', truncated=last and end == 'trunc',
                next_observation=final_frame(s, 0) if last and end == 'trunc' else None)
    b = buf.sample_transition_batch(indices=[0, 1, 2])
    assert b['reward'].flatten().tolist() == [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.]
    assert b['discount'].flatten().tolist() == [0.125, 0.25, 0.5]
    assert b['horizon'].flatten().tolist() == [3, 2, 1]
    end_frame = 0 if end == 'term' else -3
    assert firsts(b['next_state']) == [[3, end_frame]] * 3
    assert b['terminated'].flatten().tolist() == [end == 'term'] * 3
    assert b['truncated'].flatten().tolist() == [end == 'trunc'] * 3

def test_cursor_just_past_a_boundary():
    "The oldest rows lose the frames their stacks need as the cursor passes; an episode starting there needs none"
    buf = buffer(stack=3, cap=6)
    for s in range(6): buf.add(frame(s, 0), 0, 1., s == 3)  # episode 1: serials 0-3; episode 2: 4, 5
    assert buf.valid_mask().tolist() == [True, True, True, True, True, False]  # serial 5 waits for its next step
    buf.add(frame(6, 0), 0, 1., False)  # overwrites serial 0: the cursor is just past it, at row 1
    assert buf.cursor() == 1
    # row 0 is serial 6 (incomplete); serials 1 and 2 needed serial 0 for their stacks; serial 3 needs only 1 and 2
    assert buf.valid_mask().tolist() == [False, False, False, True, True, True]
    buf.add(frame(7, 0), 0, 1., False)  # overwrites serial 1, which serial 3 needs; serial 6 is complete now
    assert buf.valid_mask().tolist() == [True, False, False, False, True, True]
    assert firsts(buf.sample_transition_batch(indices=[4])['state']) == [[0, 0, 5]]  # episode 2 is whole
    assert firsts(buf.sample_transition_batch(indices=[0])['state']) == [[5, 6, 7]]

def test_full_wrap_keeps_the_last_capacity_steps():
    buf, ref = fill(dict(cap=5, stack=2, n=2, gamma=0.9, padding='zero', prioritized=False, batched=False,
                         steps=[(0, 'term' if s % 4 == 3 else '', s % 5) for s in range(23)]))
    assert buf.add_count == 23 and buf.cursor() == 3 and buf.is_full()
    assert sorted(buf.storage.obs[:, 0].tolist()) == list(range(19, 24))

def test_interleaved_envs_keep_separate_streams():
    buf = buffer(stack=3, n=2)
    for s in range(8): buf.add(frame(s, s % 2), 0, float(s), False, env_id=s % 2)
    b = buf.sample_transition_batch(indices=[2, 3])
    assert firsts(b['state']) == [[0, 1, 3], [0, 2, 4]]
    assert firsts(b['next_state']) == [[3, 5, 7], [4, 6, 8]]
    assert b['reward'].flatten().tolist() == [2 + 0.5 * 4, 3 + 0.5 * 5]
    assert b['env_id'].flatten().tolist() == [0, 1]

def test_truncation_keeps_the_final_observation_until_overwritten():
    buf = buffer(stack=2, cap=4)
    buf.add(frame(0, 0), 0, 1., False, truncated=True, next_observation=final_frame(0, 0))
    assert firsts(buf.sample_transition_batch(indices=[0])['next_state']) == [[1, -1]]
    for s in range(1, 4): buf.add(frame(s, 0), 0, 1., False, truncated=True, next_observation=final_frame(s, 0))
    assert (buf.storage.final_lo, buf.storage.final_hi) == (0, 4)
    buf.add(frame(4, 0), 0, 1., False, truncated=True, next_observation=final_frame(4, 0))  # overwrites serial 0
    assert (buf.storage.final_lo, buf.storage.final_hi) == (1, 5)
    for s in range(5, 40): buf.add(frame(s, 0), 0, 1., False, truncated=True, next_observation=final_frame(s, 0))
    assert len(buf.storage.finals) == 8  # live finals never exceed the 4 rows: the store does not keep growing
    assert firsts(buf.sample_all_valid_transitions()['next_state']) == [[37, -37], [38, -38], [39, -39], [40, -40]]

# --- bad input leaves the buffer as it was -----------------------------------------------------------------------

def state_of(buf): return (buf.add_count, buf.storage.obs.copy(), buf.storage.prev.copy(), buf.storage.next.copy(), buf.storage.reward.copy(),
                           buf.storage.final_hi, {k: list(v) for k, v in buf.storage.streams.items()})

def assert_same(a, b):
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray): np.testing.assert_array_equal(x, y)
        else: assert x == y

def test_bad_batches_change_nothing():
    buf = buffer(stack=2)
    for s in range(3): buf.add(frame(s, 0), 0, 1., False)
    before = state_of(buf)
    good = dict(state=np.stack([frame(3, 0), frame(4, 0)]), action=np.array([[0], [1]]), reward=np.ones((2, 1), np.float32),
                terminated=np.zeros((2, 1), bool))
    bad = [({**good, 'state': good['state'].astype(np.float64)}, 'dtype float64 cannot be stored as int32'),
           ({**good, 'action': np.array([[0], [0.5]])}, 'action: dtype float64 cannot be stored as int64 without loss'),
           ({**good, 'reward': np.array([[1.], [np.inf]])}, 'reward holds NaN or inf'),
           ({**good, 'reward': np.ones((3, 1), np.float32)}, "'reward' has shape (3, 1)"),
           ({**good, 'truncated': np.array([[False], [True]])}, "truncated rows need a 'next_state' column"),
           ({**good, 'env_id': np.array([[0], [-2]])}, 'env_id must be >= 0'),
           ({**good, 'state': np.zeros((2, 5), np.int32)}, "column 'state': expected shape (n, 2)"),
           ([good], 'got list')]
    for batch, msg in bad:
        with pytest.raises(ExperienceReplayException, match=None) as e: buf + batch
        assert msg in str(e.value), (msg, str(e.value))
        assert_same(state_of(buf), before)
    buf + good
    assert buf.add_count == 5

def test_settings_are_checked():
    for kw, msg in [(dict(stack_size=0), 'stack_size must be a positive int'), (dict(update_horizon=0), 'update_horizon'),
                    (dict(gamma=1.5), 'gamma must be in [0, 1]'), (dict(padding='edge'), "padding must be 'zero' or 'first'"),
                    (dict(warmup_sz=-1), 'warmup_sz must be an int >= 0'), (dict(observation_shape=(2.5,)), 'observation_shape'),
                    (dict(prioritized=True, eps=-1.), 'eps must be a finite number > 0'), (dict(seed=1, generator=torch.Generator()), 'either a generator or a seed')]:
        args = {**dict(observation_shape=OBS, stack_size=2, replay_capacity=4, batch_size=2), **kw}
        with pytest.raises(ExperienceReplayException, match=None) as e: CircularReplayBuffer(**args)
        assert msg in str(e.value)

def test_extras_are_stored_and_returned():
    from fastrl_replay.compat.reagent import ReplayElement
    buf = buffer(stack=1, extra_storage_types=[ReplayElement('log_prob', (), np.float32), ReplayElement('mask', (3,), np.bool_)])
    buf.add(frame(0, 0), 0, 1., False, -0.5, mask=np.array([True, False, True]))
    buf.add(frame(1, 0), 0, 1., True, log_prob=-1.5, mask=np.zeros(3, bool))
    b = buf.sample_transition_batch(indices=[0, 1])
    assert b['log_prob'].flatten().tolist() == [-0.5, -1.5] and b['mask'].tolist() == [[True, False, True], [False] * 3]
    with pytest.raises(ExperienceReplayException, match=r"missing extra elements \['mask'\]"): buf.add(frame(2, 0), 0, 1., False, -0.5)
    assert buf.add_count == 2
    rows = dict(state=np.stack([frame(2, 0), frame(3, 0)]), action=np.zeros((2, 1), np.int64), reward=np.ones((2, 1), np.float32),
                terminated=np.array([[False], [True]]), log_prob=np.array([[-2.5], [-3.5]], np.float32), mask=np.ones((2, 3), bool))
    with pytest.raises(ExperienceReplayException, match=r"batch columns missing \['mask'\]"): buf + {k: v for k, v in rows.items() if k != 'mask'}
    buf + rows
    b = buf.sample_transition_batch(indices=[2, 3])
    assert b['log_prob'].flatten().tolist() == [-2.5, -3.5] and b['mask'].all()

# --- priorities ----------------------------------------------------------------------------------------------------

def test_prioritized_sampling_follows_priorities_over_valid_transitions():
    buf = buffer(stack=2, n=1, cap=8, prioritized=True, alpha=1., beta=0.5, eps=1e-12)
    for s in range(8): buf.add(frame(s, 0), 0, 1., s == 7)
    valid = buf.valid_mask()
    assert valid.all()
    buf.update_td(np.array([1., 2., 3., 4., 0.5, 0.5, 0.5, 1.]), np.arange(8))
    counts = np.bincount(buf.sample_index_batch(1000).numpy(), minlength=8)
    assert counts.tolist() == [80, 160, 240, 320, 40, 40, 40, 80]  # stratified: each leaf gets its share of 1000 draws
    b = buf.sample_transition_batch(indices=[3, 4])
    np.testing.assert_allclose(b['weight'].flatten().numpy(), [(4 / 0.5) ** -0.5, 1.])
    buf.add(frame(8, 0), 0, 1., False)  # overwrites serial 0, which serial 1's stack needs; serial 8 is incomplete
    assert buf.get_priority([0, 1]).tolist() == [0., 0.]
    assert buf.get_priority([2]).tolist() == [pytest.approx(3.)]

def test_priorities_stay_exact_over_long_runs_without_samples():
    "More than 8,192 marked rows flush on their own; the tree still holds priority exactly on the valid transitions"
    buf = buffer(stack=3, n=3, cap=300, prioritized=True)
    rng = np.random.default_rng(0)
    for s in range(9_000):
        env = int(rng.integers(3))
        buf.add(frame(s, env), 0, 1., bool(rng.random() < 0.02), env_id=env)
    assert buf.storage.n_changed < 9_000
    np.testing.assert_array_equal(buf.get_priority(np.arange(300)).numpy() > 0, buf.valid_mask())

def test_few_valid_transitions_are_still_drawn_uniformly():
    "With 1 valid index in 41, redrawing gives up after 16 rounds and draws among the valid ones directly"
    buf = buffer(stack=1, cap=64)
    buf.add(frame(0, 0), 0, 1., True)  # one complete transition
    for e in range(1, 41): buf.add(frame(e, e), 0, 1., False, env_id=e)  # 40 environments, each one step in
    assert np.flatnonzero(buf.valid_mask()).tolist() == [0]
    assert buf.sample_index_batch(32).tolist() == [0] * 32


def test_no_valid_transition_yet_gives_an_empty_batch_of_the_right_shapes():
    "With n = 2 and one step stored, nothing is valid: every column comes back with 0 rows and its usual trailing shape"
    b = CircularReplayBuffer((2,), 1, 10, 2, update_horizon=2, observation_dtype=np.float32)
    b.add(np.zeros(2, np.float32), 0, 0., False)
    empty = b.sample_all_valid_transitions()
    b.add(np.ones(2, np.float32), 1, 1., False); b.add(np.ones(2, np.float32), 1, 1., False)
    one = b.sample_transition_batch(indices=[0])
    assert {k: tuple(v.shape) for k, v in empty.items()} == {k: (0, *v.shape[1:]) for k, v in one.items()}
    assert {k: tuple(v.shape) for k, v in b.sample_transition_batch(indices=[]).items()} == {k: (0, *v.shape[1:]) for k, v in one.items()}


def test_a_new_buffer_costs_no_resident_memory_for_rows_not_written():
    "Untouched rows are the kernel's zero pages: a buffer of 706 MB of frames grows the process by a few MB until it is written"
    import psutil
    proc = psutil.Process()
    r0 = proc.memory_info().rss
    b = CircularReplayBuffer((84, 84), 4, 100_000, 32)
    assert proc.memory_info().rss - r0 < 40e6
    assert b.storage.obs.nbytes == 705_600_000
