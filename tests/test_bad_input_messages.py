"Every bad input the memory notebooks used to show: the exact message, and the memory left exactly as it was."
import numpy as np, pytest, torch
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.laber import LaBERmean, LaBERExperienceReplay
from fastrl_replay.compat.reagent import CircularReplayBuffer
from fastrl_replay.test_utils import synth_transitions

def raises(call, msg):
    with pytest.raises(ExperienceReplayException) as e: call()
    assert msg in str(e.value), (msg, str(e.value))

def full_er():
    er = ExperienceReplay(max_sz=20, warmup_sz=19)
    for i in range(5): er + synth_transitions(5, start=5 * i)
    return er

B = synth_transitions(5)
ER_BATCHES = [({k: v for k, v in B.items() if k != 'reward'}, "batch columns do not match the memory: missing ['reward'], extra []"),
              ({**B, 'bonus': torch.zeros(5, 1)}, "missing [], extra ['bonus']"),
              ({**B, 'state': torch.zeros(5, 3)}, "column 'state': expected shape (n, 4), got (5, 3)"),
              ({**B, 'reward': torch.zeros(4, 1)}, "columns must share their batch size, got rows per column"),
              ({**B, 'state': B['state'].long()}, "column 'state': dtype int64 cannot be stored as float32 without loss"),
              ({**B, 'td_error': torch.full((5, 1), float('nan'))}, "'td_error' holds NaN or inf values"),
              ((B, B), 'a batch is a BD, a dict of tensors or a 1-tuple holding one; got a tuple of 2 elements'),
              ([B], 'a batch is a BD, a dict of tensors or a 1-tuple holding one; got list')]

@pytest.mark.parametrize('batch,msg', ER_BATCHES)
def test_bad_batches(batch, msg):
    er = full_er()
    snap = {k: v.clone() for k, v in er.memory.items()}
    raises(lambda: er + batch, msg)
    assert (er.pointer, len(er)) == (5, 20)
    for k, v in er.memory.items(): assert torch.equal(v, snap[k])

@pytest.mark.parametrize('call,msg', [
    (lambda: ExperienceReplay(max_sz=10, warmup_sz=11), 'warmup_sz must be an int between 0 and max_sz=10, got 11'),
    (lambda: ExperienceReplay(bs=0), 'bs must be a positive int, got 0'),
    (lambda: ExperienceReplay(max_sz=0), 'max_sz must be a positive int, got 0'),
    (lambda: ExperienceReplay(seed=1, generator=torch.Generator()), 'give either a generator or a seed, not both'),
    (lambda: 0 + full_er(), 'memory must be on the left'),
    (lambda: sum([full_er(), full_er()]), 'memory must be on the left'),
    (lambda: full_er()[20], 'index 20 does not fit a memory of 20 rows'),
    (lambda: full_er()['state'], "columns are read from `memory`: er.memory['state']"),
    (lambda: full_er().update_td(torch.ones(3), [3, 4]), 'td_errors: expected shape (2,) or (2, 1) for 2 indices, got (3,)'),
    (lambda: full_er().update_td(torch.tensor([1., float('inf')]), [3, 4]), "'td_errors' holds NaN or inf values"),
])
def test_bad_settings_and_calls(call, msg): raises(call, msg)

def per_with_rows():
    per = PrioritizedExperienceReplay(bs=2, max_sz=4, warmup_sz=4, alpha=1., eps=1e-12, seed=0) + synth_transitions(4)
    per.set_priority(range(4), [1., 0., 1., 0.])
    return per

@pytest.mark.parametrize('call,msg', [
    (lambda m: m.update_td(torch.tensor([1.]), [7]), 'indices [7] are out of range for a memory of 4 rows'),
    (lambda m: m.set_priority([1, 2], [1., -1.]), 'values must be finite and >= 0, got [-1.0]'),
    (lambda m: m.set_priority([1, 2], [1.]), 'expected one priority per index, got 1 for 2 indices'),
    (lambda m: m.get_priority([9]), 'indices [9] are out of range for a memory of 4 rows'),
    (lambda m: m + {**synth_transitions(1), 'weight': torch.ones(1, 1)}, "extra ['weight']"),
])
def test_bad_prioritized_calls(call, msg):
    per = per_with_rows()
    snap = per.get_priority(range(4)), per.memory['td_error'].clone(), per.max_priority
    raises(lambda: call(per), msg)
    assert torch.equal(per.get_priority(range(4)), snap[0]) and torch.equal(per.memory['td_error'], snap[1])
    assert per.max_priority == snap[2]

@pytest.mark.parametrize('call,msg', [
    (lambda: PrioritizedExperienceReplay(memory={**synth_transitions(1), 'weight': torch.ones(1, 1)}), "column 'weight' is reserved"),
    (lambda: PrioritizedExperienceReplay(alpha=-1), 'alpha must be a finite number >= 0, got -1'),
    (lambda: PrioritizedExperienceReplay(eps=0), 'eps must be a finite number > 0, got 0'),
    (lambda: PrioritizedExperienceReplay(beta_steps=-1), 'beta_steps must be an int >= 0, got -1'),
    (lambda: PrioritizedExperienceReplay(weight_norm='max'), "weight_norm must be 'memory', 'batch' or None, got 'max'"),
])
def test_bad_prioritized_settings(call, msg): raises(call, msg)

def test_a_memory_without_priority_mass_says_so():
    zero = PrioritizedExperienceReplay(bs=2, max_sz=4, warmup_sz=1) + synth_transitions(2)
    zero.set_priority([0, 1], [0., 0.])
    raises(zero.sample, 'every row has priority 0: the tree has no mass')

@pytest.mark.parametrize('call,msg', [
    (lambda: LaBERmean(2, 4, seed=0)(priorities=np.ones(7)), 'expected shape (8,) for m * batch_size = 4 * 2 rows, got (7,)'),
    (lambda: LaBERmean(2, 4, seed=0)(priorities=-np.ones(8)), 'priorities must be finite and >= 0'),
    (lambda: LaBERmean(2, 4, eps=0)(priorities=np.zeros(8)), 'every priority is 0 and eps is 0'),
    (lambda: LaBERmean(0), 'batch_size must be a positive int, got 0'),
    (lambda: LaBERExperienceReplay(variant='median'), "variant must be 'mean', 'lazy' or 'max', got 'median'"),
    (lambda: LaBERExperienceReplay(bs=2, max_sz=4, warmup_sz=1, memory=synth_transitions(2)).sample(), 'LaBER sampling needs `score`'),
])
def test_bad_laber_input(call, msg): raises(call, msg)

def obs(s): return np.array([s + 1, 0], np.int32)

@pytest.mark.parametrize('call,msg', [
    (lambda b: b.add(np.zeros(3, np.int32), 0, 0., False), 'observation: expected shape (2,), got (3,)'),
    (lambda b: b.add(np.zeros(2, np.float32), 0, 0., False), 'observation: dtype float32 cannot be stored as int32 without loss'),
    (lambda b: b.add(obs(5), 0.5, 0., False), 'action: dtype float64 cannot be stored as int64 without loss'),
    (lambda b: b.add(obs(5), 0, [1., 2.], False), 'reward: expected shape (), got (2,)'),
    (lambda b: b.add(obs(5), 0, float('nan'), False), 'reward holds NaN or inf'),
    (lambda b: b.add(obs(5), 0, 0., False, truncated=True), 'a truncated step needs next_observation'),
    (lambda b: b.add(obs(5), 0, 0., False, env_id=-1), 'env_id must be an int >= 0, got -1'),
    (lambda b: b + {'state': np.stack([obs(0)]), 'action': np.zeros((1, 1)), 'terminated': np.zeros((1, 1), bool)},
     "batch columns missing ['reward']"),
    (lambda b: b + {'state': np.zeros((1, 3), np.int32), 'action': np.zeros((1, 1), np.int64), 'reward': np.zeros((1, 1), np.float32),
                    'terminated': np.zeros((1, 1), bool)}, "column 'state': expected shape (n, 2)"),
    (lambda b: b.update_td(torch.ones(2), [0, 8]), 'indices [8] are out of range for a memory of 5 rows'),
    (lambda b: b.sample_transition_batch(indices=[4]), 'indices [4] are not valid transitions'),
    (lambda b: b.set_priority([0], [1.]), 'set_priority needs a prioritized buffer; this CircularReplayBuffer samples uniformly'),
])
def test_bad_frame_input(call, msg):
    buf = CircularReplayBuffer((2,), 3, 8, 4, update_horizon=2, observation_dtype=np.int32, seed=0)
    for s in range(5): buf.add(obs(s), 0, float(s), s == 3)
    snap = buf.add_count, buf.storage.obs.copy(), buf.storage.prev.copy(), buf.storage.next.copy(), buf.td_errors.clone()
    raises(lambda: call(buf), msg)
    assert buf.add_count == snap[0]
    for a, b in zip((buf.storage.obs, buf.storage.prev, buf.storage.next, buf.td_errors), snap[1:]): assert (a == b).all()
