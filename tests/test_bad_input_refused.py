"Bad input is refused with the library's exception and leaves the memory exactly as it was"
import os, re, numpy as np, pytest, torch
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
    "The memory whole, deep-copied so that later writes do not change it: its state (rows, cursor, sampler state, generator), settings, length and repr"
    import copy
    return copy.deepcopy({'state': mem.state_dict(), 'settings': mem.settings(), 'len': len(mem), 'repr': repr(mem)})

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
    from fastrl_replay.compat.reagent import CircularReplayBuffer
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

# --- CircularReplayBuffer: flags, env ids, extras, meta tensors, priorities, settings

def _full_buffer(**kw):
    from fastrl_replay.compat.reagent import CircularReplayBuffer
    buf = CircularReplayBuffer((2,), 1, 4, 2, seed=0, **kw)
    for i in range(5): buf.add(np.full(2, i, np.uint8), 0, 1., False)  # full: the next step would overwrite the oldest row
    return buf

def _batch(**cols):
    return {'state': np.zeros((2, 2), np.uint8), 'action': np.zeros(2, np.int64), 'reward': np.zeros(2, np.float32),
            'terminated': np.zeros(2, bool), **cols}

@pytest.mark.parametrize('flag', ['False', float('nan'), None, 0.5, 2, [1, 0], 'x'])
def test_circular_terminal_not_a_flag_refused(flag):
    buf = _full_buffer()
    refused(buf, lambda: buf.add(np.zeros(2, np.uint8), 0, 1., flag), f'terminal must be a bool, or a number that is 0 or 1, got {flag!r}')
    refused(buf, lambda: buf.add(np.zeros(2, np.uint8), 0, 1., False, truncated=flag, next_observation=np.zeros(2, np.uint8)),
            f'truncated must be a bool, or a number that is 0 or 1, got {flag!r}')

@pytest.mark.parametrize('flag,stored', [(True, True), (0, False), (1., True), (np.bool_(True), True), (torch.tensor(0), False)])
def test_circular_flags_stored(flag, stored):
    buf = _full_buffer()
    row = buf.cursor()
    buf.add(np.zeros(2, np.uint8), 0, 1., flag)
    assert bool(buf.storage.terminal[row]) is stored

@pytest.mark.parametrize('col,vals,msg', [
    ('terminated', np.array([0.5, 2.]), "column 'terminated': expected bools, or numbers that are 0 or 1, got [0.5, 2.0]"),
    ('terminated', np.array([0., np.nan]), "column 'terminated': expected bools, or numbers that are 0 or 1, got [nan]"),
    ('terminated', np.array(['a', 'b']), "column 'terminated': expected bools, or numbers that are 0 or 1, got <U1"),
    ('truncated', np.array([3, 0]), "column 'truncated': expected bools, or numbers that are 0 or 1, got [3]"),
    ('env_id', np.array([1.7, 0.]), "column 'env_id': expected ints, got float64"),
])
def test_circular_batch_column_refused(col, vals, msg):
    buf = _full_buffer()
    refused(buf, lambda: buf.storage.add(_batch(**{col: vals})), msg)

def test_frame_memory_refuses_a_dict_observation_unchanged():
    "A frame memory holds one frame per step: a `Dict` observation is refused, naming its keys and `extras`"
    buf = _full_buffer()
    obs = {'pixels': np.zeros((2, 2), np.uint8), 'speed': np.zeros((2, 1), np.float32)}
    refused(buf, lambda: buf.storage.add(_batch(state=obs)), "column 'state': a frame memory stores one frame per step, "
            "got a dict (a `Dict` observation) of keys ['pixels', 'speed']: give its frame as 'state' and its other "
            "keys as `extras`")

def test_circular_batch_int_flags_stored():
    buf = _full_buffer()
    start, n = buf.storage.add(_batch(terminated=np.array([0, 1])))
    assert n == 2 and buf.storage.terminal[[start, (start + 1) % 4]].tolist() == [False, True]

@pytest.mark.parametrize('name', ['reward', 'state', 'next_state', 'weight', 'indices', 'env_id', 'obs'])
def test_circular_extra_named_like_a_column_refused(name):
    from fastrl_replay.compat.reagent import CircularReplayBuffer, ReplayElement
    from fastrl_replay.memory.frames import SAMPLED
    kw = dict(obs_key='obs') if name == 'obs' else {}
    with pytest.raises(ExperienceReplayException, match=re.escape(
            f"extra element {name!r} would hide a column of the same name: the sampled columns are {list(SAMPLED)}, "
            f"the observation column is {kw.get('obs_key', 'state')!r}, and extras are [{name!r}]")):
        CircularReplayBuffer((2,), 1, 4, 2, seed=0, extra_storage_types=[ReplayElement(name, (), np.float32)], **kw)

def test_circular_extra_keeps_its_own_column():
    from fastrl_replay.compat.reagent import CircularReplayBuffer, ReplayElement
    buf = CircularReplayBuffer((2,), 1, 4, 2, seed=0, extra_storage_types=[ReplayElement('logp', (), np.float32)])
    for i in range(3): buf.add(np.full(2, i, np.uint8), 0, 2., False, np.float32(-i))
    b = buf.sample_transition_batch(indices=[0, 1])
    assert b['reward'].flatten().tolist() == [2., 2.] and b['logp'].flatten().tolist() == [0., -1.]

META = lambda *s, dtype=torch.float32: torch.zeros(*s, dtype=dtype, device='meta')

@pytest.mark.parametrize('call,msg', [
    (lambda b: b.add(META(2, dtype=torch.uint8), 0, 1., False), 'observation: expected a tensor with values, got a meta tensor of shape (2,) uint8, which holds none'),
    (lambda b: b.add(np.zeros(2, np.uint8), META((), dtype=torch.int64), 1., False), 'action: expected a tensor with values, got a meta tensor of shape () int64, which holds none'),
    (lambda b: b.add(np.zeros(2, np.uint8), 0, META(()), False), 'reward: expected a tensor with values, got a meta tensor of shape () float32, which holds none'),
    (lambda b: b.add(np.zeros(2, np.uint8), 0, 1., META((), dtype=torch.bool)), 'terminal: expected a tensor with values, got a meta tensor of shape () bool, which holds none'),
    (lambda b: b.storage.add(_batch(reward=META(2))), 'reward: expected a tensor with values, got a meta tensor of shape (2,) float32, which holds none'),
    (lambda b: b.sample_transition_batch(indices=META(2, dtype=torch.int64)), 'indices: expected a tensor with values, got a meta tensor of shape (2,) int64, which holds none'),
    (lambda b: b.set_priority([0, 1], META(2)), 'priorities: expected a tensor with values, got a meta tensor of shape (2,) float32, which holds none'),
    (lambda b: b.set_priority([0, 1], np.array([1+2j, 1.])), 'priorities: expected real numbers, got complex128'),
    (lambda b: b.set_priority([0, 1], torch.tensor([1+2j, 1.])), 'priorities: expected real numbers, got complex64'),
    (lambda b: b.set_priority([0, 1], ['a', 'b']), 'priorities: expected numbers, got list of str'),
    (lambda b: b.set_priority([0, 1], np.array(['a', 'b'])), 'priorities: expected numbers, got ndarray of str'),
    (lambda b: b.update_td(['a', 'b'], [0, 1]), 'td_errors: expected numbers, got list of str'),
])
def test_circular_bad_values_refused(call, msg):
    buf = _full_buffer(prioritized=True)
    refused(buf, lambda: call(buf), msg)

@pytest.mark.parametrize('kw,msg', [
    (dict(observation_shape=3), 'observation_shape must be a tuple of ints >= 0, got 3'),
    (dict(observation_shape=(-1,)), 'observation_shape must be a tuple of ints >= 0, got (-1,)'),
    (dict(observation_shape=(2.,)), 'observation_shape must be a tuple of ints >= 0, got (2.0,)'),
    (dict(action_shape=3), 'action_shape must be a tuple of ints >= 0, got 3'),
    (dict(reward_shape=(-2,)), 'reward_shape must be a tuple of ints >= 0, got (-2,)'),
    (dict(gamma='a'), "gamma must be in [0, 1], got 'a'"),
    (dict(observation_dtype='foo'), "observation_dtype must be a NumPy dtype of numbers or bools, got 'foo'"),
    (dict(action_dtype=object), 'action_dtype must be a NumPy dtype of numbers or bools, got object'),
    (dict(extra_storage_types=5), 'extras must be a list of (name, shape, dtype) elements, got 5'),
    (dict(extra_storage_types=[('x', -1, np.float32)]), "extra 'x' shape must be a tuple of ints >= 0, got -1"),
    (dict(extra_storage_types=[('x', (), 'foo')]), "extra 'x' dtype must be a NumPy dtype of numbers or bools, got 'foo'"),
    (dict(seed='a'), "seed must be an int between -2**63 and 2**64 - 1, as torch.manual_seed takes, got 'a'"),
    (dict(seed=2**70), f'seed must be an int between -2**63 and 2**64 - 1, as torch.manual_seed takes, got {2**70}'),
    (dict(generator='g'), 'generator must be a torch.Generator, got str'),
    (dict(device='meta'), "device must hold values (the CPU or an accelerator), got 'meta': a meta device keeps none"),
    (dict(replay_capacity=2**62), f'max_sz={2**62}: the steps: {2**62} rows of 56 bytes ({2**62 * 56:,} bytes) cannot be allocated'),
])
def test_circular_settings_refused(kw, msg):
    from fastrl_replay.compat.reagent import CircularReplayBuffer
    args = {**dict(observation_shape=(2,), stack_size=1, replay_capacity=4, batch_size=2), **kw}
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$'): CircularReplayBuffer(**args)

# --- column memories: TD errors, meta tensors, settings; the valid inputs they take

def _memories():
    from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
    from fastrl_replay.memory.laber import LaBERExperienceReplay
    from fastrl_replay.memory.continual import ReservoirReplay, TaskBalancedReplay
    score = lambda b: b['reward'].float().abs().flatten() + 1.
    return {'ER': lambda: ExperienceReplay(4, 8, 1, seed=0), 'PER': lambda: PrioritizedExperienceReplay(4, 8, 1, seed=0),
            'LaBER': lambda: LaBERExperienceReplay(2, 8, 1, seed=0, score=score), 'Reservoir': lambda: ReservoirReplay(4, 8, 1, seed=0),
            'TaskBalanced': lambda: TaskBalancedReplay(4, 8, 1, seed=0)}
MEMORIES = list(_memories())

def _filled(name):
    mem = _memories()[name]() + synth_transitions(10)  # full: any write would overwrite or evict a row
    mem.sample()  # the generator has moved, the sampler holds state
    return mem

def _row(mem):
    return {k: v[0].clone() for k, v in mem.storage.memory.items()}

META_MSG = '{}: expected a tensor with values, got a meta tensor of shape {} {}, which holds none'

@pytest.mark.parametrize('name', MEMORIES)
@pytest.mark.parametrize('case', ['td list of str', 'td array of str', 'td complex', 'td meta', 'td index meta', 'index meta',
                                  'bool index meta', 'batch td_error of str', 'batch td_error meta', 'append meta', 'batch meta'])
def test_bad_values_refused(name, case):
    mem = _filled(name)
    n = len(mem)
    calls = {
        'td list of str': (lambda: mem.update_td(['a', 'b'], [0, 1]), 'td_errors: expected numbers, got list of str'),
        'td array of str': (lambda: mem.update_td(np.array(['a', 'b']), [0, 1]), 'td_errors: expected numbers, got ndarray of str'),
        'td complex': (lambda: mem.update_td(torch.tensor([1+2j, 1.]), [0, 1]), 'td_errors: expected a float dtype, got complex64'),
        'td meta': (lambda: mem.update_td(META(2), torch.tensor([0, 1])), META_MSG.format('td_errors', (2,), 'float32')),
        'td index meta': (lambda: mem.update_td(torch.ones(2), META(2, dtype=torch.int64)), META_MSG.format('indices', (2,), 'int64')),
        'index meta': (lambda: mem[META(2, dtype=torch.int64)], META_MSG.format('index', (2,), 'int64')),
        'bool index meta': (lambda: mem[META(n, dtype=torch.bool)], META_MSG.format('index', (n,), 'bool')),
        'batch td_error of str': (lambda: mem + {**{k: v[:2] for k, v in mem.storage.memory.items()}, 'td_error': np.array([['a'], ['b']])},
                                  "column 'td_error': expected numbers, got ndarray of str"),
        'batch td_error meta': (lambda: mem + {**{k: v[:2] for k, v in mem.storage.memory.items()}, 'td_error': META(2, 1)},
                                META_MSG.format('td_error', (2, 1), 'float32')),
        'append meta': (lambda: mem.append({**_row(mem), 'reward': META(1)}), META_MSG.format("column 'reward'", (1,), 'float32')),
        'batch meta': (lambda: mem + {**{k: v[:3] for k, v in mem.storage.memory.items()}, 'reward': META(3, 1)},
                       META_MSG.format("column 'reward'", (3, 1), 'float32')),
    }
    call, msg = calls[case]
    refused(mem, call, msg)

RAM = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
MORE_THAN_RAM = f"more than the {RAM:,} bytes of this machine's memory"

@pytest.mark.parametrize('name', MEMORIES)
@pytest.mark.parametrize('kw,msg', [
    (dict(seed='a'), "seed must be an int between -2**63 and 2**64 - 1, as torch.manual_seed takes, got 'a'"),
    (dict(seed=2**70), f'seed must be an int between -2**63 and 2**64 - 1, as torch.manual_seed takes, got {2**70}'),
    (dict(seed=1.5), 'seed must be an int between -2**63 and 2**64 - 1, as torch.manual_seed takes, got 1.5'),
    (dict(device='meta'), "device must hold values (the CPU or an accelerator), got 'meta': a meta device keeps none"),
    (dict(device='nowhere'), "device must be a torch device or its name, got 'nowhere'"),
    (dict(max_sz=2**62), f'max_sz={2**62}: {2**62:,} rows of at least a byte each need {2**62:,} bytes, {MORE_THAN_RAM}'),
    (dict(max_sz=10**13), f'max_sz={10**13}: {10**13:,} rows of at least a byte each need {10**13:,} bytes, {MORE_THAN_RAM}'),
])
def test_settings_refused(name, kw, msg):
    import inspect
    cls = type(_memories()[name]())
    args = {k: v for k, v in {**dict(bs=4, max_sz=8, warmup_sz=1, seed=0), **kw}.items() if k in inspect.signature(cls).parameters}
    if name == 'LaBER': args['score'] = lambda b: b['reward'].abs().flatten()
    if name == 'TaskBalanced': msg = msg.replace('the TD errors', 'the write stamps').replace('rows of 4 bytes', 'rows of 8 bytes').replace(
        f"({4 * kw['max_sz']:,} bytes)", f"({8 * kw['max_sz']:,} bytes)") if 'max_sz' in kw else msg
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$'): cls(**args)

@pytest.mark.parametrize('name', ['ER', 'PER', 'LaBER'])
def test_generator_not_a_generator_refused(name):
    cls = type(_memories()[name]())
    extra = dict(score=lambda b: b['reward'].abs().flatten()) if name == 'LaBER' else {}
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape("generator must be a torch.Generator, got str")}$'):
        cls(4, 8, 1, generator='g', **extra)

def test_tree_backend_refused():
    from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(chr(34).join(["backend must be ", "numba", " or ", "torch", ", got "]).replace(chr(34), chr(39)) + repr("x"))}$'):
        PrioritizedExperienceReplay(tree_backend='x')

@pytest.mark.parametrize('score', [5, 'abs'])
def test_laber_score_not_callable_refused(score):
    from fastrl_replay.memory.laber import LaBERExperienceReplay
    msg = f'score must be a function from a batch to one priority per row, got {type(score).__name__} {score!r}'
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$'): LaBERExperienceReplay(2, 16, 1, seed=0, score=score)

@pytest.mark.parametrize('bad,msg', [
    (lambda b: [str(i) for i in range(len(b))], 'priorities: expected numbers, got list of str'),
    (lambda b: torch.ones(len(b), dtype=torch.complex64), 'priorities: expected real numbers, got complex64'),
    (lambda b: torch.ones(len(b), device='meta'), 'priorities: expected a tensor with values, got a meta tensor of shape (8,) float32, which holds none'),
])
def test_laber_score_of_wrong_kind_refused_and_twin_stays_in_step(bad, msg):
    test_laber_bad_score_refused_and_twin_stays_in_step(bad, msg)

@pytest.mark.parametrize('name', MEMORIES)
def test_torch_unsigned_into_int_column_stored(name):
    mem = _memories()[name]() + synth_transitions(3)  # rows 3 to 5 are written next, by every writer
    row = _row(mem)
    batch = {k: v[None].repeat(2, *([1] * v.ndim)) for k, v in row.items()}
    batch['step'] = torch.tensor([[7], [65535]], dtype=torch.uint16)
    mem + batch
    mem.append({**row, 'step': torch.tensor([40000], dtype=torch.uint16)})
    assert mem.storage.memory['step'].dtype == torch.int64 and mem.storage.memory['step'][3:].flatten().tolist() == [7, 65535, 40000]

@pytest.mark.parametrize('name', MEMORIES)
def test_lists_into_float_column_stored(name):
    mem = _memories()[name]() + synth_transitions(3)
    row = _row(mem)
    mem.append({**row, 'state': [1, 2, 3, 4], 'reward': [0.5]})
    last = mem.storage.memory['state'][len(mem) - 1]
    assert len(mem) == 4 and last.tolist() == [1., 2., 3., 4.] and mem.storage.memory['reward'][3].tolist() == [0.5]

# --- the adapters: meta tensors, strings and complex numbers as priorities, flags

def _cpprb(prioritized=False):
    from fastrl_replay.compat import cpprb
    rb = (cpprb.PrioritizedReplayBuffer if prioritized else cpprb.ReplayBuffer)(16, {'obs': {'shape': 2}, 'act': {}, 'rew': {}, 'done': {}})
    for i in range(6): rb.add(obs=np.ones(2) * i, act=i, rew=1., done=0.)
    return rb

def _rb_state(rb):
    "An adapter's memory whole, with what the adapter keeps beside it"
    import copy
    return copy.deepcopy({'memory': snapshot(rb.replay if hasattr(rb, 'replay') else rb),
                          'rest': {k: v for k, v in vars(rb).items() if k not in ('replay', '_views', '_slot_views', '_plan', 'lock')}})

def refused_by(rb, call, msg:str):
    "Assert `call()` raises `ExperienceReplayException` with exactly `msg` and leaves adapter `rb` as it was"
    before = _rb_state(rb)
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$'): call()
    assert same_state(before['memory'], _rb_state(rb)['memory'])
    assert repr(before['rest']) == repr(_rb_state(rb)['rest'])

@pytest.mark.parametrize('call,msg', [
    (lambda rb: rb.add(obs=META(2), act=1, rew=1., done=0.), META_MSG.format('obs', (2,), 'float32')),
    (lambda rb: rb.update_priorities([0, 1], ['a', 'b']), 'priorities: expected numbers, got list of str'),
    (lambda rb: rb.update_priorities([0, 1], np.array([1+1j, 1.])), 'priorities: expected real numbers, got complex128'),
    (lambda rb: rb.update_priorities([0, 1], META(2)), META_MSG.format('priorities', (2,), 'float32')),
    (lambda rb: rb.update_priorities(META(2, dtype=torch.int64), [1., 1.]), META_MSG.format('indexes', (2,), 'int64')),
])
def test_cpprb_bad_values_refused(call, msg):
    rb = _cpprb(prioritized=True)
    refused_by(rb, lambda: call(rb), msg)

def test_sb3_meta_refused():
    import gymnasium as gym
    from fastrl_replay.compat import sb3
    rb = sb3.ReplayBuffer(16, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
    z = lambda *s: np.zeros(s, np.float32)
    for _ in range(5): rb.add(z(1, 2), z(1, 2), z(1, 1), z(1), z(1), [{}])
    refused_by(rb, lambda: rb.add(META(1, 2), z(1, 2), z(1, 1), z(1), z(1), [{}]), META_MSG.format('obs', (1, 2), 'float32'))

def _dopamine(prioritized=False):
    from fastrl_replay.compat import reagent
    b = (reagent.OutOfGraphPrioritizedReplayBuffer if prioritized else reagent.OutOfGraphReplayBuffer)((2,), 1, 16, 2)
    for i in range(5): b.add(np.full(2, i, np.uint8), 0, 1., False)
    return b

@pytest.mark.parametrize('flag', ['False', float('nan'), 0.5, None])
def test_reagent_terminal_not_a_flag_refused(flag):
    b = _dopamine()
    refused(b, lambda: b.add(np.zeros(2, np.uint8), 0, 1., flag), f'terminal must be a bool, or a number that is 0 or 1, got {flag!r}')

@pytest.mark.parametrize('call,msg', [
    (lambda b: b.add(META(2, dtype=torch.uint8), 0, 1., False), META_MSG.format('observation', (2,), 'uint8')),
    (lambda b: b.set_priority([0, 1], np.array([1+1j, 1.])), 'priorities: expected real numbers, got complex128'),
    (lambda b: b.set_priority([0, 1], ['a', 'b']), 'priorities: expected numbers, got list of str'),
])
def test_reagent_bad_values_refused(call, msg):
    b = _dopamine(prioritized=True)
    refused(b, lambda: call(b), msg)

@pytest.mark.parametrize('flag,stored', [(np.uint8(1), True), (2, True), (0, False), (1., True), (False, False)])
def test_reagent_int_terminal_stored(flag, stored):
    "An int terminal counts when it is not 0, as ReAgent's and Dopamine's uint8 terminal column holds it"
    b = _dopamine()
    row = b.cursor()
    b.add(np.zeros(2, np.uint8), 0, 1., flag)
    assert bool(b.storage.terminal[row]) is stored

# --- states given to load_state_dict

@pytest.mark.parametrize('name', MEMORIES)
@pytest.mark.parametrize('edit,msg', [
    (lambda s: s['sampler'].__setitem__('td', s['sampler']['td'].to('meta')),
     "state['sampler']['td']: expected a tensor with values, got a meta tensor of shape (8,) float32, which holds none"),
    (lambda s: s['sampler'].__setitem__('generator', s['sampler']['generator'].to('meta')),
     "state['sampler']['generator']: expected a tensor with values, got a meta tensor of shape (5056,) uint8, which holds none"),
    (lambda s: s['sampler'].__setitem__('generator', s['sampler']['generator'].float()),
     "the state holds a generator state of (5056,) float32 on cpu, this sampler's generator takes (5056,) uint8 on cpu"),
    (lambda s: s['sampler'].__setitem__('generator', s['sampler']['generator'][:10]),
     "the state holds a generator state of (10,) uint8 on cpu, this sampler's generator takes (5056,) uint8 on cpu"),
    (lambda s: s['sampler'].__setitem__('generator', 'g'), "the state holds a generator state of str, this sampler's generator takes (5056,) uint8 on cpu"),
])
def test_state_refused(name, edit, msg):
    import copy
    mem = _filled(name)
    state = copy.deepcopy(mem.state_dict())
    edit(state)
    refused(mem, lambda: mem.load_state_dict(state), msg)

def test_state_with_meta_rows_refused():
    import copy
    mem = _filled('ER')
    state = copy.deepcopy(mem.state_dict())
    state['storage']['rows'] = torch.from_numpy(state['storage']['rows']).to('meta')
    refused(mem, lambda: mem.load_state_dict(state), f"state['storage']['rows']: expected a tensor with values, got a meta tensor of shape "
                                                       f"{tuple(state['storage']['rows'].shape)} uint8, which holds none")

# --- a TD error too large for float32, meta tensors, unknown arguments and capacities no machine holds

def test_batch_td_error_too_large_for_float32_refused():
    "A finite float64 TD error past float32's range would be stored as inf; `update_td` refuses it, and so does `+`"
    mem = _filled('ER')
    rows = {k: v[:2].clone() for k, v in mem.storage.memory.items()}
    refused(mem, lambda: mem + {**rows, 'td_error': np.array([[1.], [-1e300]])},
            "column 'td_error': expected values within float32's range (±3.403e+38), got 1e+300")
    refused(mem, lambda: mem.append({**_row(mem), 'td_error': np.float64(1e39)}),
            "column 'td_error': expected values within float32's range (±3.403e+38), got 1e+39")

def test_first_transition_of_a_meta_tensor_refused():
    er = ExperienceReplay(4, 8, 1, seed=0)
    refused(er, lambda: er.append({'state': META(3), 'action': 1}), META_MSG.format("column 'state'", (3,), 'float32'))
    assert er.memory is None

def test_update_td_with_meta_generations_refused():
    mem = _filled('ER')
    refused(mem, lambda: mem.update_td(torch.ones(2), torch.tensor([0, 1]), META(2, dtype=torch.int64)),
            META_MSG.format('generations', (2,), 'int64'))

@pytest.mark.parametrize('where', ['rows', 'data'])
def test_storage_state_of_meta_values_refused(where):
    "A storage's own `load_state_dict`, which the memory's checks of a whole state do not guard"
    from fastrl_replay.memory.experience_replay import ColumnStorage
    st = ColumnStorage(max_sz=8, device='cpu', storage_dir=None)
    st.add({'s': torch.arange(6.).reshape(3, 2), 'a': torch.tensor([1, 2, 3])})
    state = {**st.state_dict()}
    if where == 'rows': state['rows'], msg = torch.from_numpy(state['rows']).to('meta'), META_MSG.format('rows', tuple(state['rows'].shape), 'uint8')
    else:
        state['columns'] = {k: {'shape': c['shape'], 'dtype': c['dtype'], 'data': torch.zeros(8, *c['shape']).to('meta')}
                            for k, c in state['columns'].items()}
        state.pop('rows')
        msg = META_MSG.format("column 's'", (8, 2), 'float32')
    other = ColumnStorage(max_sz=8)
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$'): other.load_state_dict(state)
    assert other.memory is None and (other.pointer, len(other)) == (0, 0)

def test_unknown_argument_refused():
    with pytest.raises(ExperienceReplayException, match=re.escape(
            "ExperienceReplay: expected arguments among ['bs', 'max_sz', 'warmup_sz', 'memory', 'device', 'generator', 'seed', "
            "'sampler', 'storage_dir', 'fields'], got unknown ['batch_size']")):
        ExperienceReplay(batch_size=4)

def test_capacity_past_memory_refused_before_allocating():
    from fastrl_replay.memory.experience_replay import ColumnStorage
    msg = f'max_sz={2**40}: {2**40:,} rows of at least a byte each need {2**40:,} bytes, {MORE_THAN_RAM}'
    for make in (lambda: ColumnStorage(max_sz=2**40), lambda: ExperienceReplay(max_sz=2**40)):
        with pytest.raises(ExperienceReplayException, match=f'^{re.escape(msg)}$'): make()
    n = RAM // 64  # rows that fit, of a byte each; of 4,000 floats they do not
    st = ColumnStorage(max_sz=n)
    big = f'max_sz={n}: {n:,} rows of 16000 bytes each need {n * 16000:,} bytes, {MORE_THAN_RAM}'
    with pytest.raises(ExperienceReplayException, match=f'^{re.escape(big)}$'): st.add({'obs': torch.zeros(1, 4000)})
    assert st.memory is None and len(st) == 0
