"DQN pieces with hand-computed values, and a short end-to-end run."
import copy, numpy as np, pytest, torch
from torch import nn
from fastrl_replay.core import BD
from fastrl_replay.agents.dqn import DQNLoss, DQNTrainer, QNet, dqn_learner, evaluate, NetSettings, ExploreSettings
from fastrl_replay.agents.common import ReplaySettings
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.callback import ReplayBatch

class Fixed(nn.Module):
    "Values that are a fixed table of the first state feature (an index), for hand-computed targets"
    def __init__(self, table):
        super().__init__(); self.table = nn.Parameter(torch.tensor(table, dtype=torch.float32))
    def forward(self, x): return self.table[(x['state'] if isinstance(x, dict) else x)[:, 0].long()]

def batch():
    return BD(state=torch.tensor([[0.], [1.]]), next_state=torch.tensor([[1.], [2.]]), action=torch.tensor([[0], [1]]),
              reward=torch.tensor([[1.], [2.]]), discount=torch.tensor([[0.5], [0.25]]), terminated=torch.tensor([[False], [False]]))

def trainer(double, online, target):
    loss = DQNLoss(Fixed(online), double=double)
    loss.target = Fixed(target)
    return loss

def test_double_and_plain_targets_by_hand():
    online = [[0., 0.], [5., 1.], [0., 9.]]  # argmax at next states 1 and 2: actions 0 and 1
    target = [[0., 0.], [2., 7.], [3., 4.]]
    b = batch()
    # plain: max of the target net at the next state; double: target net at the online argmax
    assert trainer(False, online, target).td_targets(b).flatten().tolist() == [1 + 0.5 * 7, 2 + 0.25 * 4]
    assert trainer(True, online, target).td_targets(b).flatten().tolist() == [1 + 0.5 * 2, 2 + 0.25 * 4]
    b['terminated'] = torch.tensor([[True], [False]])
    assert trainer(True, online, target).td_targets(b).flatten().tolist() == [1., 2 + 0.25 * 4]

def test_loss_sets_td_error_and_uses_weights():
    tr = trainer(False, [[0., 0.], [5., 1.], [0., 9.]], [[0., 0.], [2., 7.], [3., 4.]])
    b, pred = ReplayBatch.of(batch(), torch.tensor([3, 8])), torch.tensor([[6., 0.], [0., 1.]], requires_grad=True)
    loss = tr(pred, b)
    td = b.new_td_error.flatten().tolist()
    assert td == [6 - 4.5, 1 - 3.]  # Q(s, a) - target
    huber = [1.5 - 0.5, 2. - 0.5]  # smooth L1 with beta 1 is |x| - 0.5 beyond 1
    assert torch.isclose(loss, torch.tensor(sum(huber) / 2))
    b['weight'] = torch.tensor([[1.], [0.]])
    assert torch.isclose(tr(pred, b), torch.tensor(huber[0] / 2))

def test_hard_and_polyak_target_updates():
    model = nn.Linear(2, 2)
    hard = DQNTrainer(DQNLoss(model), target_sync=3); hard.learn = type('L', (), {'model': model})(); hard.before_fit()
    with torch.no_grad(): model.weight.add_(1.)
    hard.after_step(); hard.after_step()
    assert not torch.equal(hard.dqn_loss.target.weight, model.weight)
    hard.after_step()
    assert torch.equal(hard.dqn_loss.target.weight, model.weight)
    soft = DQNTrainer(DQNLoss(model), tau=0.25); soft.learn = type('L', (), {'model': model})(); soft.before_fit()
    old = soft.dqn_loss.target.weight.clone()
    with torch.no_grad(): model.weight.add_(4.)
    soft.after_step()
    assert torch.allclose(soft.dqn_loss.target.weight, old + 0.25 * 4.)

def test_short_run_trains_the_acting_model():
    learn = dqn_learner(steps_per_epoch=1500, replay=dict(warmup_sz=300), seed=0)
    loop = learn.dls.train.dataset.loop
    assert loop.agent.model is learn.model
    before = copy.deepcopy(learn.model.state_dict())
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    assert not all(torch.equal(before[k], v) for k, v in learn.model.state_dict().items())  # the acting model was trained
    assert loop.agent.model is learn.model and learn.dqn_trainer.n_updates > 0
    assert np.isfinite(learn.recorder.losses[-1].item())
    mem = learn.experience_replay.memory
    assert mem.memory['td_error'].abs().sum() > 0
    assert len(evaluate(learn.model, n_episodes=3, max_steps=50)) == 3

def test_a_memory_must_declare_what_it_does():
    class Undeclared:  # the calls of a memory, without its declarations
        def __add__(self, b): return self
        def sample(self, bs=None): ...
        def update_td(self, td, idxs): ...
        def __len__(self): return 0
        def state_dict(self): return {}
        def load_state_dict(self, s): ...
    with pytest.raises(TypeError, match='memory must follow the ReplayMemory protocol .declare warmup_sz, makes_n_step, prioritized'):
        dqn_learner(memory=Undeclared())

def test_rejects_continuous_and_unknown_envs():
    with pytest.raises(ValueError, match='discrete actions'): dqn_learner('Pendulum-v1')
    with pytest.raises(ValueError, match="unknown gymnasium environment 'Nope-v0'"): dqn_learner('Nope-v0')

def test_surrogate_priorities_are_abs_td_without_grad():
    tr = trainer(False, [[3., 0.], [0., 5.], [0., 0.]], [[0., 0.], [2., 4.], [1., 1.]])
    p = tr.surrogate_priorities(batch())
    # row 0: Q=3, target 1 + 0.5 * 4 = 3 -> 0; row 1: Q=5, target 2 + 0.25 * 1 = 2.25 -> 2.75
    assert p.tolist() == [0., 2.75] and not p.requires_grad

def test_replay_kinds_and_their_settings():
    from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
    from fastrl_replay.memory.laber import LaBERExperienceReplay
    per = dqn_learner(steps_per_epoch=1000, optim=dict(train_every=4), replay=dict(kind='per')).experience_replay.memory
    assert type(per) is PrioritizedExperienceReplay
    assert (per.weight_norm, per.beta_steps, per.alpha, per.bs, per.max_sz) == ('batch', 2500, 0.6, 128, 50_000)
    per = dqn_learner(replay=dict(kind='per', options=dict(weight_norm='memory', alpha=0.5))).experience_replay.memory
    assert (per.weight_norm, per.alpha) == ('memory', 0.5)
    learn = dqn_learner(replay=ReplaySettings(kind='laber', options=dict(m=8)))
    lab = learn.experience_replay.memory
    assert type(lab) is LaBERExperienceReplay and lab.m == 8
    assert lab.score.__self__ is learn.loss_func and lab.score.__func__ is DQNLoss.surrogate_priorities
    with pytest.raises(ValueError, match="replay must be 'uniform', 'per' or 'laber', got 'PER'"): dqn_learner(replay=dict(kind='PER'))

def test_settings_are_grouped_and_unknown_or_inapplicable_ones_raise():
    from fastai.callback.training import GradientClip
    learn = dqn_learner(net=NetSettings(hidden=(16,), target_sync=7), explore=dict(eps_end=0.1, random_warmup=False),
                        optim=dict(lr=3e-4, max_grad_norm=10., train_every=2), replay=dict(bs=8, max_sz=300, warmup_sz=50), gamma=0.9)
    agent, mem = learn.dls.train.dataset.loop.agent, learn.experience_replay.memory
    assert (learn.model.net[0].out_features, learn.dqn_trainer.target_sync, learn.lr, learn.dls.train.bs) == (16, 7, 3e-4, 2)
    assert (agent.eps_end, agent.random_steps, (mem.bs, mem.max_sz, mem.warmup_sz)) == (0.1, 0, (8, 300, 50))
    assert [cb.max_norm for cb in learn.cbs if isinstance(cb, GradientClip)] == [10.]
    assert learn.dls.train.dataset.first_last.gamma == 0.9
    with pytest.raises(TypeError, match=r"unknown OptimSettings \['max_grad'\]; its settings are \['lr', 'train_every', 'grad_steps', 'max_grad_norm'\]"):
        dqn_learner(optim=dict(max_grad=10))
    with pytest.raises(TypeError, match="unexpected keyword argument 'eps'"): dqn_learner(explore=ExploreSettings(eps=0.1))
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_grad_norm'"): dqn_learner(max_grad_norm=10)
    mem = ExperienceReplay(bs=8, max_sz=100, warmup_sz=10)
    with pytest.raises(ValueError, match='replay settings describe a memory to make, and a ready memory comes with its own: give memory= or replay=, not both'):
        dqn_learner(memory=mem, replay=dict(bs=32))
    with pytest.raises(ValueError, match='net.hidden sizes the default QNet, and a ready model has its own layers'):
        dqn_learner(model=QNet(4, 2, (8,)), net=dict(hidden=(8,)))

@pytest.mark.cuda
@pytest.mark.parametrize('replay', ['uniform', 'per', 'laber'])
def test_short_run_on_cuda_keeps_model_batches_and_memory_on_the_device(replay):
    learn = dqn_learner(steps_per_epoch=600, replay=dict(kind=replay, warmup_sz=200, bs=32, options=dict(device='cuda')), seed=0, device='cuda')
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    mem = learn.experience_replay.memory
    assert next(learn.model.parameters()).device.type == 'cuda' and learn.dls.train.dataset.loop.agent.model is learn.model
    assert mem.memory['state'].device.type == 'cuda' and len(mem) == 600
    assert learn.dqn_trainer.n_updates == (600 - 200) // 4 + 1 and np.isfinite(learn.recorder.losses[-1].item())
    assert mem.memory['td_error'].abs().sum() > 0
    assert len(evaluate(learn.model, n_episodes=2, max_steps=20)) == 2

def test_lean_learner_trains_the_dqn_as_learner_does():
    "`dqn_learner` trains with a `LeanLearner`; the same seeded DQN on fastai's `Learner` records exactly the same"
    from fastai.learner import Learner, Recorder
    from fastai.callback.schedule import fit_flat_cos
    from fastrl_replay.learner import LeanLearner, LeanRecorder
    def records(lean):
        learn = dqn_learner(steps_per_epoch=300, replay=dict(warmup_sz=100), optim=dict(train_every=2), seed=1)
        assert type(learn) is LeanLearner
        if not lean:
            learn.__class__ = Learner
            learn.remove_cb(learn.recorder)
            learn.add_cb(Recorder(train_metrics=True, valid_metrics=False))
        with learn.no_bar(), learn.no_logging(): learn.fit_flat_cos(2, 1e-3)
        r = learn.recorder
        return type(r), [float(l) for l in r.losses], r.lrs, r.iters, [[None if v is None else float(v) for v in row] for row in r.values]
    (lean_rec, *lean), (rec, *plain) = records(True), records(False)
    assert (lean_rec, rec) == (LeanRecorder, Recorder)
    assert lean == plain
    assert len(lean[0]) == 2 * 150 - 49  # a loss per batch, less the 49 batches before the warm-up is reached

def test_a_device_this_machine_lacks_is_refused_at_build():
    "`device` goes through `as_device` before anything is made: a device the machine lacks is refused at once"
    from fastrl_replay.errors import ExperienceReplayException
    absent = f'cuda:{torch.cuda.device_count()}'  # one past the last CUDA device: none on any machine
    with pytest.raises(ExperienceReplayException, match=f"device '{absent}' is not available: this machine has"):
        dqn_learner(steps_per_epoch=100, device=absent)

@pytest.mark.parametrize('tau', [None, 0.1])
def test_lr_find_leaves_the_target_network_and_its_count_as_they_were(tau):
    "`lr_find` puts the model back after its search; the trainer puts back the target network a sync changed meanwhile"
    learn = dqn_learner(steps_per_epoch=300, replay=dict(warmup_sz=100, bs=32), optim=dict(train_every=1),
                        net=dict(hidden=(32,), target_sync=7, tau=tau), valid=dict(n_episodes=0), seed=0)
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    trainer, target = learn.dqn_trainer, learn.loss_func.target
    kept, n = copy.deepcopy(target.state_dict()), trainer.n_updates
    assert n == 201 and any(not torch.equal(w, learn.model.state_dict()[k]) for k, w in kept.items())  # 5 after a sync
    with learn.no_bar(): learn.lr_find(num_it=20, show_plot=False)  # three syncs on the way (or 20 averagings)
    assert trainer.n_updates == n and learn.loss_func.target is target
    for k, w in target.state_dict().items(): assert torch.equal(w, kept[k]), k
    with learn.no_bar(), learn.no_logging(): learn.fit(1)  # and it trains on from there
    assert trainer.n_updates == n + 300
