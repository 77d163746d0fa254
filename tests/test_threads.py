"The library's own training runs fit on one torch thread and give the setting back afterwards."
import torch
from fastai.callback.core import Callback
from fastrl_replay.agents.dqn import dqn_learner
from fastrl_replay.threads import TorchThreads, torch_threads

class Seen(Callback):
    "The torch thread counts seen during the batches of a fit"
    order = 100
    def before_fit(self): self.threads = set()
    def after_batch(self): self.threads.add(torch.get_num_threads())

def test_dqn_learner_fits_on_one_thread_and_restores_the_setting():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        learn, seen = dqn_learner('CartPole-v1', steps_per_epoch=40, replay=dict(bs=8, warmup_sz=16), net=dict(hidden=(8,)), seed=0), Seen()
        with learn.no_bar(), learn.no_logging(): learn.fit(1, cbs=seen)
        assert seen.threads == {1} and torch.get_num_threads() == 2
        assert sum(isinstance(cb, TorchThreads) for cb in learn.cbs) == 1
    finally: torch.set_num_threads(before)

def test_torch_threads_restores_after_an_exception():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        try:
            with torch_threads(1):
                assert torch.get_num_threads() == 1
                raise KeyError('x')
        except KeyError: pass
        assert torch.get_num_threads() == 2
        with torch_threads(None): assert torch.get_num_threads() == 2
    finally: torch.set_num_threads(before)

def test_command_line_run_trains_on_one_thread_and_restores_the_callers_setting(tmp_path):
    "`run_train` (what `fastrl-replay train` calls) fits on one thread inside `torch_threads(1)`, not by a process-wide setting"
    from fastrl_replay.runs import run_train
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        seen = Seen()
        m = run_train(steps=200, replay_size=200, out=str(tmp_path), quiet=True,
                      learner=dict(replay=dict(bs=8, warmup_sz=16), net=dict(hidden=(8,)), cbs=[seen]))
        assert m['env_steps'] >= 200 and seen.threads == {1}
        assert torch.get_num_threads() == 3
        torch.set_num_threads(2)
        try: run_train(steps=200, out=str(tmp_path), quiet=True, learner=dict(replay=dict(bs=8, warmup_sz=16), cbs=[Boom()]))
        except KeyError: pass
        assert torch.get_num_threads() == 2  # restored after a run that raises, too
    finally: torch.set_num_threads(before)

class Boom(Callback):
    "Raise in the first batch of a fit"
    def after_batch(self): raise KeyError('boom')

def test_the_ray_dqn_in_one_process_leaves_the_callers_threads():
    "Collectors and shards set one thread only in an actor's own process; made in this one (`local=True`) they leave it alone"
    from fastrl_replay.agents.dqn_ray import dqn_ray_learner
    from fastrl_replay.distributed import close_learner
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        learn, seen = dqn_ray_learner(steps_per_epoch=100, replay=dict(bs=8, warmup_sz=50), net=dict(hidden=(8,)),
                                      ray=dict(actors=1, shards=1, local=True, chunk=50)), Seen()
        assert torch.get_num_threads() == 3
        try:
            with learn.no_bar(), learn.no_logging(): learn.fit(1, cbs=seen)
        finally: close_learner(learn)
        assert seen.threads == {1} and torch.get_num_threads() == 3
    finally: torch.set_num_threads(before)
