"fastai's tools on the replay learners (the README's `Learner`, `dqn_learner`, `sac_learner`, `td3_learner`)"
import copy, re
import matplotlib; matplotlib.use('Agg')
import matplotlib.pyplot as plt
import numpy as np, pandas as pd, pytest, torch, gymnasium as gym
from fastai.learner import Learner, load_learner
from fastai.callback.core import Callback
from fastai.callback.schedule import fit_one_cycle, fit_flat_cos, lr_find  # registered as `Learner` methods
from fastai.callback.hook import summary
from fastai.callback.fp16 import to_fp16, MixedPrecision
from fastai.callback.training import GradientClip
from fastai.callback.tracker import SaveModelCallback, EarlyStoppingCallback
from fastai.callback.progress import CSVLogger, ShowGraphCallback
from fastrl_replay.all import *
from fastrl_replay.callback import EpisodeValidation, default_validation
from fastrl_replay.errors import ExperienceReplayException as ERE
from fastrl_replay.agents.dqn import dqn_learner, evaluate
from fastrl_replay.agents.sac import sac_learner, evaluate_actor
from fastrl_replay.agents.td3 import td3_learner

KINDS = ['readme', 'dqn', 'sac', 'td3']
CONTINUOUS = {'sac', 'td3'}
cuda = pytest.mark.cuda  # skipped without a CUDA device (conftest)


EPISODES = dict(n_episodes=2, seed=1_000)  # the validation of the learners here: two greedy episodes


def readme_learner(validation=None, n=300, cbs=()):
    "The README's `Learner`, smaller, with `validation` (default: two greedy episodes, `EpisodeValidation`)"
    torch.manual_seed(0)
    model = QNet(4, 2, hidden=(32, 32))
    agent = EpsilonGreedy(model, n_actions=2, eps_steps=600, random_steps=150, seed=0)
    source = Source([GymLoop('CartPole-v1', agent=agent, seed=0), FirstLast(gamma=0.99)])
    loss = DQNLoss(model)
    memory = ExperienceReplay(bs=32, max_sz=5_000, warmup_sz=150, seed=0)
    validation = validation if validation is not None else EpisodeValidation(**EPISODES)
    return Learner(gym_dataloaders(source, n=n, bs=4), model, loss_func=loss, lr=3e-3,
                   cbs=[ExperienceReplayCallback(memory), DQNTrainer(loss, target_sync=50), validation, TorchThreads(),
                        *cbs])


def swapped(learn, validation):
    "`learn` with `validation` in place of the `NoValidation` it was built with"
    learn.remove_cbs([cb for cb in learn.cbs if isinstance(cb, NoValidation)])
    learn.add_cb(validation)
    return learn


def make(kind, validation='episodes', n=300):
    "A small learner of `kind` whose validation plays two greedy episodes ('episodes') or is skipped ('none')"
    if kind == 'readme':
        return readme_learner(NoValidation() if validation == 'none' else None, n=n)
    valid = dict(n_episodes=0) if validation == 'none' else EPISODES  # the builders' `valid` setting
    if kind == 'dqn':
        return dqn_learner(steps_per_epoch=n, replay=dict(warmup_sz=150, max_sz=5_000, bs=32),
                           explore=dict(eps_steps=600), net=dict(hidden=(32,), target_sync=50), optim=dict(lr=3e-3),
                           valid=valid, seed=0)
    build = sac_learner if kind == 'sac' else td3_learner
    return build(steps_per_epoch=n, replay=dict(warmup_sz=64, bs=32), net=dict(hidden=(32,)),
                 optim=dict(train_every=4), valid=valid, seed=0)  # Pendulum's episodes are 200 steps: one an epoch


def quiet_fit(learn, n=1, **kwargs):
    with learn.no_bar(), learn.no_logging(): learn.fit(n, **kwargs)
    return learn


def greedy_returns(kind, model, n, seed):
    "The returns of the library's own greedy evaluation of `model`"
    if kind in CONTINUOUS: return evaluate_actor(model, 'Pendulum-v1', n_episodes=n, seed=seed)
    return evaluate(model, 'CartPole-v1', n_episodes=n, seed=seed)


def observations(kind, n=16):
    env = 'Pendulum-v1' if kind in CONTINUOUS else 'CartPole-v1'
    return torch.as_tensor(np.stack([gym.make(env).reset(seed=s)[0] for s in range(n)]), dtype=torch.float32)


def actions(kind, model, obs):
    "What `model` does for each row of `obs`: its greedy action"
    with torch.no_grad(): return model.actor(obs) if kind in CONTINUOUS else model(obs).argmax(1)


# validation: the columns, the values, the reproducibility

@pytest.mark.parametrize('kind', KINDS)
def test_columns_line_up_in_the_recorder_and_csv(kind, tmp_path):
    learn = make(kind)
    learn.path = tmp_path
    quiet_fit(learn, 2, cbs=CSVLogger())
    names, values = list(learn.recorder.metric_names), learn.recorder.values
    csv = pd.read_csv(tmp_path/'history.csv')
    assert list(csv.columns) == names
    assert names[:3] == ['epoch', 'train_loss', 'valid_loss'] and names[-2:] == ['valid_return', 'time']
    assert all(len(v) == len(names) - 2 for v in values)  # the recorder keeps neither the epoch nor the time
    np.testing.assert_allclose(csv.iloc[:, 1:-1].to_numpy(float), np.array(values, float), rtol=1e-6)
    assert all(np.isfinite(v[1]) and v[1] >= 0 for v in values)  # a loss
    assert values[-1][names.index('valid_return') - 1] == np.mean(learn.episode_validation.returns)


@pytest.mark.parametrize('kind', ['readme', 'sac'])
def test_printed_table_lines_up(kind, capsys):
    learn = make(kind)
    learn.fit(2)  # with the progress bar: fastai prints the table
    out = capsys.readouterr().out
    lines = [l.split('\r')[-1].strip() for l in out.split('\n')]
    header = next(l for l in lines if l.startswith('epoch'))
    rows = [l for l in lines if re.match(r'^\d+\s', l)]
    names = header.split()
    assert names == list(learn.recorder.metric_names) and len(rows) == 2
    for i, row in enumerate(rows):
        cells = row.split()
        assert len(cells) == len(names)  # no two values run together
        for v, want in zip(cells[1:-1], learn.recorder.values[i]): assert float(v) == pytest.approx(want, 1e-4, 1e-4)
    if kind == 'sac': assert any(len(c) > 8 for c in rows[-1].split()[1:-1])  # a return wider than fastai's 8


@pytest.mark.parametrize('kind', KINDS)
def test_valid_return_is_the_greedy_evaluation(kind):
    learn = quiet_fit(make(kind))
    rec = learn.recorder
    returns = greedy_returns(kind, learn.model, 2, 1_000)
    assert learn.episode_validation.returns == pytest.approx(returns, rel=1e-5)
    assert rec.values[-1][list(rec.metric_names).index('valid_return') - 1] == pytest.approx(np.mean(returns), rel=1e-5)
    first = list(learn.validate())  # again, as fastai's `validate` runs it: the same episodes, the same loss
    assert learn.episode_validation.returns == pytest.approx(returns, rel=1e-5)
    assert first == list(learn.validate())


@pytest.mark.parametrize('kind', KINDS)
def test_validation_leaves_training_unchanged(kind):
    "The episodes' environment is their own and the loss's draws are forked: training sees the same steps and losses"
    with_episodes, without = quiet_fit(make(kind), 2), quiet_fit(make(kind, 'none'), 2)
    assert with_episodes.recorder.losses == without.recorder.losses
    for k, w in with_episodes.model.state_dict().items(): assert torch.equal(w, without.model.state_dict()[k]), k
    a, b = (l.experience_replay.memory for l in (with_episodes, without))
    assert len(a) == len(b) and torch.equal(a.memory['state'], b.memory['state'])


def test_validation_of_a_memory_that_builds_its_transitions_records_the_return_alone():
    learn = make('dqn')
    learn.experience_replay.memory.makes_n_step = True  # as a `FrameReplay` declares: the steps are not its transitions
    quiet_fit(learn)
    names = ['epoch', 'train_loss', 'return', 'episodes', 'epsilon', 'valid_return', 'time']
    assert list(learn.recorder.metric_names) == names
    assert len(learn.recorder.values[0]) == 5
    assert learn.recorder.values[0][-1] == np.mean(learn.episode_validation.returns)
    with pytest.raises(ERE, match="SaveModelCallback monitors 'valid_loss'.*monitor='valid_return'"):
        quiet_fit(learn, cbs=SaveModelCallback())


def test_policy_and_environment_are_declared_or_refused():
    class Acting:  # an agent without a greedy policy
        def __init__(self, agent): self.agent = agent
        def __call__(self, state): return self.agent(state)
    learn = make('sac', 'none')
    loop = learn.dls.train.dataset.loop
    loop.agent = Acting(loop.agent)
    assert type(default_validation(learn.dls)) is NoValidation
    with pytest.raises(ERE, match=r"agent's `greedy\(state\)`, and Acting has none: .*act=\.\.\."):
        quiet_fit(swapped(learn, EpisodeValidation(n_episodes=1)))
    both = make('readme', n=50)
    both.add_cb(NoValidation())
    with pytest.raises(ERE, match='NoValidation skips the validation that EpisodeValidation plays'):
        quiet_fit(both)
    ready = Source([GymLoop(env=gym.make('CartPole-v1'), agent=EpsilonGreedy(QNet(4, 2), 2, seed=0))])
    assert type(default_validation(gym_dataloaders(ready))) is NoValidation
    assert type(default_validation(make('readme').dls)) is EpisodeValidation


@pytest.mark.parametrize('build', [dqn_learner, sac_learner, td3_learner])
def test_builders_validate_by_default_and_valid_sets_or_turns_it_off(build):
    env = 'CartPole-v1' if build is dqn_learner else 'Pendulum-v1'
    small = dict(steps_per_epoch=100, replay=dict(max_sz=1_000))
    v = build(**small).episode_validation  # greedy episodes after each epoch: `ValidSettings()`
    assert type(v) is EpisodeValidation and (v.n_episodes, v.seed, v.env, v.loss) == (5, 10_000, None, None)
    v = build(**small, valid=ValidSettings(n_episodes=3, seed=7, loss=False)).episode_validation
    assert (v.n_episodes, v.seed, v.loss) == (3, 7, False)
    off = build(**small, valid=dict(n_episodes=0))
    assert not any(isinstance(cb, EpisodeValidation) for cb in off.cbs) and type(off.no_validation) is NoValidation
    assert type(build(gym.make(env), **small).no_validation) is NoValidation  # a ready env is made anew...
    made = build(gym.make(env), **small, valid=dict(env=env))  # ...only from `valid.env`
    assert type(made.episode_validation) is EpisodeValidation
    with pytest.raises(ValueError, match='valid.n_episodes must be an int >= 0'):
        build(**small, valid=dict(n_episodes=-1))
    with pytest.raises(TypeError, match=r"unknown ValidSettings \['episodes'\]"): build(**small, valid=dict(episodes=2))


# fastai's tools

@pytest.mark.parametrize('kind', KINDS)
def test_save_model_loads_the_best_epoch(kind, tmp_path):
    class Weights(Callback):
        order = 70  # after the trackers
        def before_fit(self): self.seen = []
        def after_epoch(self): self.seen.append(copy.deepcopy(self.model.state_dict()))
    learn, spy = make(kind), Weights()
    learn.path = tmp_path
    quiet_fit(learn, 3, cbs=[SaveModelCallback(monitor='valid_return'), spy])
    returns = [v[list(learn.recorder.metric_names).index('valid_return') - 1] for v in learn.recorder.values]
    best = int(np.argmax(returns))  # the first of equal bests: fastai keeps a new best only when it is greater
    for k, w in learn.model.state_dict().items(): assert torch.equal(w, spy.seen[best][k]), k
    assert (tmp_path/'models'/'model.pth').exists()


@pytest.mark.parametrize('kind', ['readme', 'dqn'])
def test_early_stopping_on_the_return(kind):
    learn = quiet_fit(make(kind, n=200), 8, cbs=EarlyStoppingCallback(monitor='valid_return', patience=1))
    returns = [v[list(learn.recorder.metric_names).index('valid_return') - 1] for v in learn.recorder.values]
    stop = next((i for i in range(1, 8) if returns[i] <= max(returns[:i])), 7)  # fastai's rule: np.greater, patience 1
    assert len(returns) == stop + 1 < 8


@pytest.mark.parametrize('kind', ['readme', 'td3'])
def test_show_graph_and_plot_loss_draw_the_valid_loss(kind):
    learn = make(kind)
    with learn.no_logging(): learn.fit(2, cbs=ShowGraphCallback())
    ax = learn.recorder.plot_loss(skip_start=0, ax=plt.subplots()[1])
    train, valid = ax.get_lines()[:2]
    assert list(valid.get_ydata()) == pytest.approx([v[1] for v in learn.recorder.values])
    assert list(valid.get_xdata()) == learn.recorder.iters and len(train.get_ydata()) == len(learn.recorder.losses)
    plt.close('all')


@pytest.mark.parametrize('kind', KINDS)
def test_without_validation_the_table_lines_up_and_the_tools_say_what_to_change(kind, tmp_path):
    learn = make(kind, 'none')
    learn.path = tmp_path
    quiet_fit(learn, cbs=CSVLogger())
    names = list(learn.recorder.metric_names)
    assert 'valid_loss' not in names and list(pd.read_csv(tmp_path/'history.csv').columns) == names
    assert all(len(v) == len(names) - 2 for v in learn.recorder.values)
    for cb in (SaveModelCallback(), EarlyStoppingCallback()):
        message = rf"{type(cb).__name__} monitors 'valid_loss'.*monitor='train_loss'.*EpisodeValidation\(\)"
        with pytest.raises(ERE, match=message):
            quiet_fit(learn, cbs=cb)
    with pytest.raises(ERE, match='ShowGraphCallback plots .* no valid_loss'):
        with learn.no_logging(): learn.fit(1, cbs=ShowGraphCallback())
    quiet_fit(learn, cbs=SaveModelCallback(monitor='train_loss'))  # the training loss is recorded
    if isinstance(learn.recorder, LeanRecorder):
        assert len(learn.recorder.plot_loss(skip_start=0, ax=plt.subplots()[1]).get_lines()) == 1  # the training loss
        plt.close('all')


@pytest.mark.parametrize('kind', KINDS)
def test_summary_takes_nothing_from_training(kind):
    learn = make(kind)
    text = learn.summary()
    assert type(learn.model).__name__ in text and 'Total params' in text and 'EpisodeValidation' in text
    assert learn.dls.train.dataset.n_ready > 0  # the batch it ran waits for the fit
    a, b = quiet_fit(learn), quiet_fit(make(kind))
    assert a.recorder.losses == b.recorder.losses


@pytest.mark.parametrize('kind', KINDS)
def test_lr_find_from_a_fresh_learner(kind, tmp_path):
    learn = make(kind)
    learn.path = tmp_path
    before = copy.deepcopy(learn.model.state_dict())
    with learn.no_bar(): found = learn.lr_find(num_it=20, show_plot=False)
    mem = learn.experience_replay.memory
    assert 1e-7 < found.valley < 10 and len(learn.recorder.losses) > 0
    assert len(mem) >= mem.warmup_sz and not mem.td_errors.any()  # filled first; the tried models' TD errors not kept
    for k, w in learn.model.state_dict().items(): assert torch.equal(w, before[k]), k
    if kind in ('readme', 'dqn'):  # the target network made at the search's start stays the model's copy
        assert learn.dqn_trainer.n_updates == 0
        for k, w in learn.loss_func.target.state_dict().items(): assert torch.equal(w, before[k]), k
    else: assert (learn.actor_critic_trainer.n_updates, learn.actor_critic_trainer.n_actor) == (0, 0)
    quiet_fit(learn)  # and it trains on


@pytest.mark.parametrize('kind', KINDS)
def test_schedules_and_gradient_clipping(kind):
    class Norms(Callback):
        order = GradientClip.order + 1
        def before_fit(self): self.norms = []
        def before_step(self):
            grads = [p.grad.norm() for p in self.model.parameters() if p.grad is not None]
            self.norms.append(float(torch.stack(grads).norm()))
    learn, spy = make(kind), Norms()
    quiet_fit(learn, cbs=[GradientClip(0.05), spy])
    assert spy.norms and max(spy.norms) <= 0.05 * 1.0001
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 2e-3)
    lrs = learn.recorder.lrs
    assert max(lrs) == pytest.approx(2e-3, rel=0.05) and lrs[0] < max(lrs) / 5 and lrs[-1] < max(lrs) / 100
    with learn.no_bar(), learn.no_logging(): learn.fit_flat_cos(1, 1e-3)
    lrs = learn.recorder.lrs
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] < 1e-4


@pytest.mark.parametrize('kind', ['readme', 'dqn', 'td3'])
def test_tensorboard_logs_the_columns(kind, tmp_path):
    pytest.importorskip('tensorboard')  # a dev dependency
    from fastai.callback.tensorboard import TensorBoardCallback
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    learn = make(kind)
    quiet_fit(learn, 2, cbs=TensorBoardCallback(tmp_path, trace_model=kind == 'readme', log_preds=False))
    events = EventAccumulator(str(tmp_path)); events.Reload()
    tags = events.Tags()['scalars']
    assert {'train_loss', 'valid_loss', 'valid_return'} <= set(tags)
    assert [e.value for e in events.Scalars('valid_return')] == pytest.approx([v[-1] for v in learn.recorder.values])
    with pytest.raises(ERE, match='pass log_preds=False'):
        quiet_fit(learn, cbs=TensorBoardCallback(tmp_path))


@pytest.mark.parametrize('kind', KINDS)
def test_export_and_load_learner_act_the_same(kind, tmp_path):
    learn = quiet_fit(make(kind))
    learn.export(tmp_path/'policy.pkl')
    with pytest.warns(UserWarning, match='Only load files you trust'): policy = load_learner(tmp_path/'policy.pkl')
    obs = observations(kind)
    assert torch.equal(actions(kind, policy.model, obs), actions(kind, learn.model, obs))
    assert greedy_returns(kind, policy.model, 1, 5) == greedy_returns(kind, learn.model, 1, 5)


# devices

class Devices(Callback):
    "The devices of the model's inputs (from the batches and from the agent acting) and of the batches"
    order = 0
    def before_fit(self):
        self.inputs, self.batches = set(), set()
        self.hooks = [m.register_forward_pre_hook(lambda m, args: self.inputs.add(_device(args[0])))
                      for m in self.model.modules() if isinstance(m, torch.nn.Linear)]  # an agent may call a part
    def before_batch(self):
        if self.training: self.batches |= {_device(self.xb[0]), _device(self.learn.experience_replay.fresh)}
    def after_fit(self):
        for h in self.hooks: h.remove()

def _device(x): return str(next(iter(x.values())).device if isinstance(x, dict) else x.device)


def run_on(kind, device, move):
    learn, spy = make(kind), Devices()
    if move == 'dls': learn.dls.to(device)
    else: learn.to(device)
    quiet_fit(learn, cbs=spy)
    return learn, spy


def check_devices(kind, learn, spy, device):
    dev = str(torch.device(device))
    assert {str(p.device) for p in learn.model.parameters()} == {dev}
    assert spy.inputs == {dev} and spy.batches == {dev}  # the batches, replayed and fresh, and the agent's states
    if kind in ('readme', 'dqn'): assert {str(p.device) for p in learn.loss_func.target.parameters()} == {dev}
    assert learn.experience_replay.memory.device.type == 'cpu'  # the memory stays where it was made; its samples move


@pytest.mark.parametrize('kind', KINDS)
def test_moving_to_a_device_moves_model_agent_and_batches(kind):
    learn, spy = run_on(kind, 'cpu', 'dls' if kind == 'readme' else 'learner')
    check_devices(kind, learn, spy, 'cpu')


MOVES = [('readme', 'dls'), ('dqn', 'dls'), ('dqn', 'learner'),  # a plain `Learner` has no `to`: it follows the loaders
         *((k, m) for k in ('sac', 'td3') for m in ('dls', 'learner'))]

@cuda
@pytest.mark.parametrize('kind,move', MOVES)
def test_cuda_moves_model_agent_and_batches(kind, move):
    learn, spy = run_on(kind, 'cuda', move)
    check_devices(kind, learn, spy, 'cuda')
    assert learn.recorder.values and np.isfinite(learn.recorder.values[-1][1])


@cuda
@pytest.mark.parametrize('kind', KINDS)
def test_cuda_mixed_precision(kind):
    learn, outs = make(kind).to_fp16(), set()
    learn.dls.cuda()
    before = copy.deepcopy(learn.model.state_dict())
    hook = learn.model.register_forward_hook(lambda m, i, o: outs.add(o.dtype))
    quiet_fit(learn, 2)
    hook.remove()
    assert torch.float16 in outs  # the forward pass ran under autocast
    assert any(not torch.equal(w.cpu(), before[k].cpu()) for k, w in learn.model.state_dict().items())  # it stepped
    assert all(np.isfinite(v[1]) for v in learn.recorder.values) and learn.episode_validation.returns
    if kind in CONTINUOUS:  # the actor's steps, the trainer's own, went through the scaler too
        assert learn.actor_critic_trainer.n_actor > 0 and np.isfinite(learn.actor_critic_trainer.actor_loss)
        actor = learn.model.actor.state_dict()
        assert any(not torch.equal(w.cpu(), before[f'actor.{k}'].cpu()) for k, w in actor.items())
