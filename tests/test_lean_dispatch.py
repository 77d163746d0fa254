"`LeanLearner` sends the inner loop's events as fastai's `Callback.__call__` does: the same calls, skips and errors"
import pytest, torch
from fastai.callback.core import Callback
from fastai.learner import Learner
from fastrl_replay.data.synth import synth_replay_learner
from fastrl_replay.learner import LeanLearner
from fastrl_replay.callback import ExperienceReplayCallback

class Log(Callback):
    "Records the inner-loop events it is sent, as `(name, training)`"
    def __init__(self, seen): self.seen = seen
    def before_batch(self): self.seen.append((type(self).__name__, 'before_batch', self.training))
    def after_loss(self): self.seen.append((type(self).__name__, 'after_loss', self.training))
    def after_batch(self): self.seen.append((type(self).__name__, 'after_batch', self.training))

class NoTrain(Log): run_train = False
class Stopped(Log):
    def before_fit(self): self.run = False
class OwnCall(Log):
    def __call__(self, event_name):
        if event_name == 'after_loss': self.seen.append(('OwnCall', 'called', self.training))
        return super().__call__(event_name)

def events(lean:bool) -> list:
    log, learn = [], synth_replay_learner(n_batches=2, bs=4, cbs=ExperienceReplayCallback(bs=4, max_sz=50, warmup_sz=4,
                                                                                            seed=0))
    if lean: learn.__class__ = LeanLearner
    for cls in (Log, NoTrain, Stopped, OwnCall): learn.add_cb(cls(log))
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    return log

def test_inner_loop_events_as_fastai_sends_them():
    lean, plain = events(True), events(False)
    assert lean == plain
    assert ('NoTrain', 'before_batch', False) in lean and ('NoTrain', 'before_batch', True) not in lean
    assert not any(n == 'Stopped' for n, *_ in lean) and ('OwnCall', 'called', True) in lean

def test_a_handler_error_is_named_as_fastai_names_it():
    class Boom(Callback):
        def after_loss(self): raise ValueError('boom')
    msgs = []
    for cls in (LeanLearner, Learner):
        learn = synth_replay_learner(n_batches=2, bs=4, cbs=[ExperienceReplayCallback(bs=4, max_sz=50, warmup_sz=4,
                                                                                        seed=0), Boom()])
        learn.__class__ = cls
        with pytest.raises(ValueError) as e, learn.no_bar(), learn.no_logging(): learn.fit(1)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] and 'Exception occured in `Boom` when calling event `after_loss`' in msgs[0]
