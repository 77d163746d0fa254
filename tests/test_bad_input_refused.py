"Bad input is refused with the library's exception and leaves the memory exactly as it was"
import re, numpy as np, pytest, torch
from fastrl_replay.errors import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.test_utils import synth_transitions

def same_state(a, b) -> bool:
    "Whether two `state_dict`s (nested dicts, lists, tensors, arrays, generator states) are equal"
    if isinstance(a, dict): return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)): return type(a) == type(b) and len(a) == len(b) and all(map(same_state, a, b))
    if isinstance(a, torch.Tensor): return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())
    if isinstance(a, np.ndarray): return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, torch.Generator): return same_state(a.get_state(), b.get_state())
    if isinstance(a, np.random.Generator): return same_state(a.bit_generator.state, b.bit_generator.state)
    return type(a) == type(b) and a == b

def snapshot(mem) -> dict:
    "A deep copy of `mem.state_dict()`, so that later writes to the memory do not change it"
    import copy
    return copy.deepcopy(mem.state_dict())

def refused(mem, call, msg:str):
    "Assert `call()` raises `ExperienceReplayException` with exactly `msg` and leaves `mem`'s state unchanged"
    before = snapshot(mem)
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$'): call()
    assert same_state(before, snapshot(mem))

def test_same_state_sees_a_change():
    er = ExperienceReplay(4, 8, 1, seed=0) + synth_transitions(6)
    before = snapshot(er)
    er.sample()
    assert not same_state(before, snapshot(er))

@pytest.mark.parametrize('idx,msg', [
    ([1.5, 2.9], 'index [1.5, 2.9] does not fit a memory of 6 rows: rows are selected by ints or bools, not floats'),
    (np.array([0., 1.]), 'index array([0., 1.]) does not fit a memory of 6 rows: rows are selected by ints or bools, not floats'),
    (slice(None, None, 0), 'index slice(None, None, 0) does not fit a memory of 6 rows: a slice step must be a positive int, got 0'),
    (slice(None, None, -1), 'index slice(None, None, -1) does not fit a memory of 6 rows: a slice step must be a positive int, got -1'),
])
def test_index_refused(idx, msg):
    er = ExperienceReplay(4, 8, 1, seed=0) + synth_transitions(6)
    refused(er, lambda: er[idx], msg)

def test_int_indices_still_select():
    er = ExperienceReplay(4, 8, 1, seed=0) + synth_transitions(6)
    assert len(er[[1, 2]]) == 2 and len(er[::2]) == 3 and len(er[np.array([0, 5])]) == 2

def _frames_buffer():
    from fastrl_replay.memory.circular import CircularReplayBuffer
    buf = CircularReplayBuffer((2,), 1, 4, 2, seed=0)
    for i in range(5): buf.add(np.full(2, i, np.uint8), 0, 1., False)  # full: the next step would overwrite the oldest row
    return buf

ENV_MSG = 'env_id must be an int between 0 and 2147483647 (the env column holds int32), got 2147483648'

def test_circular_env_id_too_large_refused():
    buf = _frames_buffer()
    refused(buf, lambda: buf.add(np.zeros(2, np.uint8), 0, 1., False, env_id=2**31), ENV_MSG)

def test_circular_batch_env_id_too_large_refused():
    buf = _frames_buffer()
    batch = {'state': np.zeros((2, 2), np.uint8), 'action': np.zeros(2, np.int64), 'reward': np.zeros(2, np.float32),
             'terminated': np.zeros(2, bool), 'env_id': np.array([0, 2**31])}
    refused(buf, lambda: buf.storage.add(batch), ENV_MSG)

def test_circular_largest_env_id_stored():
    buf = _frames_buffer()
    row = buf.storage.add_count % buf.storage.max_sz
    buf.add(np.zeros(2, np.uint8), 0, 1., False, env_id=2**31 - 1)
    assert int(buf.storage.env[row]) == 2**31 - 1

@pytest.mark.parametrize('bad,msg', [
    (lambda b: -torch.ones(len(b)), 'priorities must be finite and >= 0, got [-1.0, -1.0, -1.0, -1.0, -1.0]'),
    (lambda b: torch.full((len(b),), float('nan')), 'priorities must be finite and >= 0, got [nan, nan, nan, nan, nan]'),
    (lambda b: torch.ones(3), 'priorities: expected shape (8,) for m * batch_size = 4 * 2 rows, got (3,)'),
])
def test_laber_bad_score_refused_and_twin_stays_in_step(bad, msg):
    from fastrl_replay.memory.laber import LaBERExperienceReplay
    good = lambda b: b['reward'].float().abs().flatten() + 1.
    er, twin = [LaBERExperienceReplay(2, 16, 1, seed=0, score=good) + synth_transitions(10) for _ in range(2)]
    er.score = bad
    refused(er, er.sample, msg)
    er.score = good
    (a, ia), (b, ib) = er.sample(), twin.sample()
    assert torch.equal(ia, ib) and torch.equal(a['weight'], b['weight']) and all(torch.equal(a[k], b[k]) for k in b.keys())
    assert same_state(snapshot(er), snapshot(twin))
