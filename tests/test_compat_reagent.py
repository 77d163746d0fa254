"""ReAgent's and Dopamine's replay buffers: their own tests' scenarios with exact values, a positional model of their ring
(padding rows, validity rules, stacks and n-step returns) over random histories, priorities, checkpoints and bad input."""
import numpy as np, pytest, torch
from scipy.stats import chi2
from fastrl_replay.compat.reagent import (ReplayBuffer, PrioritizedReplayBuffer, OutOfGraphReplayBuffer,
                                          OutOfGraphPrioritizedReplayBuffer, PaddedFrameStorage)
from fastrl_replay.memory.frames import ReplayElement
from fastrl_replay.memory.core import ExperienceReplayException, NoValidTransitions
from fastrl_replay.errors import CheckpointError
from fastrl_replay.memory.persist import load_memory

SCREEN = (84, 84)

def full(v, shape=SCREEN): return np.full(shape, v, np.uint8)

class Ring:
    """The ring as ReAgent and Dopamine lay it out, kept by position: `S - 1` zero rows open each episode, and an index
    is marked valid or invalid by their rules, one add at a time. Episodes end at a terminal step or at a cut (an
    episode end without a terminal state); the windows reaching a cut are never marked valid."""
    def __init__(self, S, C, n, gamma):
        self.S, self.C, self.n, self.gamma = S, C, n, gamma
        self.obs, self.act, self.rew, self.tag = (np.zeros(C, np.int64) for _ in range(4))
        self.term, self.valid, self.pad = np.zeros(C, bool), np.zeros(C, bool), np.zeros(C, bool)
        self.prio = np.zeros(C)
        self.count, self.in_episode, self.ended, self.top = 0, 0, True, 1.

    def _put(self, o, a, r, t, x, pad, p):
        c = self.count % self.C
        self.obs[c], self.act[c], self.rew[c], self.term[c], self.tag[c], self.pad[c], self.prio[c] = o, a, r, t, x, pad, p
        self.count += 1

    def add(self, o, a, r, t, x, cut=False, priority=None):
        S, C, n = self.S, self.C, self.n
        if self.ended:
            self.in_episode = 0
            for _ in range(S - 1): self._put(0, 0, 0, False, 0, True, 0.)
        cur = self.count % C
        self.valid[cur] = False
        if self.in_episode >= n: self.valid[(cur - n) % C] = True  # its window is complete now
        if priority is not None: self.top = max(self.top, priority)
        self._put(o, a, r, t, x, False, self.top if priority is None else priority)
        self.in_episode += 1
        for i in range(S - 1): self.valid[(self.count + i) % C] = False  # their stacks reach past the cursor
        if t:  # windows that end in this terminal step are complete
            for i in range(min(self.in_episode, n)): self.valid[(cur - i) % C] = True
        self.ended = bool(t or cut)

    def stack(self, col, at): return np.array([col[(at - self.S + 1 + j) % self.C] for j in range(self.S)])

    def transition(self, i):
        "What index `i` holds, read by position; a terminal transition's next stacks end in zeros"
        C, n = self.C, self.n
        rows = [(i + j) % C for j in range(n)]
        k = next((j + 1 for j, w in enumerate(rows) if self.term[w]), n)
        term = bool(self.term[rows[k - 1]])
        nxt = lambda col: np.concatenate([self.stack(col, i + k)[:-1], [0 if term else col[(i + k) % C]]])
        return dict(state=self.stack(self.obs, i), action=self.stack(self.act, i), tag=self.stack(self.tag, i),
                    reward=np.float32(sum(self.gamma ** j * self.rew[rows[j]] for j in range(k))), terminal=term, step=k,
                    next_state=nxt(self.obs), next_action=nxt(self.act), next_reward=nxt(self.rew), next_tag=nxt(self.tag),
                    reward_stack=self.stack(self.rew, i))

def reagent_row(b, j, S):
    "Transition `j` of a ReAgent sample of scalar columns, stacks as 1-d arrays"
    s = lambda v: np.atleast_1d(v[j].numpy())
    return dict(state=np.atleast_1d(b.state[j, 0].numpy()), action=s(b.action), tag=s(b.tag), reward=b.reward[j, 0].numpy(), terminal=bool(b.terminal[j, 0]),
                step=int(b.step[j, 0]), next_state=np.atleast_1d(b.next_state[j, 0].numpy()), next_action=s(b.next_action), next_reward=s(b.next_reward),
                next_tag=s(b.next_tag))

def check_against(buf, ring, S):
    "The buffer holds the ring's rows, the same valid indices, and the same transitions at each of them"
    st = buf.storage
    test_rows = np.arange(min(ring.count, ring.C))
    np.testing.assert_array_equal(st.obs[test_rows, 0], ring.obs[test_rows])
    np.testing.assert_array_equal(st.action[test_rows], ring.act[test_rows])
    np.testing.assert_array_equal(st.extra['_padding'][test_rows], ring.pad[test_rows])
    np.testing.assert_array_equal(buf.valid_mask(), ring.valid)
    assert (buf.add_count, buf.cursor(), buf.size) == (ring.count, ring.count % ring.C, int(ring.valid.sum()))
    if not ring.valid.any(): return
    b = buf.sample_all_valid_transitions()
    np.testing.assert_array_equal(b.indices[:, 0].numpy(), np.flatnonzero(ring.valid))
    for j, i in enumerate(np.flatnonzero(ring.valid)):
        want, got = ring.transition(i), reagent_row(b, j, S)
        for k in got: np.testing.assert_array_equal(got[k], want[k], err_msg=f'index {i}, {k}')

@pytest.mark.parametrize('S,n', [(1, 1), (1, 3), (2, 1), (2, 2), (3, 2), (4, 3)])
@pytest.mark.parametrize('seed', [0, 1])
def test_reagent_ring_model(S, n, seed):
    "Random episodes through small rings: after every add, rows, valid indices and every valid transition match the model"
    rng = np.random.default_rng(seed)
    C = n + S + int(rng.integers(0, 6))
    buf, ring = ReplayBuffer(S, C, 4, update_horizon=n, gamma=0.5, seed=seed), Ring(S, C, n, 0.5)
    for s in range(70):
        a, r, t = int(rng.integers(0, 5)), int(rng.integers(-3, 4)), bool(rng.random() < 0.25)
        buf.add(observation=np.array([s + 1, 0], np.int64), action=a, reward=r, terminal=t, tag=100 + s)
        ring.add(s + 1, a, r, t, 100 + s)
        check_against(buf, ring, S)

@pytest.mark.parametrize('S,n', [(1, 2), (2, 1), (3, 3)])
def test_dopamine_ring_model(S, n):
    "Dopamine's buffer with terminal steps and episodes cut short: rows, valid indices and transitions match the model"
    rng = np.random.default_rng(7)
    C = n + S + 4
    buf = OutOfGraphReplayBuffer((2,), S, C, 4, update_horizon=n, gamma=0.5, observation_dtype=np.int64, action_dtype=np.int64,
                                 extra_storage_types=[ReplayElement('tag', (), np.int64)], seed=0)
    ring = Ring(S, C, n, 0.5)
    for s in range(70):
        a, r, u = int(rng.integers(0, 5)), int(rng.integers(-3, 4)), rng.random()
        t, cut = u < 0.15, 0.15 <= u < 0.3
        buf.add(np.array([s + 1, 0]), a, r, t, 100 + s, episode_end=cut)
        ring.add(s + 1, a, r, t, 100 + s, cut=cut)
        np.testing.assert_array_equal(buf.valid_mask(), ring.valid)
        idx = np.flatnonzero(ring.valid)
        if not len(idx): continue
        b = buf.sample_transition_batch(len(idx), idx)
        for j, i in enumerate(idx):
            want = ring.transition(i)
            np.testing.assert_array_equal(b.state[j, 0], want['state'])
            assert (b.action[j], b.reward[j], b.terminal[j], b.tag[j]) == (want['action'][-1], want['reward'], want['terminal'], want['tag'][-1])
            np.testing.assert_array_equal(b.next_state[j, 0], want['next_state'])
            assert (b.next_action[j], b.next_reward[j]) == (want['next_action'][-1], want['next_reward'][-1])

def test_prioritized_ring_model():
    "Priorities given, defaulted and set: every index reads back the model's, padding 0, and only valid indices of priority > 0 are drawn"
    rng = np.random.default_rng(3)
    buf, ring = PrioritizedReplayBuffer(3, 13, 8, update_horizon=2, gamma=0.5, seed=0), Ring(3, 13, 2, 0.5)
    for s in range(60):
        t = bool(rng.random() < 0.3)
        p = None if rng.random() < 0.3 else float(rng.integers(0, 4))
        buf.add(observation=np.array([s + 1]), action=0, reward=1, terminal=t, priority=p, tag=s)
        ring.add(s + 1, 0, 1, t, s, priority=p)
        np.testing.assert_array_equal(buf.get_priority(range(13)), ring.prio.astype(np.float32))
        np.testing.assert_array_equal(buf.valid_mask(), ring.valid)
        if (ring.valid & (ring.prio > 0)).any():
            drawn = buf.sample_index_batch(16).numpy()
            assert (ring.valid[drawn] & (ring.prio[drawn] > 0)).all()

# ReAgent's tests of its ReplayBuffer, ported

def test_constructor_add_and_cursor():
    memory = ReplayBuffer(stack_size=4, replay_capacity=5, batch_size=32)
    assert (memory.add_count, memory.cursor(), memory.is_empty()) == (0, 0, True)
    memory.add(observation=np.zeros(SCREEN), action=0, reward=0, terminal=0)
    assert (memory.cursor(), memory.add_count, memory.is_empty(), memory.is_full()) == (4, 4, False, False)  # 3 padding rows, then the step

def test_extra_add_needs_the_same_extras():
    memory = ReplayBuffer(stack_size=4, replay_capacity=5, batch_size=32)
    memory.add(observation=np.zeros(SCREEN), action=0, reward=0, terminal=0, extra1=0, extra2=[0, 0])
    with pytest.raises(ExperienceReplayException, match=r"Add expects the extra elements \['extra1', 'extra2'\]; got \[\]"):
        memory.add(observation=np.zeros(SCREEN), action=0, reward=0, terminal=0)
    with pytest.raises(ExperienceReplayException, match=r"got \['extra1', 'extra2', 'extra3'\]"):
        memory.add(observation=np.zeros(SCREEN), action=0, reward=0, terminal=0, extra1=0, extra2=[0, 0], extra3=1)
    assert memory.cursor() == 4
    assert [(e.name, e.shape, e.type) for e in memory.storage.extras if e.name != '_padding'] == [
        ('extra1', (), np.dtype(np.int64)), ('extra2', (2,), np.dtype(np.int64))]

def test_low_capacity():
    for S, C, n in ((10, 10, 1), (5, 10, 10)):
        with pytest.raises(ExperienceReplayException, match='There is not enough capacity to cover update_horizon and stack_size'):
            ReplayBuffer(stack_size=S, replay_capacity=C, batch_size=32, update_horizon=n, gamma=1.0)
        with pytest.raises(ExperienceReplayException, match='not enough capacity'):
            OutOfGraphReplayBuffer(SCREEN, S, C, 32, update_horizon=n, gamma=1.0)
    assert ReplayBuffer(stack_size=5, replay_capacity=10, batch_size=32, update_horizon=5, gamma=1.0).replay_capacity == 10

def test_n_step_reward_sum():
    "50 steps of reward 2 through 10 rows with 5-step returns: only 2 indices are whole (stacks of 4 and 5 steps on), each worth 10"
    memory = ReplayBuffer(stack_size=4, replay_capacity=10, batch_size=32, update_horizon=5, gamma=1.0, seed=0)
    for i in range(50): memory.add(observation=full(i), action=0, reward=2.0, terminal=0)
    assert np.flatnonzero(memory.valid_mask()).tolist() == [6, 7]  # rows 6 and 7 hold steps 43 and 44; the newest step is 49
    for _ in range(20):
        b = memory.sample_transition_batch()
        assert b[2].flatten().tolist() == [10.0] * 32
        assert set(b.indices.flatten().tolist()) <= {6, 7}

def _terminal_every_four(extra=False, n_adds=50, C=10):
    memory = ReplayBuffer(stack_size=1, replay_capacity=C, batch_size=2, seed=0)
    for i in range(n_adds):
        kw = dict(extra1=i % 2, extra2=[i % 2, 0]) if extra else {}
        memory.add(observation=full(i), action=0, reward=0, terminal=i % 4, **kw)
    return memory

@pytest.mark.parametrize('extra', [False, True])
def test_sample_transition_batch(extra):
    memory = _terminal_every_four(extra)
    for bs, default in ((None, 2), (32, 32), (None, 2)):
        for _ in range(50): assert memory.sample_transition_batch(bs).state.shape == (default, *SCREEN)
    indices = [1, 2, 3, 5, 8]  # steps 41, 42, 43, 45 and 48; every step but each fourth is terminal
    b = memory.sample_transition_batch(batch_size=len(indices), indices=torch.tensor(indices))
    steps = np.array(indices) + 40
    terminal = steps % 4 != 0
    np.testing.assert_array_equal(b.state, np.stack([full(s) for s in steps]))
    # the next state of a terminal transition is zeros; ReAgent returns the row that follows (undefined contents)
    np.testing.assert_array_equal(b.next_state, np.stack([full(0 if t else s + 1) for s, t in zip(steps, terminal)]))
    np.testing.assert_array_equal(b.terminal, terminal[:, None])
    np.testing.assert_array_equal(b.indices, np.array(indices)[:, None])
    for col in (b.action, b.reward, b.next_action, b.next_reward): np.testing.assert_array_equal(col, np.zeros((5, 1)))
    assert b.step.flatten().tolist() == [1] * 5
    if extra:
        np.testing.assert_array_equal(b.extra1, (steps % 2)[:, None])
        np.testing.assert_array_equal(b.next_extra1, np.where(terminal, 0, (steps + 1) % 2)[:, None])
        np.testing.assert_array_equal(b.extra2, np.stack([steps % 2, np.zeros(5, int)], 1))
        np.testing.assert_array_equal(b.next_extra2, np.stack([np.where(terminal, 0, (steps + 1) % 2), np.zeros(5, int)], 1))
        assert b._fields[-4:] == ('extra1', 'next_extra1', 'extra2', 'next_extra2')

def test_sampling_with_terminal_in_trajectory():
    memory = ReplayBuffer(stack_size=1, replay_capacity=10, batch_size=2, update_horizon=3, gamma=1.0)
    for i in range(10): memory.add(observation=full(i), action=i * 2, reward=i, terminal=1 if i == 3 else 0)
    b = memory.sample_transition_batch(batch_size=3, indices=torch.tensor([2, 3, 4]))
    np.testing.assert_array_equal(b.state, np.stack([full(i) for i in (2, 3, 4)]))
    assert b.action.tolist() == [[4], [6], [8]]
    assert b.reward.tolist() == [[5.], [3.], [15.]]  # rewards 0 1 2 3* 4 5 ...: 2+3, 3, 4+5+6
    assert b.terminal.tolist() == [[True], [True], [False]]
    assert b.step.tolist() == [[2], [1], [3]]

def test_is_transition_valid():
    memory = ReplayBuffer(stack_size=4, replay_capacity=10, batch_size=2)
    for t in (0, 0, 1): memory.add(observation=full(0), action=0, reward=0, terminal=t)
    # three padding rows, then the episode; its last step is valid at once because it is terminal (ReAgent's rule)
    assert [memory.is_valid_transition(i) for i in range(10)] == [False] * 3 + [True] * 3 + [False] * 4
    assert memory.is_valid_transition(torch.tensor(4)) and not memory.is_valid_transition(10)
    with pytest.raises(ExperienceReplayException, match='an index is one int'): memory.is_valid_transition(1.5)

# ReAgent's stress tests of stacks, timelines and overflow

def _stacked(vals, i, S, start):
    "The stack at step i of an episode starting at step `start`, zeros before it"
    return np.stack([vals(j) if j >= start else vals(-1) * 0 for j in range(i - S + 1, i + 1)], -1)

@pytest.mark.parametrize('seed', [0, 1, 2])
def test_stack_slaughter(seed):
    "Episodes of random lengths filling a ring exactly: every column stacked, zeros before each episode, terminal at each end"
    S, rng = 7, np.random.default_rng(seed)
    lens = rng.integers(1, 30, int(rng.integers(1, 6))).tolist()
    memory = ReplayBuffer(stack_size=S, replay_capacity=sum(lens) + (len(lens) + 1) * (S - 1), batch_size=1,
                          return_everything_as_stack=True, seed=0)
    feats = dict(state=lambda i: np.ones((3, 3)) * i, action=lambda i: np.int64(i), reward=lambda i: np.float32(2 * i),
                 extra1=lambda i: np.float32(3 * i))
    i, expect, starts = 0, {k: [] for k in [*feats, 'terminal']}, []
    for L in lens:
        start = i
        for j in range(L):
            memory.add(observation=feats['state'](i), action=int(i), reward=float(2 * i), terminal=j == L - 1, extra1=float(3 * i))
            for k, f in feats.items(): expect[k].append(_stacked(f, i, S, start))
            expect['terminal'].append([j == L - 1])
            i += 1
    b = memory.sample_all_valid_transitions()
    for k, v in expect.items(): np.testing.assert_array_equal(getattr(b, k).numpy(), np.array(v), err_msg=k)
    assert b.state.dtype == torch.float32 and b.action.dtype == torch.int64

@pytest.mark.parametrize('seed', [0, 1])
def test_stack_multistep_timeline_slaughter(seed):
    "The timeline format: rewards from step t and next columns from step t + 1, a stack per step of each window"
    S, n, rng = 5, 6, np.random.default_rng(seed)
    lens = rng.integers(1, 20, int(rng.integers(1, 5))).tolist()
    memory = ReplayBuffer(stack_size=S, replay_capacity=max(sum(lens) + (len(lens) + 1) * (S - 1), S + n), batch_size=1,
                          return_everything_as_stack=True, return_as_timeline_format=True, update_horizon=n, seed=0)
    feats = dict(state=lambda i: np.ones((3, 3), np.float32) * i, action=lambda i: np.int64(i), reward=lambda i: np.float32(2 * i),
                 extra1=lambda i: np.float32(3 * i))
    i, rows = 0, []
    for L in lens:
        start, end = i, i + L
        for j in range(L):
            memory.add(observation=feats['state'](i), action=int(i), reward=float(2 * i), terminal=j == L - 1, extra1=float(3 * i))
            k = min(n, end - i)
            # past the episode's end a stack's newest entry is zeros (the end of a terminal window)
            at = lambda f, x: _stacked(lambda y: f(y) if y < end else f(y) * 0, x, S, start)
            rows.append(dict(state=at(feats['state'], i), action=at(feats['action'], i), extra1=at(feats['extra1'], i),
                             terminal=[j >= L - n], step=[k], reward=[at(feats['reward'], x) for x in range(i, i + k)],
                             next_state=[at(feats['state'], x) for x in range(i + 1, i + k + 1)],
                             next_action=[at(feats['action'], x) for x in range(i + 1, i + k + 1)],
                             next_extra1=[at(feats['extra1'], x) for x in range(i + 1, i + k + 1)]))
            i += 1
    b = memory.sample_all_valid_transitions()
    assert len(b.next_state) == len(rows)
    for j, want in enumerate(rows):
        for k, v in want.items():
            got = getattr(b, k)[j]
            np.testing.assert_array_equal(got.numpy() if isinstance(got, torch.Tensor) else got, np.array(v), err_msg=f'{j} {k}')

def test_replay_overflow():
    "ReAgent's walk through a ring of 6 rows with stacks of 2 and 2-step timelines, valid indices and stacked actions at every add"
    memory = ReplayBuffer(stack_size=2, replay_capacity=6, batch_size=1, update_horizon=2, return_everything_as_stack=None,
                          return_as_timeline_format=True, seed=0)
    def add(i, t): memory.add(observation=np.ones((3, 3), np.float32), action=2 * i, reward=3. * i, terminal=t)
    F, T = False, True
    assert memory.valid_mask().tolist() == [F] * 6
    add(0, F); add(1, F)
    assert memory.valid_mask().tolist() == [F] * 6
    add(2, F)  # the first step's window is whole
    assert memory.valid_mask().tolist() == [F, T, F, F, F, F]
    b = memory.sample_all_valid_transitions()
    assert b.action.tolist() == [[0, 0]] and b.next_action[0].tolist() == [[0, 2], [2, 4]]
    add(3, T)  # the terminal step makes the whole episode valid
    assert memory.valid_mask().tolist() == [F, T, T, T, T, F]
    b = memory.sample_all_valid_transitions()
    assert b.action.tolist() == [[0, 0], [0, 2], [2, 4], [4, 6]]
    assert [x.tolist() for x in b.next_action] == [[[0, 2], [2, 4]], [[2, 4], [4, 6]], [[4, 6], [6, 0]], [[6, 0]]]
    add(4, F)  # padding at row 5, the step at row 0: step 0 loses the padding of its stack
    assert memory.valid_mask().tolist() == [F, F, T, T, T, F]
    add(5, F)
    assert memory.valid_mask().tolist() == [F, F, F, T, T, F]
    add(6, T)
    assert memory.valid_mask().tolist() == [T, T, T, F, T, F]
    b = memory.sample_all_valid_transitions()
    assert b.action.tolist() == [[0, 8], [8, 10], [10, 12], [4, 6]]
    assert [x.tolist() for x in b.next_action] == [[[8, 10], [10, 12]], [[10, 12], [12, 0]], [[12, 0]], [[6, 0]]]
    assert b.step.flatten().tolist() == [2, 2, 1, 1]

def test_sparse_features_refused():
    memory = ReplayBuffer(stack_size=1, replay_capacity=100)
    step = dict(observation=np.ones((3, 3), np.float32), action=0, reward=0., terminal=0)
    with pytest.raises(ExperienceReplayException, match=r'id_list: expected a dense array or number, got a dict'):
        memory.add(**step, id_list={'sparse_feat1': [0, 1]})
    assert memory.storage is None and memory.add_count == 0
    memory.add(**step, dense=[1, 2])
    with pytest.raises(ExperienceReplayException, match=r'dense: expected a dense array of shape \(2,\), got a dict'):
        memory.add(**step, dense={'a': [1]})

# ReAgent's tests of its PrioritizedReplayBuffer, and Dopamine's

def _blank(memory, terminal=0, priority=1.0, dopamine=False):
    if dopamine: memory.add(np.zeros(SCREEN), 0, 0.0, terminal, priority=priority)
    else: memory.add(observation=np.zeros(SCREEN), action=0, reward=0.0, terminal=terminal, priority=priority)
    return (memory.cursor() - 1) % 100

PRIORITIZED = [lambda: PrioritizedReplayBuffer(4, 100, 32, max_sample_attempts=10, seed=0),
               lambda: OutOfGraphPrioritizedReplayBuffer(SCREEN, 4, 100, 32, max_sample_attempts=10, seed=0)]

@pytest.mark.parametrize('make', PRIORITIZED, ids=['reagent', 'dopamine'])
def test_prioritized_add_and_padding(make):
    memory = make()
    dop = isinstance(memory, OutOfGraphReplayBuffer)
    index = _blank(memory, dopamine=dop)
    assert (index, memory.cursor(), memory.add_count) == (3, 4, 4)
    assert memory.get_priority(np.arange(4, dtype=np.int32)).tolist() == [0., 0., 0., 1.]  # padding 0, a new step 1
    memory.add(np.zeros(SCREEN), 0, 0, 0) if dop else memory.add(observation=np.zeros(SCREEN), action=0, reward=0, terminal=0)
    assert memory.get_priority([4]).tolist() == [1.]  # no priority given: the largest so far

@pytest.mark.parametrize('make', PRIORITIZED, ids=['reagent', 'dopamine'])
def test_set_and_get_priority(make):
    memory = make()
    dop = isinstance(memory, OutOfGraphReplayBuffer)
    indices = np.array([_blank(memory, dopamine=dop) for _ in range(7)], np.int32)
    assert indices.tolist() == [3, 4, 5, 6, 7, 8, 9]
    memory.set_priority(indices, np.arange(7))
    assert memory.get_priority(np.flip(indices, 0)).tolist() == [6., 5., 4., 3., 2., 1., 0.]
    assert memory.get_priority(torch.tensor([[9], [3]])).tolist() == [6., 0.]  # (n, 1) indices, as samples hold them
    with pytest.raises(ExperienceReplayException, match=r'indices \[10\] are out of range'): memory.set_priority([10], [1.])
    with pytest.raises(ExperienceReplayException, match='values must be finite and >= 0'): memory.set_priority([9], [np.inf])
    assert memory.get_priority([9]).tolist() == [6.]

@pytest.mark.parametrize('make', PRIORITIZED, ids=['reagent', 'dopamine'])
def test_low_priority_element_never_sampled(make):
    memory = make()
    dop = isinstance(memory, OutOfGraphReplayBuffer)
    _blank(memory, terminal=0, priority=0.0, dopamine=dop)
    for _ in range(3): _blank(memory, terminal=1, dopamine=dop)
    assert np.flatnonzero(memory.valid_mask()).tolist() == [3, 4, 8, 12]
    for _ in range(100):
        b = memory.sample_transition_batch(batch_size=2)
        assert (b.terminal == 1).all()
        assert set(np.asarray(b.indices).flatten().tolist()) <= {4, 8, 12}

@pytest.mark.parametrize('make', PRIORITIZED, ids=['reagent', 'dopamine'])
def test_sample_index_batch_empty_and_at_the_cursor(make):
    memory = make()
    dop = isinstance(memory, OutOfGraphReplayBuffer)
    _blank(memory, dopamine=dop)
    with pytest.raises(NoValidTransitions, match='none of the 4 stored rows is a valid transition yet'): memory.sample_index_batch(2)
    assert isinstance(NoValidTransitions('x'), RuntimeError)
    for _ in range(100 - 4 + 1): _blank(memory, dopamine=dop)
    assert memory.cursor() == 1
    samples = np.asarray(memory.sample_index_batch(100))
    # rows 0 to 3: the newest step, then the oldest ones, whose stacks reach past the cursor
    assert samples.min() >= 4 and samples.max() <= 99
    assert np.flatnonzero(memory.valid_mask()).tolist() == list(range(4, 100))

def test_prioritized_sampling_is_proportional():
    "Stratified draws over 5 valid steps of priorities 1 to 5 follow the priorities (seeded chi-square)"
    memory = PrioritizedReplayBuffer(1, 10, 50, seed=0)
    for t in range(5): memory.add(observation=np.zeros(1), action=0, reward=0., terminal=t == 4, priority=float(t + 1))
    counts = np.bincount(np.concatenate([memory.sample_index_batch(50).numpy() for _ in range(200)]), minlength=10)
    assert counts[5:].sum() == 0
    expected = 10_000 * np.arange(1, 6) / 15
    assert chi2.sf(((counts[:5] - expected) ** 2 / expected).sum(), 4) > 1e-3

def test_uniform_sampling_is_uniform_and_seeded():
    memory, twin = (ReplayBuffer(2, 20, 8, seed=5) for _ in range(2))
    for m in (memory, twin):
        for t in range(15): m.add(observation=np.zeros(1), action=0, reward=0., terminal=t % 5 == 4)
    valid = np.flatnonzero(memory.valid_mask())
    assert valid.tolist() == [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17]
    draws = [memory.sample_index_batch(8) for _ in range(300)]
    for d in draws: assert torch.equal(d, twin.sample_index_batch(8))
    counts = np.bincount(torch.cat(draws).numpy(), minlength=20)[valid]
    assert chi2.sf(((counts - 160) ** 2 / 160).sum(), 14) > 1e-3
    other = ReplayBuffer(2, 20, 8, seed=6)
    for t in range(15): other.add(observation=np.zeros(1), action=0, reward=0., terminal=t % 5 == 4)
    assert not torch.equal(torch.stack([other.sample_index_batch(8) for _ in range(3)]), torch.stack(draws[:3]))

# Dopamine's tests of its OutOfGraphReplayBuffer, ported

def test_dopamine_constructor_and_add():
    with pytest.raises(ExperienceReplayException, match='observation_shape must be a tuple, got 84'):
        OutOfGraphReplayBuffer(observation_shape=84, stack_size=4, replay_capacity=5, batch_size=32)
    memory = OutOfGraphReplayBuffer(observation_shape=(4, 20), stack_size=4, replay_capacity=5, batch_size=32, terminal_dtype=np.int32)
    assert (memory.storage.obs_shape, memory.add_count, memory.terminal_dtype) == ((4, 20), 0, np.dtype(np.int32))
    memory = OutOfGraphReplayBuffer(SCREEN, 4, 5, 32)
    memory.add(np.zeros(SCREEN), 0, 0, 0)
    assert memory.cursor() == 4
    memory = OutOfGraphReplayBuffer(SCREEN, 4, 5, 32, extra_storage_types=[ReplayElement('extra1', [], np.float32),
                                                                            ReplayElement('extra2', [2], np.int8)])
    memory.add(np.zeros(SCREEN), 0, 0, 0, 0, [0, 0])
    with pytest.raises(ExperienceReplayException, match=r"Add expects 2 extra elements \['extra1', 'extra2'\] after terminal, got 0"):
        memory.add(np.zeros(SCREEN), 0, 0, 0)
    with pytest.raises(ExperienceReplayException, match='priority: a OutOfGraphReplayBuffer samples uniformly'):
        memory.add(np.zeros(SCREEN), 0, 0, 0, 0, [0, 0], priority=1.)
    with pytest.raises(ExperienceReplayException, match='extra2: dtype int64 cannot be stored as int8 without loss'):
        memory.add(np.zeros(SCREEN), 0, 0, 0, 0, [0, 300])
    assert memory.cursor() == 4
    pm = OutOfGraphPrioritizedReplayBuffer(SCREEN, 4, 100, 32, extra_storage_types=[ReplayElement('test_item', (), np.float32)])
    pm.add(np.zeros(SCREEN), 0, 0.0, 0, 0.0, priority=1.0)
    assert (pm.cursor(), pm.add_count) == (4, 4)
    with pytest.raises(ExperienceReplayException, match='Add expects 1 extra elements'): pm.add(np.zeros(SCREEN), 0, 0, 0, priority=1.0)

def test_dopamine_n_step_reward_and_stack():
    memory = OutOfGraphReplayBuffer(SCREEN, 4, 10, 32, update_horizon=5, gamma=1.0, seed=0)
    for i in range(50): memory.add(full(i), 0, 2.0, 0)
    for _ in range(20): assert memory.sample_transition_batch()[2].tolist() == [10.0] * 32
    memory = OutOfGraphReplayBuffer(SCREEN, 4, 50, 32, seed=0)
    for i in range(11): memory.add(full(i), 0, 0, 0)
    b = memory.sample_transition_batch(2, [3, 6])  # the first step's stack is padding, then frames 0 to 3
    assert b.state.shape == (2, *SCREEN, 4)
    np.testing.assert_array_equal(b.state[0], np.zeros((*SCREEN, 4), np.uint8))
    for i in range(4): np.testing.assert_array_equal(b.state[1][:, :, i], full(i))

@pytest.mark.parametrize('extra', [False, True])
def test_dopamine_sample_transition_batch(extra):
    types = [ReplayElement('extra1', [], np.float32), ReplayElement('extra2', [2], np.int8)] if extra else None
    memory = OutOfGraphReplayBuffer(SCREEN, 1, 10, 2, extra_storage_types=types, seed=0)
    for i in range(50): memory.add(full(i), 0, 0, i % 4, *((0, [0, 0]) if extra else ()))
    for bs, default in ((None, 2), (32, 32), (None, 2)):
        for _ in range(50): assert memory.sample_transition_batch(bs)[0].shape[0] == default
    indices = [1, 2, 3, 5, 8]
    b = memory.sample_transition_batch(batch_size=len(indices), indices=indices)
    steps = np.array(indices) + 40
    terminal = steps % 4 != 0
    np.testing.assert_array_equal(b[0], np.stack([full(s)[..., None] for s in steps]))
    np.testing.assert_array_equal(b[3], np.stack([full(0 if t else s + 1)[..., None] for s, t in zip(steps, terminal)]))
    for j in (1, 2, 4, 5): np.testing.assert_array_equal(b[j], np.zeros(5))
    np.testing.assert_array_equal(b[6], terminal.astype(np.uint8))
    assert b[6].dtype == np.uint8 and b[7].dtype == np.int32 and b[7].tolist() == indices
    assert len(b) == 10 if extra else len(b) == 8
    if extra:
        np.testing.assert_array_equal(b.extra1, np.zeros(5, np.float32))
        np.testing.assert_array_equal(b.extra2, np.zeros((5, 2), np.int8))
    assert [(e.name, e.shape, e.type) for e in memory.get_transition_elements(5)] == [(k, v.shape, v.dtype) for k, v in b._asdict().items()]

def test_dopamine_terminal_in_trajectory_and_validity():
    memory = OutOfGraphReplayBuffer(SCREEN, 1, 10, 2, update_horizon=3, gamma=1.0)
    for i in range(10): memory.add(full(i), i * 2, i, 1 if i == 3 else 0)
    states, action, reward, _, _, _, terminal, indices = memory.sample_transition_batch(3, [2, 3, 4])
    np.testing.assert_array_equal(states, np.stack([full(i)[..., None] for i in (2, 3, 4)]))
    assert (action.tolist(), reward.tolist(), terminal.tolist(), indices.tolist()) == ([4, 6, 8], [5., 3., 15.], [1, 1, 0], [2, 3, 4])
    memory = OutOfGraphReplayBuffer(SCREEN, 4, 10, 2)
    for t in (0, 0, 1): memory.add(full(0), 0, 0, t)
    # Dopamine keeps index 5 invalid (it is next to the cursor); its window ends in the terminal step, so it is valid here
    assert [memory.is_valid_transition(i) for i in range(10)] == [False] * 3 + [True] * 3 + [False] * 4
    assert memory.is_valid_transition(-1) is False and memory.is_valid_transition(10) is False

def test_dopamine_episode_end():
    "A time limit ends the episode: the next step opens one (after padding), and windows reaching the cut step are not valid"
    memory = OutOfGraphReplayBuffer((1,), 2, 20, 2, update_horizon=2, gamma=0.5, seed=0)
    for t in range(3): memory.add(np.array([t + 1]), t, 1., False, episode_end=t == 2)
    memory.add(np.array([9]), 9, 1., False)
    assert memory.storage.obs[:6, 0].tolist() == [0, 1, 2, 3, 0, 9]
    assert np.flatnonzero(memory.valid_mask()).tolist() == [1]
    b = memory.sample_transition_batch(1, [1])
    assert (b.reward.tolist(), b.terminal.tolist(), b.next_state[0, 0].tolist()) == ([1.5], [0], [2, 3])
    memory.add(np.array([10]), 10, 1., True, episode_end=True)  # terminal and episode end: a terminal step
    assert np.flatnonzero(memory.valid_mask()).tolist() == [1, 5, 6]
    assert memory.sample_transition_batch(2, [5, 6]).terminal.tolist() == [1, 1]

# Environments, checkpoints and bad input

def test_create_from_env_cartpole():
    "ReAgent's inserter test: the observations, next observations, actions and next actions of the steps of one episode"
    import gymnasium as gym
    env = gym.make('CartPole-v1')
    buf = PrioritizedReplayBuffer.create_from_env(env, replay_memory_size=6, batch_size=1, store_log_prob=False, seed=0)
    assert buf.get_transition_elements()[-5:] == ['mdp_id', 'next_mdp_id', 'sequence_number', 'next_sequence_number', 'sampling_probabilities']
    obs, _ = env.reset(seed=1)
    env.action_space.seed(1)
    inserted = []
    for i in range(5):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        inserted.append((obs, a))
        buf.add(observation=obs, action=a, reward=r, terminal=term, mdp_id=0, sequence_number=i)
        obs = nxt
    b = buf.sample_transition_batch(indices=torch.tensor([0]))
    np.testing.assert_array_equal(b.state[0].numpy(), inserted[0][0])
    np.testing.assert_array_equal(b.next_state[0].numpy(), inserted[1][0])
    assert (b.action.item(), b.next_action.item(), b.sequence_number.item(), b.next_sequence_number.item()) == (inserted[0][1], inserted[1][1], 0, 1)
    with pytest.raises(ExperienceReplayException, match=r"got \['log_prob', 'mdp_id', 'sequence_number'\]"):
        buf.add(observation=obs, action=0, reward=1., terminal=False, mdp_id=0, sequence_number=5, log_prob=0.)
    with pytest.raises(ExperienceReplayException, match='a buffer holds the steps of one environment'):
        ReplayBuffer.create_from_env(gym.make_vec('CartPole-v1', num_envs=2), replay_memory_size=6, batch_size=1)
    with pytest.raises(ExperienceReplayException, match='observation: expected a Box, Discrete'):
        ReplayBuffer.create_from_env(gym.make('Blackjack-v1'), replay_memory_size=6, batch_size=1)

def _filled(make, adds=23):
    memory = make()
    dop = isinstance(memory, OutOfGraphReplayBuffer)
    for t in range(adds):
        o, a, r, term = np.full((2,), t, np.uint8), t % 3, float(t), t % 7 == 6
        if dop: memory.add(o, a, r, term, *([np.float32(t)] if memory.extra_names else []))
        else: memory.add(observation=o, action=a, reward=r, terminal=term, tag=t)
    return memory

SAVED = [lambda: ReplayBuffer(3, 16, 4, True, True, update_horizon=2, seed=0),
         lambda: PrioritizedReplayBuffer(2, 16, 4, update_horizon=3, max_sample_attempts=7, seed=1),
         lambda: OutOfGraphReplayBuffer((2,), 3, 16, 4, update_horizon=2, terminal_dtype=np.int32,
                                        extra_storage_types=[ReplayElement('x', (), np.float32)], seed=2),
         lambda: OutOfGraphPrioritizedReplayBuffer((2,), 2, 16, 4, seed=3)]

@pytest.mark.parametrize('make', SAVED, ids=['reagent', 'reagent-prioritized', 'dopamine', 'dopamine-prioritized'])
def test_save_and_load(make, tmp_path):
    memory = _filled(make)
    if memory.prioritized: memory.set_priority([5, 6], [4., 0.])
    memory.save(tmp_path/'m')
    twin = load_memory(tmp_path/'m')
    assert type(twin) is type(memory) and type(twin.storage) is PaddedFrameStorage
    for k in memory._defaults: assert getattr(twin, k) == getattr(memory, k), k
    np.testing.assert_array_equal(twin.valid_mask(), memory.valid_mask())
    assert (twin.size, twin.cursor(), twin.add_count, twin.extra_names) == (memory.size, memory.cursor(), memory.add_count, memory.extra_names)
    if memory.prioritized: np.testing.assert_array_equal(twin.get_priority(range(16)), memory.get_priority(range(16)))
    a, b = memory.sample_transition_batch(), twin.sample_transition_batch()
    for x, y in zip(a, b):
        for u, v in (zip(x, y) if isinstance(x, list) else [(x, y)]): np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    saved = memory.add_count
    for m in (memory, twin): _add_one(m)
    np.testing.assert_array_equal(twin.valid_mask(), memory.valid_mask())
    assert (type(memory).load(tmp_path/'m').add_count, twin.add_count) == (saved, memory.add_count)

def _add_one(m):
    if isinstance(m, OutOfGraphReplayBuffer): m.add(np.zeros(2, np.uint8), 0, 0., False, *([0.] if m.extra_names else []))
    else: m.add(observation=np.zeros(2, np.uint8), action=0, reward=0., terminal=False, tag=0)

def test_checkpoint_refusals(tmp_path):
    memory = _filled(SAVED[0])
    with pytest.raises(ExperienceReplayException, match=r'save\(checkpoint_dir, iteration_number\) an int >= 0; got -1'): memory.save(tmp_path, -1)
    assert not any(tmp_path.iterdir())
    memory.save(tmp_path/'m')
    with pytest.raises(FileNotFoundError, match='no checkpoint at'): memory.load(tmp_path/'m', '3')
    memory.save(tmp_path/'its', 5)  # ReAgent's and Dopamine's form: a directory per iteration
    assert [p.name for p in (tmp_path/'its').iterdir()] == ['ckpt.5']
    twin = _filled(SAVED[0], adds=5)
    assert twin.add_count != memory.add_count
    twin.load(tmp_path/'its', 5)  # in place
    for x, y in zip(_snapshot(twin), _snapshot(memory)): np.testing.assert_equal(x, y)
    assert twin.sample_index_batch(8).tolist() == memory.sample_index_batch(8).tolist()
    with pytest.raises(CheckpointError, match='holds a ReplayBuffer checkpoint; PrioritizedReplayBuffer.load reads'):
        PrioritizedReplayBuffer.load(tmp_path/'m')
    with pytest.raises(ExperienceReplayException, match='the buffer has no columns yet'): ReplayBuffer().save(tmp_path/'e')
    other = _filled(SAVED[1])
    with pytest.raises(ExperienceReplayException): other.load_state_dict(memory.state_dict())
    state = memory.state_dict()
    del state['compat']['return_as_timeline_format']
    with pytest.raises(ExperienceReplayException, match=r"the state holds the settings \['return_everything_as_stack'\]"):
        memory.load_state_dict(state)

def _snapshot(m):
    st = m.storage
    return (m.add_count, m.valid_mask(), st.obs.copy(), st.action.copy(), st.reward.copy(), st.terminal.copy(), st.prev.copy(),
            st.next.copy(), {k: v.copy() for k, v in st.extra.items()}, {k: list(v) for k, v in st.streams.items()}, st.finals.copy(),
            m.get_priority(range(m.replay_capacity)) if m.prioritized else None)

def _same(a, b):
    assert a[0] == b[0]
    for x, y in zip(a[1:], b[1:]):
        if isinstance(x, dict): assert x.keys() == y.keys() and all(np.array_equal(np.asarray(x[k]), np.asarray(y[k])) for k in x)
        elif x is not None: np.testing.assert_array_equal(x, y)

BAD_REAGENT = [
    (dict(observation=np.zeros(3)), 'observation: expected shape (2,), got (3,)'),
    (dict(observation=np.array([0.5, 0.])), 'observation: dtype float64'),
    (dict(action=1.5), 'action: dtype float64 cannot be stored as int64 without loss'),
    (dict(reward=np.inf), 'reward holds NaN or inf'),
    (dict(terminal=[True, False]), 'terminal: expected one value, got shape (2,)'),
    (dict(tag='x'), 'tag: dtype <U1 cannot be stored as int64 without loss'),
    (dict(priority=-1.), 'priority must be a finite number >= 0, got -1.0'),
    (dict(priority=[1., 2.]), 'priority: expected one number, got shape (2,)'),
    (dict(other=1), "Add expects the extra elements ['tag']; got ['other', 'tag']"),
]

@pytest.mark.parametrize('bad,msg', BAD_REAGENT, ids=[m[:30] for _, m in BAD_REAGENT])
def test_bad_input_changes_nothing(bad, msg):
    "A step that does not fit raises naming what was expected and received, and leaves rows, links, validity and priorities as they were"
    memory = PrioritizedReplayBuffer(3, 12, 4, update_horizon=2, seed=0)
    for t in range(7): memory.add(observation=np.array([t, 1], np.uint8), action=t, reward=float(t), terminal=t == 3, tag=t)
    before = _snapshot(memory)
    step = dict(observation=np.array([1, 2], np.uint8), action=1, reward=1., terminal=False, tag=1)  # this one opens no episode
    with pytest.raises(ExperienceReplayException) as e: memory.add(**{**step, **bad})
    assert msg in str(e.value)
    _same(_snapshot(memory), before)
    memory.add(observation=np.array([1, 2], np.uint8), action=1, reward=1., terminal=True, tag=1)
    before = _snapshot(memory)  # the next step would open an episode: its padding is not written either
    with pytest.raises(ExperienceReplayException): memory.add(**{**step, **bad})
    _same(_snapshot(memory), before)

def test_bad_settings_and_indices():
    for kw, msg in ((dict(stack_size=0), 'stack_size must be a positive int, got 0'), (dict(batch_size=1.5), 'batch_size must be a positive int'),
                    (dict(gamma=1.5), 'gamma must be in [0, 1], got 1.5'), (dict(update_horizon=-1), 'update_horizon must be a positive int')):
        with pytest.raises(ExperienceReplayException, match=msg.replace('[', r'\[').replace(']', r'\]')): ReplayBuffer(**kw)
    with pytest.raises(ExperienceReplayException, match='give either a generator or a seed'): ReplayBuffer(generator=torch.Generator(), seed=0)
    memory = _filled(SAVED[0])
    with pytest.raises(ExperienceReplayException, match=r'indices \[0\] are not valid transitions'): memory.sample_transition_batch(indices=[0])
    with pytest.raises(ExperienceReplayException, match=r'indices \[16\] are out of range'): memory.sample_transition_batch(indices=[16])
    with pytest.raises(ExperienceReplayException, match='batch_size is 3, but 1 indices were given'):
        memory.sample_transition_batch(3, indices=[5])
    with pytest.raises(ExperienceReplayException, match='set_priority needs a prioritized buffer'): memory.set_priority([5], [1.])
    with pytest.raises(ExperienceReplayException, match='extra elements name fields of the sampled batch'):
        ReplayBuffer().add(observation=0., action=0, reward=0., terminal=False, step=1)
    with pytest.raises(ExperienceReplayException, match='extra elements name fields'):
        OutOfGraphReplayBuffer((1,), 1, 4, 1, extra_storage_types=[ReplayElement('_x', (), np.int8)])
    empty = ReplayBuffer()
    with pytest.raises(NoValidTransitions): empty.sample_transition_batch()
    with pytest.raises(NoValidTransitions): empty.sample_all_valid_transitions()
    assert (empty.size, len(empty), empty.get_transition_elements()[-1]) == (0, 0, 'step')

def test_float64_observations_and_types():
    "Observations and rewards cast as ReAgent casts them: float64 stored as float32; Python ints as int64; bools as bool"
    memory = ReplayBuffer(2, 8, 2, seed=0)
    memory.add(observation=np.array([0.1, 0.2]), action=np.int32(1), reward=1, terminal=False, flag=True)
    memory.add(observation=np.array([0.3, 0.4]), action=2, reward=2, terminal=True, flag=False)
    st = memory.storage
    assert (st.obs_dtype, st.action_dtype, st.reward_dtype, st.extra['flag'].dtype) == (np.float32, np.int32, np.int64, np.bool_)
    b = memory.sample_transition_batch(indices=[1])
    np.testing.assert_array_equal(b.state.numpy(), np.array([[[0, 0.1], [0, 0.2]]], np.float32))
    assert (b.reward.dtype, b.reward.tolist(), b.flag.tolist()) == (torch.float32, [[1.]], [[False, True]])
    with pytest.raises(ExperienceReplayException, match='action: dtype int64 cannot be stored as int32 without loss'):
        memory.add(observation=np.zeros(2), action=2**40, reward=0, terminal=False, flag=True)

def test_library_sample_and_batch_add():
    "As a memory of the library: `sample` gives the frame storage's batch (no padding column), `+` is refused"
    memory = _filled(SAVED[1])
    b, idxs = memory.sample()
    assert '_padding' not in b and b['state'].shape == (4, 2, 2) and b['weight'].shape == (4, 1)
    assert memory.valid_mask()[idxs.numpy()].all()
    with pytest.raises(ExperienceReplayException, match='written one step at a time'): memory + {'state': np.zeros((1, 2))}


def test_td_updates_of_indices_from_sample_index_batch_are_guarded_against_overwrites():
    "Indices handed out by `sample_index_batch` are stamped as sampled: an update that arrives after their rows were overwritten is dropped"
    buf = PrioritizedReplayBuffer(1, 6, 4, seed=0)
    for t in range(6): buf.add(np.full((1,), t, np.float32), 0, 1., False)
    idx = buf.sample_index_batch(4)
    for t in range(6, 6 + 6): buf.add(np.full((1,), t, np.float32), 0, 1., False)  # the ring turns over: every row is new
    buf.update_td(torch.full((4,), 5.), idx)
    assert buf.sampler.n_stale == 4 and (buf.td_errors == 0).all()
    idx = buf.sample_index_batch(4)
    buf.update_td(torch.full((4,), 5.), idx)  # not overwritten since: applied
    assert buf.sampler.n_stale == 4 and (buf.td_errors[idx] == 5.).all()

def test_dopamine_sum_tree_finds_the_leaf_of_each_query_by_cumulative_sums():
    from fastrl_replay.compat.reagent import SumTree
    rng = np.random.default_rng(0)
    v = rng.random(37) * (rng.random(37) < 0.6)  # about 40% of the leaves empty: never found
    t = SumTree(37, seed=1)
    for i, x in enumerate(v): t.set(i, float(x))
    qs, cs = rng.random(500), np.cumsum(v)
    assert [t.sample(query_value=float(q)) for q in qs] == np.searchsorted(cs, qs * cs[-1], side='right').tolist()
    assert (t.total_priority(), t.max_recorded_priority) == (pytest.approx(v.sum()), 1.)
    assert [t.get(i) for i in range(37)] == v.tolist()
    assert t.sample(query_value=1.) == int(np.flatnonzero(v)[-1])  # the last leaf with mass, never an empty one after it
    a, b = SumTree(37, seed=3), SumTree(37, seed=3)
    for s in (a, b):
        for i, x in enumerate(v): s.set(i, float(x))
    assert [a.sample() for _ in range(20)] + a.stratified_sample(8) == [b.sample() for _ in range(20)] + b.stratified_sample(8)
    with pytest.raises(ValueError, match='query_value must be in'): t.sample(query_value=1.5)
    with pytest.raises(ValueError, match='leaf indices must be in'): t.set(37, 1.)
    assert t.get(0) == v[0]  # a refused set changes nothing

def test_dopamine_episode_end_indices_follow_the_stored_steps(tmp_path):
    ob = OutOfGraphReplayBuffer((1,), 2, 8, 2, seed=0)
    ob.add(full(0, (1,)), 0, 0., 0)                    # padding at 0, the step at 1
    ob.add(full(1, (1,)), 0, 0., 0, episode_end=True)  # 2: cut short
    ob.add(full(2, (1,)), 0, 0., 1, episode_end=True)  # padding at 3, 4: terminal, so not a cut
    assert ob.episode_end_indices == {2}
    ob.save(tmp_path, 5)
    twin = OutOfGraphReplayBuffer((1,), 2, 8, 2, seed=0)
    twin.load(tmp_path, '5')
    assert twin.episode_end_indices == {2}
    for t in range(5): ob.add(full(t, (1,)), 0, 0., 0)  # padding at 5, steps at 6, 7, 0, 1, 2: row 2 overwritten
    assert (ob.cursor(), ob.episode_end_indices) == (3, set())

def test_dopamine_assertions_are_the_library_exception_and_an_assertion_error():
    from fastrl_replay.compat.reagent import invalid_range, PeerAssertionError
    ob = OutOfGraphReplayBuffer((2,), 2, 10, 2)
    for exc in (AssertionError, ExperienceReplayException):
        with pytest.raises(exc, match='end_index must be larger than start_index'): ob.get_range([], 2, 1)
        with pytest.raises(exc, match='observation_shape must be a tuple, got 84'): OutOfGraphReplayBuffer(84, 2, 10, 2)
    with pytest.raises(PeerAssertionError, match='has not been added'): ob.get_range(np.zeros(10), 0, 1)
    assert invalid_range(cursor=0, replay_capacity=10, stack_size=4, update_horizon=1).tolist() == [9, 0, 1, 2, 3]

def test_sum_tree_as_dopamines_rainbow_uses_it():
    "A Rainbow-style loop: each step added at `sum_tree.max_recorded_priority`, priorities set from a sample; the sum tree reads and sets the buffer's priorities, and its draws follow the buffer's seed"
    def run(seed):
        b = OutOfGraphPrioritizedReplayBuffer((2,), 1, 32, 4, seed=seed)
        for t in range(12):
            b.add(np.full(2, t, np.uint8), t % 2, 1., t == 11, priority=b.sum_tree.max_recorded_priority)
            if t >= 4:
                idx = np.array(b.sample_index_batch(4), np.int32)
                b.set_priority(idx, (idx + 1.) / 4)
        return b
    b = run(3)
    st, pri = b.sum_tree, b.get_priority(np.arange(12, dtype=np.int32))
    assert [st.get(i) for i in range(12)] == pytest.approx(pri.tolist()) and st.max_recorded_priority == max(1., float(pri.max()))
    assert st.total_priority() == pytest.approx(float(pri[b.valid_mask()[:12]].sum()))
    st.set(5, 9.)
    assert b.get_priority(np.array([5], np.int32))[0] == 9. and st.max_recorded_priority == 9.
    assert run(3).sum_tree.stratified_sample(6) == run(3).sum_tree.stratified_sample(6)
    assert st.nodes[0][0] == pytest.approx(st.total_priority()) and not st.nodes[-1].flags.writeable
    with pytest.raises(ExperienceReplayException, match='out of range'): st.set(20, 1.)  # a row not written yet
    assert not hasattr(OutOfGraphReplayBuffer((2,), 1, 32, 4), 'sum_tree')
