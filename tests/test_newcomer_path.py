"""A user's own plain fastai `Learner` on a gymnasium environment: the library's data loop, a model, the replay callback and a
loss. It trains with the documented contract alone, and each mistake a newcomer makes stops with a message that says what to do."""
import pytest, torch
import torch.nn.functional as F
from torch import nn
from fastai.learner import Learner
from fastai.data.core import DataLoaders
from fastrl_replay.data.gym import GymLoop, Source, FirstLast, EpsilonGreedy, TransitionLoader, gym_dataloaders
from fastrl_replay.memory.core import ExperienceReplayException
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.callback import ExperienceReplayCallback
from fastrl_replay.agents.dqn import DQNLoss, DQNTrainer


class QModel(nn.Module):
    "Values of each action: the agent gives it a state tensor, the learner a batch (a dict of columns)"
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    def forward(self, x): return self.net(x['state'] if isinstance(x, dict) else x)


def source_of(model, n_steps=3, fold=True):
    "CartPole-v1 stepped by an epsilon-greedy agent acting with `model`, folded into `n_steps`-step transitions when `fold`"
    loop = GymLoop('CartPole-v1', agent=EpsilonGreedy(model, 2, eps_steps=500, seed=0), n_steps=n_steps, seed=0)
    return Source([loop, FirstLast(0.99)] if fold else [loop])


def memory(): return ExperienceReplay(bs=32, max_sz=1_000, warmup_sz=100, seed=0)


def fit(learn):
    with learn.no_bar(), learn.no_logging(): learn.fit(1)


def test_a_plain_learner_trains_with_the_documented_contract():
    torch.manual_seed(0)
    model = QModel()
    source, mem, loss = source_of(model), memory(), DQNLoss(model)
    learn = Learner(gym_dataloaders(source, n=400, bs=4), model, loss_func=loss, lr=1e-3,
                    cbs=[ExperienceReplayCallback(mem), DQNTrainer(loss, target_sync=20)])
    before = [p.detach().clone() for p in model.parameters()]
    fit(learn)
    steps = source.stats().env_steps
    assert len(mem) == 400 and steps == len(mem) + len(source.queue) + sum(len(w) for w in source.windows)  # every transition stored
    assert learn.dqn_trainer.n_updates == len(learn.recorder.losses) > 0  # every batch after the warm-up trained
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert (mem.memory['td_error'] != 0).sum() > 0  # the TD errors the loss reported came back
    assert not {'td_error', 'replay_idxs', 'fresh_xb'} & set(vars(learn))  # nothing but fastai's own on the learner


def test_a_model_that_does_not_take_the_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))  # acts on states, but the learner gives it a batch
    loss = DQNLoss(model)
    learn = Learner(gym_dataloaders(source_of(model), n=400, bs=4), model, loss_func=loss,
                    cbs=[ExperienceReplayCallback(memory()), DQNTrainer(loss)])
    with pytest.raises(ExperienceReplayException, match=r"the model must take the sampled batch, a ReplayBatch: a dict of columns such as "
                       r"'state' and 'action' \(e\.g\. `def forward\(self, b\): return self\.net\(b\['state'\]\)`\); calling it raised TypeError"):
        fit(learn)


def test_a_loss_that_does_not_report_td_errors():
    torch.manual_seed(0)
    model = QModel()
    def loss(pred, b): return F.mse_loss(pred.gather(1, b['action']), b['reward'])  # forgets `b.set_td_error(td)`
    learn = Learner(gym_dataloaders(source_of(model), n=400, bs=4), model, loss_func=loss, cbs=ExperienceReplayCallback(memory()))
    with pytest.raises(ExperienceReplayException, match=r"the loss reported no TD errors: call `batch\.set_td_error\(td\)` in the loss "
                       r"\(its second argument is the ReplayBatch\), with one TD error per row, so the memory can update them$"):
        fit(learn)
    with pytest.raises(ExperienceReplayException, match=r'set_td_error expects one TD error per row, a tensor of shape \(32,\) or \(32, 1\); got shape \(32, 2\)'):
        learn = Learner(learn.dls, model, loss_func=lambda pred, b: b.set_td_error(pred) or pred.mean(), cbs=ExperienceReplayCallback(memory()))
        fit(learn)


def test_transitions_without_the_n_step_fold():
    torch.manual_seed(0)
    model = QModel()
    loss = DQNLoss(model)
    learn = Learner(gym_dataloaders(source_of(model, n_steps=1, fold=False), n=400, bs=4), model, loss_func=loss,
                    cbs=[ExperienceReplayCallback(memory()), DQNTrainer(loss)])
    with pytest.raises(ValueError, match=r"the batch has no 'discount' column: fold the environment steps into n-step transitions with "
                       r"Source\(\[GymLoop\(\.\.\.\), FirstLast\(gamma\)\]\) \(GymLoop\(n_steps=1\) for one-step returns\)$"):
        fit(learn)


def test_loaders_without_a_validation_set():
    torch.manual_seed(0)
    model = QModel()
    loss = DQNLoss(model)
    dls = DataLoaders(TransitionLoader(source_of(model), bs=4, n=400, num_workers=0))  # a training loader only
    learn = Learner(dls, model, loss_func=loss, cbs=[ExperienceReplayCallback(memory()), DQNTrainer(loss)])
    with pytest.raises(ExperienceReplayException, match=r'fastai validates after each epoch and needs a validation loader, `dls\.valid`: '
                       r'make the loaders with gym_dataloaders\(source, \.\.\.\), whose validation loader is empty$'):
        fit(learn)


def test_a_loss_without_its_target_network():
    torch.manual_seed(0)
    model = QModel()
    loss = DQNLoss(model)
    learn = Learner(gym_dataloaders(source_of(model), n=400, bs=4), model, loss_func=loss, cbs=ExperienceReplayCallback(memory()))
    with pytest.raises(ValueError, match=r"DQNLoss has no target network yet: add DQNTrainer\(loss\) to the Learner's callbacks"):
        fit(learn)


def test_a_device_the_machine_does_not_have():
    "A memory on a device the machine lacks is refused when it is built, naming the device and what the machine has"
    from fastrl_replay.errors import machine_devices
    from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
    from fastrl_replay.memory.frames import FrameStorage
    has = machine_devices()
    assert has[0] == 'cpu' and len(has) == 1 + torch.cuda.device_count() + torch.backends.mps.is_available() + (
        torch.xpu.device_count() if torch.xpu.is_available() else 0)
    listed = 'cpu only' if len(has) == 1 else ', '.join(has[:-1]) + ' and ' + has[-1]
    for make in (lambda d: ExperienceReplay(device=d), lambda d: PrioritizedExperienceReplay(device=d), lambda d: FrameStorage((2, 2), 8, device=d)):
        with pytest.raises(ExperienceReplayException, match=f"^device 'cuda:99' is not available: this machine has {listed}$"): make('cuda:99')
        with pytest.raises(ExperienceReplayException, match="a meta device keeps none"): make('meta')
    if not torch.cuda.is_available():
        with pytest.raises(ExperienceReplayException, match=f"^device 'cuda' is not available: this machine has {listed}$"):
            ExperienceReplay(device=torch.device('cuda'))
    else:
        mem = ExperienceReplay(bs=2, max_sz=8, warmup_sz=0, device='cuda', seed=0) + {'state': torch.zeros(4, 2)}
        assert mem.sample()[0]['state'].device.type == 'cuda'
