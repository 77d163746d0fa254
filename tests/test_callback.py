"`ExperienceReplayCallback` inside a real fastai `Learner.fit`."
import numpy as np, pytest, torch
from fastai.callback.core import Callback
from fastai.data.core import DataLoaders
from fastai.data.load import DataLoader
from fastrl_replay.memory.experience_replay import ExperienceReplayException
from fastrl_replay.callback import ExperienceReplayCallback
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
            cb = self.learn.experience_replay
            self.fresh_steps.append(cb.fresh['step'].flatten().tolist())
            self.writes.append((cb.batch.idxs.clone(), cb.batch.new_td_error.clone()))
    def after_fit(self): self.params.append([p.detach().clone() for p in self.model.parameters()])

def fit(learn, n=1):
    with learn.no_bar(), learn.no_logging(): learn.fit(n)

def test_seed_scenario_through_fit():
    spy = Spy()
    learn = synth_replay_learner(n_batches=3, bs=10, cbs=[ExperienceReplayCallback(bs=5, max_sz=20, warmup_sz=11, seed=0), spy])
    fit(learn)
    assert spy.events == ['cancel', 'step', 'step']
    mem = learn.experience_replay.memory
    assert len(mem) == 20 and mem.pointer == 10
    assert mem.memory['step'].flatten().tolist()[:10] == list(range(20, 30))  # the third batch wrapped to the start
    assert spy.fresh_steps == [list(range(10, 20)), list(range(20, 30))]  # metrics see fresh data, not replayed rows

def test_td_errors_are_written_back_at_sampled_rows():
    spy = Spy()
    learn = synth_replay_learner(n_batches=6, bs=8, cbs=[ExperienceReplayCallback(bs=16, max_sz=100, warmup_sz=8, seed=1), spy])
    fit(learn)
    mem = learn.experience_replay.memory
    expected = torch.zeros(len(mem))
    for idxs, td in spy.writes:
        for i, v in zip(idxs.tolist(), td.flatten().tolist()): expected[i] = v  # later writes win
    assert len(spy.writes) == 6 and torch.equal(mem.memory['td_error'].flatten(), expected)
    assert not {'td_error', 'replay_idxs', 'fresh_xb'} & set(vars(learn))  # nothing but fastai's own attributes on the learner

def test_training_uses_replayed_rows():
    class Check(Callback):
        order, run_valid = 0, False
        def before_batch(self): self.batch, self.idxs = self.xb[0], self.xb[0].idxs
        def after_pred(self):
            mem = self.learn.experience_replay.memory
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
    assert len(learn.experience_replay.memory) == 20  # but every transition was kept

def test_memory_survives_fits_and_validation_adds_nothing():
    learn = synth_replay_learner(n_batches=3, bs=4, cbs=ExperienceReplayCallback(bs=4, max_sz=100, warmup_sz=4, seed=0))
    fit(learn)
    mem = learn.experience_replay.memory
    assert len(mem) == 12  # 3 training batches; the validation batch is not stored
    fit(learn, 2)
    assert learn.experience_replay.memory is mem and len(mem) == 36

def test_ready_memory_can_be_passed_in():
    from fastrl_replay.memory.experience_replay import ExperienceReplay
    er = ExperienceReplay(bs=4, max_sz=30, warmup_sz=1, seed=0, memory=synth_transitions(10, start=1000))
    learn = synth_replay_learner(n_batches=2, bs=5, cbs=ExperienceReplayCallback(er))
    fit(learn)
    assert learn.experience_replay.memory is er and len(er) == 20
    with pytest.raises(ExperienceReplayException, match=r'^pass the memory as ExperienceReplayCallback\(memory\)$'):
        ExperienceReplayCallback(experience_replay=er, bs=32)
    with pytest.raises(ExperienceReplayException, match=r"a ready memory comes with its own settings; got \['bs'\] too"):
        ExperienceReplayCallback(er, bs=32)

def test_the_memory_is_saved_by_its_own_name_never_by_learner_save(tmp_path):
    "`learn.experience_replay.memory.save(path)` writes the memory; nothing under a memory's name resolves to `Learner.save`"
    from fastai.learner import Learner
    from fastrl_replay.memory.persist import load_memory
    learn = synth_replay_learner(n_batches=3, bs=10, cbs=ExperienceReplayCallback(bs=4, max_sz=40, warmup_sz=8, seed=0))
    fit(learn)
    mem = learn.experience_replay.memory
    mem.save(tmp_path/'mem')
    back = load_memory(tmp_path/'mem')
    assert len(back) == 30 and torch.equal(back.memory['step'], mem.memory['step']) and not (tmp_path/'models').exists()
    for name in ('memory', 'replay', 'replay_memory'):  # the learner has no attribute of a memory's name
        assert not hasattr(learn, name)
    for save in (learn.experience_replay.memory.save, getattr(learn.experience_replay.memory, 'save')):
        assert getattr(save, '__func__', None) is not Learner.save

def test_batches_with_targets_are_rejected():
    rows = synth_transitions(8)
    items = [({k: v[i] for k, v in rows.items()}, rows['reward'][i]) for i in range(8)]
    learn = synth_replay_learner(cbs=ExperienceReplayCallback(bs=4, max_sz=10, warmup_sz=1))
    learn.dls = DataLoaders(DataLoader(items, bs=4), DataLoader(items, bs=4), device='cpu')
    with pytest.raises(ExperienceReplayException, match='1 inputs and 1 targets'): fit(learn)

def test_the_sampled_batch_is_a_replay_batch_whose_loss_reports_td_errors():
    from fastrl_replay.callback import ReplayBatch
    seen = []
    class Look(Callback):
        order, run_valid = 0, False
        def after_loss(self): seen.append((type(self.xb[0]), self.xb[0].new_td_error.shape, self.xb[0].weight))
    learn = synth_replay_learner(n_batches=2, bs=6, cbs=[ExperienceReplayCallback(bs=4, max_sz=20, warmup_sz=6, seed=0), Look()])
    fit(learn)
    assert seen == [(ReplayBatch, (4, 1), None)] * 2


def test_warm_up_fills_the_memory_from_the_training_loader():
    learn = synth_replay_learner(n_batches=5, bs=4, cbs=[ExperienceReplayCallback(bs=4, max_sz=50, warmup_sz=10, seed=0)])
    cb = learn.experience_replay
    assert cb.warm_up() == 12 and len(cb.memory) == 12  # three batches of four: the first to reach the warm-up
    assert cb.warm_up() == 0
    empty = synth_replay_learner(n_batches=0, bs=4, cbs=[ExperienceReplayCallback(bs=4, max_sz=50, warmup_sz=10, seed=0)])
    with pytest.raises(ExperienceReplayException, match='a pass of the training loader added none'): empty.experience_replay.warm_up()
    assert len(empty.experience_replay.memory) == 0


def test_smooth_loss_is_nan_until_a_batch_trains():
    class Seen(Callback):
        order = 60
        def before_fit(self): self.seen = []
        def after_batch(self): self.seen.append(float(self.learn.smooth_loss))
    spy = Seen()
    fit(synth_replay_learner(n_batches=3, bs=10, cbs=[ExperienceReplayCallback(bs=5, max_sz=20, warmup_sz=11, seed=0), spy]))
    assert np.isnan(spy.seen[0]) and all(np.isfinite(spy.seen[1:]))
