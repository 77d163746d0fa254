"`ExperienceReplayCallback` inside a real fastai `Learner.fit`."
import pytest, torch
from fastai.callback.core import Callback
from fastai.data.core import DataLoaders
from fastai.data.load import DataLoader
from fastrl_replay.memory.experience_replay import ExperienceReplayCallback, ExperienceReplayException
from fastrl_replay.test_utils import synth_replay_learner, synth_transitions

class Spy(Callback):
    "Record what each training batch looked like, just before the replay callback's `after_loss` writes TD errors"
    order = -6
    def __init__(self): self.events, self.fresh_steps, self.writes, self.params = [], [], [], []
    def before_fit(self): self.params.append([p.detach().clone() for p in self.model.parameters()])
    def after_cancel_batch(self): self.events.append('cancel')
    def after_step(self): self.events.append('step')
    def after_loss(self):
        if self.training:
            self.fresh_steps.append(self.learn.fresh_xb[0]['step'].flatten().tolist())
            self.writes.append((self.learn.replay_idxs.clone(), self.learn.td_error.clone()))
    def after_fit(self): self.params.append([p.detach().clone() for p in self.model.parameters()])

def fit(learn, n=1):
    with learn.no_bar(), learn.no_logging(): learn.fit(n)

def test_seed_scenario_through_fit():
    spy = Spy()
    learn = synth_replay_learner(n_batches=3, bs=10, cbs=[ExperienceReplayCallback(bs=5, max_sz=20, warmup_sz=11, seed=0), spy])
    fit(learn)
    assert spy.events == ['cancel', 'step', 'step']
    mem = learn.experience_replay.experience_replay
    assert len(mem) == 20 and mem.pointer == 10
    assert mem.memory['step'].flatten().tolist()[:10] == list(range(20, 30))  # the third batch wrapped to the start
    assert spy.fresh_steps == [list(range(10, 20)), list(range(20, 30))]  # metrics see fresh data, not replayed rows

def test_td_errors_are_written_back_at_sampled_rows():
    spy = Spy()
    learn = synth_replay_learner(n_batches=6, bs=8, cbs=[ExperienceReplayCallback(bs=16, max_sz=100, warmup_sz=8, seed=1), spy])
    fit(learn)
    mem = learn.experience_replay.experience_replay
    expected = torch.zeros(len(mem))
    for idxs, td in spy.writes:
        for i, v in zip(idxs.tolist(), td.flatten().tolist()): expected[i] = v  # later writes win
    assert len(spy.writes) == 6 and torch.equal(mem.memory['td_error'].flatten(), expected)
    assert learn.td_error is None  # consumed, so it cannot be written to another batch's rows

def test_training_uses_replayed_rows():
    class Check(Callback):
        order, run_valid = 0, False
        def before_batch(self): self.batch, self.idxs = self.xb[0], self.learn.replay_idxs
        def after_pred(self):
            mem = self.learn.experience_replay.experience_replay
            assert torch.equal(self.batch['step'], mem.memory['step'][self.idxs])
            assert self.yb[0] is self.xb[0] and self.pred.shape == (12, 2)
    learn = synth_replay_learner(n_batches=4, bs=6, cbs=[ExperienceReplayCallback(bs=12, max_sz=50, warmup_sz=6, seed=0), Check()])
    fit(learn)

def test_warmup_skips_the_optimizer_step():
    spy = Spy()
    learn = synth_replay_learner(n_batches=4, bs=5, cbs=[ExperienceReplayCallback(bs=4, max_sz=50, warmup_sz=21), spy])
    fit(learn)
    assert spy.events == ['cancel'] * 4
    assert all(torch.equal(a, b) for a, b in zip(*spy.params))  # nothing trained
    assert len(learn.experience_replay.experience_replay) == 20  # but every transition was kept

def test_memory_survives_fits_and_validation_adds_nothing():
    learn = synth_replay_learner(n_batches=3, bs=4, cbs=ExperienceReplayCallback(bs=4, max_sz=100, warmup_sz=4, seed=0))
    fit(learn)
    mem = learn.experience_replay.experience_replay
    assert len(mem) == 12  # 3 training batches; the validation batch is not stored
    fit(learn, 2)
    assert learn.experience_replay.experience_replay is mem and len(mem) == 36

def test_ready_memory_can_be_passed_in():
    from fastrl_replay.memory.experience_replay import ExperienceReplay
    er = ExperienceReplay(bs=4, max_sz=30, warmup_sz=1, seed=0, memory=synth_transitions(10, start=1000))
    learn = synth_replay_learner(n_batches=2, bs=5, cbs=ExperienceReplayCallback(experience_replay=er))
    fit(learn)
    assert learn.experience_replay.experience_replay is er and len(er) == 20

def test_batches_with_targets_are_rejected():
    rows = synth_transitions(8)
    items = [({k: v[i] for k, v in rows.items()}, rows['reward'][i]) for i in range(8)]
    learn = synth_replay_learner(cbs=ExperienceReplayCallback(bs=4, max_sz=10, warmup_sz=1))
    learn.dls = DataLoaders(DataLoader(items, bs=4), DataLoader(items, bs=4), device='cpu')
    with pytest.raises(ExperienceReplayException, match='1 inputs and 1 targets'): fit(learn)
