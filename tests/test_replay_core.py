"The replay core: regressions the review found, one exception type, and the protocol the callback is typed against."
import numpy as np, pytest, torch
from fastrl_replay.core import BD
from fastrl_replay.memory.core import (ExperienceReplayException, WarmupNotReached, ReplayMemory, Replay, Sampler,
                                       UniformSampler)
from fastrl_replay.memory.experience_replay import ExperienceReplay, ColumnStorage
from fastrl_replay.callback import ExperienceReplayCallback
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.laber import LaBERExperienceReplay
from fastrl_replay.compat.reagent import CircularReplayBuffer, ReplayElement
from fastrl_replay.test_utils import synth_transitions

def frame(s): return np.array([s + 1, 0], np.int32)

def frames(prioritized=True, cap=4, **kw):
    return CircularReplayBuffer((2,), 1, cap, 2, observation_dtype=np.int32, prioritized=prioritized, alpha=1., eps=1e-12,
                                seed=0, **kw)

# --- a TD update for a frame that was overwritten after it was sampled --------------------------------------------

def test_frames_skip_a_late_update_of_an_overwritten_row():
    buf = frames()
    for s in range(4): buf.add(frame(s), 0, 1., s == 3)
    _, idxs = buf.sample()
    before_max = buf.max_priority
    for s in range(4, 8): buf.add(frame(s), 0, 1., s == 7)  # every row now holds a new step
    buf.update_td(torch.tensor([50., 60.]), idxs)
    assert buf.n_stale == 2
    assert buf.max_priority == before_max == 1.  # the stale errors did not raise the entry priority
    assert buf.get_priority(idxs).tolist() == [1., 1.]  # the new steps keep the entry priority
    assert buf.td_errors[idxs].tolist() == [0., 0.]  # and no TD error of the old steps

def test_frames_apply_an_update_of_a_row_still_holding_its_step():
    buf = frames()
    for s in range(4): buf.add(frame(s), 0, 1., s == 3)
    _, idxs = buf.sample()
    buf.update_td(torch.tensor([5., 7.]), idxs)
    assert buf.n_stale == 0
    last = {int(i): v for i, v in zip(idxs, [5., 7.])}  # a repeated index: the last write wins
    assert buf.get_priority(list(last)).tolist() == pytest.approx(list(last.values()))

def test_frames_get_the_beta_schedule_and_weight_norms():
    buf = frames(beta=0.4, beta_end=1., beta_steps=2, weight_norm='memory')
    for s in range(4): buf.add(frame(s), 0, 1., s == 3)
    buf.set_priority([0, 1, 2, 3], [1., 2., 4., 8.])
    betas = []
    for _ in range(3): betas.append(buf.current_beta); buf.sample()
    assert betas == [0.4, 0.7, 1.]
    w = buf.sample_transition_batch(indices=[3])['weight']
    assert w.item() == pytest.approx(1 / 8)  # (p / p_min) ** -1 over the memory

# --- undeclared extra arguments ----------------------------------------------------------------------------------

@pytest.mark.parametrize('args,kwargs,msg', [((), dict(episode_end=True), "unknown or repeated extra elements ['episode_end']"),
                                              ((), dict(priority=0.0, extra1=3), "unknown or repeated extra elements ['extra1', 'priority']"),
                                              ((0.5,), {}, 'got 1 extra values, the buffer stores 0: []')])
def test_undeclared_step_arguments_raise_and_write_nothing(args, kwargs, msg):
    buf = frames(prioritized=False)
    with pytest.raises(ExperienceReplayException) as e: buf.add(frame(0), 0, 1., False, *args, **kwargs)
    assert msg in str(e.value)
    assert buf.add_count == 0 and buf.storage.obs.sum() == 0

def test_declared_extras_still_work():
    buf = CircularReplayBuffer((2,), 1, 4, 2, observation_dtype=np.int32, extra_storage_types=[ReplayElement('logp', (), np.float32)])
    buf.add(frame(0), 0, 1., True, logp=-0.5)
    with pytest.raises(ExperienceReplayException, match=r"unknown or repeated extra elements \['extra1'\]"):
        buf.add(frame(1), 0, 1., True, logp=-0.5, extra1=3)
    assert buf.sample_transition_batch(indices=[0])['logp'].item() == -0.5 and buf.add_count == 1

# --- unsigned index arrays (cpprb passes np.ulonglong) -------------------------------------------------------------

U64 = lambda *v: np.array(v, dtype=np.ulonglong)

def test_unsigned_indices_everywhere():
    er = ExperienceReplay(4, 8, 1) + synth_transitions(6)
    er.update_td(torch.tensor([1., 2.]), U64(1, 3))
    assert er.memory['td_error'][[1, 3], 0].tolist() == [1., 2.]
    assert er[U64(2, 5)].memory['step'].flatten().tolist() == [2, 5]
    per = PrioritizedExperienceReplay(4, 8, 1, alpha=1., eps=1e-12, seed=0) + synth_transitions(6)
    per.set_priority(U64(0, 4), [3., 5.])
    assert per.get_priority(U64(0, 4)).tolist() == [3., 5.]
    per.update_td(torch.tensor([7.]), U64(2))
    assert per.get_priority(U64(2)).tolist() == [pytest.approx(7.)]
    buf = frames()
    for s in range(4): buf.add(frame(s), 0, 1., s == 3)
    buf.update_td(torch.tensor([2.]), U64(1))
    assert buf.td_errors[1].item() == 2. and buf.get_priority(U64(1)).tolist() == [pytest.approx(2.)]

def test_unsigned_indices_out_of_range_raise_and_write_nothing():
    er = ExperienceReplay(4, 8, 1) + synth_transitions(6)
    for bad in (U64(6), U64(2**64 - 1)):
        with pytest.raises(ExperienceReplayException, match='are out of range for a memory of 6 rows'): er.update_td(torch.ones(1), bad)
    with pytest.raises(ExperienceReplayException, match='does not fit a memory of 6 rows'): er[U64(2**64 - 1)]
    assert er.memory['td_error'].sum() == 0

# --- the callback leaves the global RNG alone when given a memory ---------------------------------------------------

def test_passing_a_memory_does_not_touch_the_global_rng():
    mem = ExperienceReplay(4, 8, 1, seed=0)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    cb = ExperienceReplayCallback(mem)
    assert cb.memory is mem
    assert torch.equal(torch.rand(3), expected)

def test_a_ready_memory_refuses_settings_for_a_new_one():
    with pytest.raises(ExperienceReplayException, match=r"\['seed'\]"):
        ExperienceReplayCallback(ExperienceReplay(4, 8, 1, seed=0), seed=1)

# --- one exception type ------------------------------------------------------------------------------------------

def test_bad_input_is_a_value_error():
    er = ExperienceReplay(4, 8, 1) + synth_transitions(2)
    with pytest.raises(ValueError, match='out of range'): er.update_td(torch.ones(1), [5])
    assert issubclass(ExperienceReplayException, ValueError) and not issubclass(WarmupNotReached, ValueError)

# --- the protocol --------------------------------------------------------------------------------------------------

def test_every_memory_speaks_the_protocol():
    mems = [ExperienceReplay(), PrioritizedExperienceReplay(), LaBERExperienceReplay(), frames(),
            Replay(ColumnStorage(8), UniformSampler(seed=0), warmup_sz=1)]
    assert all(isinstance(m, ReplayMemory) for m in mems)
    assert not isinstance(object(), ReplayMemory)
    # what each memory does, declared: warm-up, whether it builds n-step returns, whether it samples by priority
    assert [(m.warmup_sz, m.makes_n_step, m.prioritized) for m in mems] == [
        (100, False, False), (100, False, True), (100, False, False), (frames().warmup_sz, True, True), (1, False, False)]
    from fastrl_replay.memory.continual import ReservoirReplay, TaskBalancedReplay
    assert [(m.makes_n_step, m.prioritized) for m in (ReservoirReplay(), TaskBalancedReplay())] == [(False, False)] * 2
    assert (frames(prioritized=False).prioritized, LaBERExperienceReplay().sampler.shardable, ExperienceReplay().sampler.shardable) == (False, False, True)

class EveryOther(Sampler):
    "Draws only even rows: a sampler written outside the library"
    def draw(self, n): return 2 * torch.randint(len(self.storage) // 2, (n,), generator=self.generator)

def test_a_sampler_written_outside_plugs_into_the_callback():
    from fastrl_replay.test_utils import synth_replay_learner
    mem = Replay(ColumnStorage(30), EveryOther(seed=0), bs=5, warmup_sz=11)
    learn = synth_replay_learner(n_batches=3, bs=10, cbs=ExperienceReplayCallback(mem))
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    assert len(mem) == 30 and (learn.experience_replay.batch.idxs % 2 == 0).all()
    assert mem.td_errors[learn.experience_replay.batch.idxs].abs().sum() > 0

def test_sampler_replay_refuses_unknown_settings():
    "A `SamplerReplay` refuses a keyword its sampler does not take with the library's exception naming the known ones"
    from fastrl_replay.memory.experience_replay import SamplerReplay
    for cls, known in [(SamplerReplay, 'seed'), (PrioritizedExperienceReplay, 'alpha'), (LaBERExperienceReplay, 'variant')]:
        with pytest.raises(ExperienceReplayException) as e: cls(bs=4, max_sz=8, warmup_sz=1, alfa=0.5)
        msg = str(e.value)
        assert cls.__name__ in msg and "unknown ['alfa']" in msg and repr(known) in msg and "'max_sz'" in msg, msg
        assert cls.sampler_cls.__name__ and known in cls.sampler_settings()
    assert PrioritizedExperienceReplay(bs=4, max_sz=8, warmup_sz=1, alpha=0.5, seed=0).sampler.alpha == 0.5
