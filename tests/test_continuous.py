"SAC and TD3: short deterministic runs (bit-for-bit from a seed, finite losses, TD errors written back, exact resume) and a slow learning test."
import copy, json, math
from pathlib import Path
import numpy as np, pytest, torch, gymnasium as gym
from fastai.callback.core import Callback, CancelFitException
from fastai.callback.fp16 import MixedPrecision
from fastai.callback.training import GradientClip
from fastai.callback.hook import summary  # registers `Learner.summary`
from fastcore.foundation import L
from fastrl_replay.agents.sac import sac_learner, evaluate_actor, ActorCriticTrainer, polyak, LeanMLP, NarrowLinear
from fastrl_replay.agents.td3 import td3_learner
from fastrl_replay.checkpoint import CheckpointCallback, read_checkpoint
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.runs import run_train, resume_train
from run_helpers import StopAt

BUILD = dict(sac=sac_learner, td3=td3_learner)
SMALL = dict(replay=dict(warmup_sz=64, bs=32), net=dict(hidden=(32, 32)))


def fit(algo, epochs=2, steps_per_epoch=150, cbs=(), seed=3, env='Pendulum-v1', **kw):
    learn = BUILD[algo](env, steps_per_epoch=steps_per_epoch, seed=seed, **(SMALL | kw))
    with learn.no_bar(), learn.no_logging(): learn.fit(epochs, cbs=list(cbs))
    return learn


def same_run(a, b):
    "Assert two learners ended bit for bit equal: weights (targets, log alpha), optimizer moments, losses, memory rows and TD errors"
    for k, w in a.model.state_dict().items(): assert torch.equal(b.model.state_dict()[k], w), k
    sa, sb = a.opt.state_dict()['state'], b.opt.state_dict()['state']
    assert sa.keys() == sb.keys()
    for k in sa:
        for n in ('exp_avg', 'exp_avg_sq'): assert torch.equal(sa[k][n], sb[k][n]), (k, n)
    assert [float(l) for l in a.recorder.losses] == [float(l) for l in b.recorder.losses]
    assert a.actor_critic_trainer.actor_loss == b.actor_critic_trainer.actor_loss and a.actor_critic_trainer.n_actor == b.actor_critic_trainer.n_actor
    rows = lambda l: [[v if v is None else float(v) for v in row] for row in l.recorder.values]
    assert rows(a) == rows(b)  # the actor_loss column too
    ma, mb = a.experience_replay.memory.memory, b.experience_replay.memory.memory
    for k in ma: assert torch.equal(ma[k], mb[k]), k


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_two_runs_from_a_seed_are_equal_bit_for_bit(algo):
    a, b = fit(algo), fit(algo)
    same_run(a, b)
    assert len(a.recorder.losses) == 300 - 63  # a gradient step per environment step once 64 rows are stored
    assert all(math.isfinite(float(l)) for l in a.recorder.losses)
    assert a.actor_critic_trainer.n_updates == 237
    c = fit(algo, seed=4)
    assert not torch.equal(c.model.critic.q1[0].weight, a.model.critic.q1[0].weight)


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_prioritized_memory_gets_the_td_errors_and_weights(algo):
    learn = fit(algo, epochs=1, replay=dict(kind='per', warmup_sz=64, bs=32))
    mem = learn.experience_replay.memory
    assert type(mem) is PrioritizedExperienceReplay and len(mem) == 150
    td = mem.memory['td_error']
    assert torch.isfinite(td).all() and (td != 0).sum() >= 64  # every row replayed at least once has its TD error
    # the priorities follow the last TD errors: a row's priority is (|td| + eps) ** alpha
    rows = torch.nonzero(td.flatten() != 0).flatten()
    sp = mem.sampler
    assert torch.allclose(sp.get_priority(rows), (td.flatten()[rows].abs().double() + sp.eps) ** sp.alpha, rtol=1e-5)


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_importance_weights_reach_the_loss(algo):
    "A batch whose weights are all zero gives a critic loss of zero, whatever its TD errors"
    learn = fit(algo, epochs=1, steps_per_epoch=80)
    rows, idxs = learn.experience_replay.memory.sample()
    from fastrl_replay.callback import ReplayBatch
    b = ReplayBatch.of(rows, idxs)
    loss = learn.loss_func
    assert float(loss(learn.model(b), b).detach()) > 0
    b['weight'] = torch.zeros(b.bs(), 1)
    assert float(loss(learn.model(b), b).detach()) == 0.


class Replay(Callback):
    "Keep a copy of the networks and the optimizer, the batch and torch's generator before the critics' step of batch `at`, and the networks after it"
    order = -3  # after the replay callback has swapped in the sampled batch, before the trainer
    def __init__(self, at): self.at, self.i = at, 0
    def before_batch(self):
        self.i += 1
        if self.i == self.at:
            self.net, self.optim = copy.deepcopy((self.learn.model, self.learn.opt.opt))
            self.replayed, self.rng = self.learn.yb[0], torch.get_rng_state()
    def after_batch(self):
        if self.i == self.at: self.after = copy.deepcopy(self.learn.model.state_dict())


@pytest.mark.parametrize('algo,at', [('sac', 1), ('td3', 2), ('td3', 3)])
def test_the_actor_steps_after_the_critics(algo, at):
    "One training step taken by hand in the paper's order: the critics' step, then (TD3: on even steps) the actor's against the updated critics, then the targets"
    r = Replay(at)  # counts the trained batches: the replay callback cancels the others before this one sees them
    fit(algo, epochs=1, steps_per_epoch=80, cbs=[r])
    m, opt, b = r.net, r.optim, r.replayed
    before = copy.deepcopy(m.state_dict())
    loss = BUILD[algo]('Pendulum-v1', seed=0, model=m, **SMALL).loss_func
    torch.set_rng_state(r.rng)
    opt.zero_grad(); loss(m(b), b).backward(); opt.step()
    if algo == 'sac' or at % 2 == 0:
        opt.zero_grad(); loss.actor_loss(b).backward(); opt.step()
        for online, target in m.target_pairs(): polyak(online, target, 0.005)
    for k, w in m.state_dict().items(): assert torch.equal(r.after[k], w), k
    moved = [k for k in r.after if k.startswith('actor.') and not torch.equal(r.after[k], before[k])]
    assert bool(moved) == (algo == 'sac' or at % 2 == 0)


@pytest.mark.parametrize('algo,kind', [('sac', 'uniform'), ('sac', 'per'), ('td3', 'uniform')])
def test_a_stopped_run_resumes_exactly(tmp_path, algo, kind):
    replay = dict(kind=kind, warmup_sz=64, bs=32)
    whole = fit(algo, replay=replay, cbs=[CheckpointCallback(tmp_path/'a', every=100)])
    fit(algo, replay=replay, cbs=[CheckpointCallback(tmp_path/'b', every=100), StopAt(230)])
    assert read_checkpoint(tmp_path/'b')['env_steps'] == 200  # mid-epoch: the second epoch's 50th step
    resumed = fit(algo, replay=replay, cbs=[CheckpointCallback(tmp_path/'b', every=100, resume=True)])
    same_run(whole, resumed)
    assert resumed.actor_critic_trainer.n_updates == whole.actor_critic_trainer.n_updates == 237
    ag_w, ag_r = (l.dls.train.dataset.loop.agent.state_dict() for l in (whole, resumed))
    assert ag_w == ag_r


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_a_stopped_mujoco_run_resumes_exactly(tmp_path, algo):
    "Hopper-v5 (MuJoCo physics, 11 observations, 3 actions): stopped mid-epoch and resumed, the run ends bit for bit as the whole one"
    pytest.importorskip('mujoco')
    replay = dict(warmup_sz=64, bs=32)
    whole = fit(algo, env='Hopper-v5', replay=replay, cbs=[CheckpointCallback(tmp_path/'a', every=100)])
    fit(algo, env='Hopper-v5', replay=replay, cbs=[CheckpointCallback(tmp_path/'b', every=100), StopAt(230)])
    assert read_checkpoint(tmp_path/'b')['env_steps'] == 200
    resumed = fit(algo, env='Hopper-v5', replay=replay, cbs=[CheckpointCallback(tmp_path/'b', every=100, resume=True)])
    same_run(whole, resumed)
    assert resumed.actor_critic_trainer.n_updates == whole.actor_critic_trainer.n_updates == 237
    assert whole.experience_replay.memory.memory['state'].shape[1:] == (11,)
    assert whole.dls.train.dataset.loop.agent.state_dict() == resumed.dls.train.dataset.loop.agent.state_dict()


def test_cli_sac_run_checkpoints_and_resumes_to_the_same_model(tmp_path):
    kw = dict(algo='sac', steps=300, seed=2, quiet=True, learner=SMALL)
    ref = run_train(out=str(tmp_path/'straight'), **kw)
    ck = run_train(out=str(tmp_path/'ck'), checkpoint_every=120, **kw)
    assert {k: v for k, v in ref.items() if k not in ('wall_s', 'env_steps_per_s', 'report')} == \
           {k: v for k, v in ck.items() if k not in ('wall_s', 'env_steps_per_s', 'report')}
    m = json.loads((Path(ck['report']).parent/'metrics.json').read_text())
    assert m['algo'] == 'sac' and m['env'] == 'Pendulum-v1' and m['env_steps'] == 300 and len(m['eval_returns']) == 20
    assert math.isfinite(m['critic_loss']) and math.isfinite(m['actor_loss']) and m['critic_loss'] > 0
    run = Path(ck['report']).parent
    assert json.loads((run/'run.json').read_text())['algo'] == 'sac'
    again = resume_train(run, quiet=True)  # finished: nothing left to train, the same evaluation
    assert again['eval_returns'] == ck['eval_returns']


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_the_actor_loss_is_recorded(algo):
    "The recorder's table has the critics' loss (train_loss) and the actor's (actor_loss): the trainer's debiased moving average of the actor's steps"
    steps, actor = [], []
    class Spy(Callback):
        order = -3  # after the trainer has taken the actor's step
        def after_step(self):
            t = self.learn.actor_critic_trainer
            if t.n_actor > len(actor): actor.append(t.actor_loss)
    learn = fit(algo, epochs=1, steps_per_epoch=100, cbs=[Spy()])
    t = learn.actor_critic_trainer
    names = list(learn.recorder.metric_names)
    assert names == ['epoch', 'train_loss', 'valid_loss', 'return', 'episodes', 'actor_loss', 'valid_return', 'time']
    assert t.n_actor == len(actor) == (37 if algo == 'sac' else 18)  # 37 critic steps after a warm-up of 64; TD3's actor at every second
    assert float(learn.recorder.values[-1][names.index('actor_loss') - 1]) == t.actor_loss == actor[-1]  # no epoch
    assert all(math.isfinite(a) for a in actor) and len(set(actor)) == len(actor)

    t.load_state_dict(dict(n_updates=5))  # a state saved before the actor loss was kept
    assert (t.n_updates, t.n_actor, t.actor_loss) == (5, 0, None)


def test_matmul_precision_is_a_setting_of_the_fit():
    "'medium' (bfloat16 products where oneDNN has them for float32 matrices) is asked for, not taken: 'highest' by default; 'medium' is reproducible from a seed and torch's setting comes back after the fit"
    assert torch.get_float32_matmul_precision() == 'highest'
    a, b = (fit('td3', epochs=1, steps_per_epoch=100, net=dict(hidden=(32, 32), matmul_precision='medium')) for _ in range(2))
    same_run(a, b)
    assert torch.get_float32_matmul_precision() == 'highest'
    with pytest.raises(ValueError, match="matmul_precision"): td3_learner(net=dict(matmul_precision='bf16'))


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_nn_linear_layers_run_bit_for_bit_and_resume_exactly(tmp_path, algo):
    "Every linear layer an nn.Linear (NarrowLinear: first ones of few inputs); seeded runs equal, a stopped one resumes"
    net = dict(hidden=(32, 32))
    whole = fit(algo, net=net, cbs=[CheckpointCallback(tmp_path/'a', every=100)])
    linears = [m for m in whole.model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == (16 if algo == 'sac' else 18)
    assert all(type(m) in (torch.nn.Linear, NarrowLinear) for m in linears)
    same_run(whole, fit(algo, net=net))
    fit(algo, net=net, cbs=[CheckpointCallback(tmp_path/'b', every=100), StopAt(230)])
    resumed = fit(algo, net=net, cbs=[CheckpointCallback(tmp_path/'b', every=100, resume=True)])
    same_run(whole, resumed)
    with pytest.raises(TypeError, match=r"unknown ActorCriticSettings \['kernels'\]"): BUILD[algo](net=dict(kernels='torch'))


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_networks_take_second_order_gradients_vmap_and_empty_batches(algo):
    "What torch does with nn.Linear holds for the actor and the critics: second-order gradients, vmap, a batch of 0 rows"
    m = BUILD[algo]('Pendulum-v1', net=dict(hidden=(8, 8)), seed=0).model
    s, a = torch.randn(5, 3), torch.randn(5, 1)
    def penalty_grad(q1):  # the gradient, by the first layer's weights, of a gradient penalty: Q1's squared slope in the action
        x = torch.cat([s, a], 1).to(q1[0].weight.dtype).requires_grad_(True)
        g, = torch.autograd.grad(q1(x).sum(), x, create_graph=True)
        return torch.autograd.grad(g[:, -1:].pow(2).sum(), q1[0].weight)[0]
    got, exact = penalty_grad(m.critic.q1), penalty_grad(copy.deepcopy(m.critic.q1).double())
    assert exact.abs().sum() > 0 and torch.allclose(got.double(), exact, rtol=1e-3, atol=1e-6)
    states = torch.randn(4, 5, 3)
    assert torch.allclose(torch.func.vmap(m.actor)(states), torch.stack([m.actor(x) for x in states]), atol=1e-6)
    assert m.critic(torch.zeros(0, 3), torch.zeros(0, 1)).shape == (0, 2) and m.actor(torch.zeros(0, 3)).shape == (0, 1)


def with_nn_linear(net):
    "A copy of `net` whose `NarrowLinear` layers are plain `nn.Linear`s of the same parameters"
    net = copy.deepcopy(net)
    for seq in net.modules():
        if isinstance(seq, LeanMLP) and isinstance(seq[0], NarrowLinear):
            plain = torch.nn.Linear(seq[0].in_features, seq[0].out_features)
            plain.load_state_dict(seq[0].state_dict())
            seq[0] = plain.requires_grad_(seq[0].weight.requires_grad)
    return net


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_narrow_first_layers_act_as_any_nn_linear(tmp_path, algo):
    "First layers of few inputs are NarrowLinear modules in nn.Linear's layout: hooks, summary, saves, Adam, torch.func"
    learn = fit(algo, epochs=1)
    m, opt = learn.model, learn.opt.opt
    firsts = [l[0] for l in m.modules() if isinstance(l, LeanMLP)]
    assert len(firsts) == (5 if algo == 'sac' else 6)  # SAC has no target actor
    assert all(type(f) is NarrowLinear and f.in_features < LeanMLP.narrow for f in firsts)
    linears = [l for net in (m.actor, m.critic) for l in net.modules() if isinstance(l, torch.nn.Linear)]
    calls = []
    hooks = [l.register_forward_hook(lambda mod, i, o: calls.append(mod)) for l in linears]
    s, a = torch.randn(5, 3), torch.rand(5, 1) * 2 - 1
    (m.actor.explore(s, torch.randn(5, 1)).sum() + m.critic(s, a).sum()).backward()  # SAC's: its spread's layer too
    for h in hooks: h.remove()
    assert len(calls) == len(linears) and {id(c) for c in calls} == {id(l) for l in linears}  # every layer's hook ran
    for f in firsts:  # the weight, its gradient and Adam's moments in nn.Linear's layout
        assert f.weight.is_contiguous()
        if f.weight.requires_grad:
            moments = (opt.state[f.weight][k] for k in ('exp_avg', 'exp_avg_sq'))
            assert f.weight.grad.is_contiguous() and all(t.is_contiguous() for t in moments)
    text = learn.summary()  # the critics' layers, those the model's forward pass runs, each with its parameters
    critic_linears = [l for l in m.critic.modules() if isinstance(l, torch.nn.Linear)]
    assert sum(line.split(' ')[0] in ('Linear', 'NarrowLinear') for line in text.splitlines()) == len(critic_linears)
    assert f'Total params: {sum(p.numel() for p in m.critic.parameters()):,}' in text
    torch.save(m.state_dict(), tmp_path/'m.pth')  # the state of nn.Linear layers, loaded into them and back
    plain = with_nn_linear(BUILD[algo]('Pendulum-v1', seed=9, **SMALL).model)
    plain.load_state_dict(torch.load(tmp_path/'m.pth'))
    fresh = BUILD[algo]('Pendulum-v1', seed=9, **SMALL).model
    fresh.load_state_dict(plain.state_dict())
    for k, w in m.state_dict().items(): assert torch.equal(fresh.state_dict()[k], w), k
    params = dict(m.critic.named_parameters())
    grads = torch.func.grad(lambda p: torch.func.functional_call(m.critic, p, (s, a)).sum())(params)
    m.critic.zero_grad(); m.critic(s, a).sum().backward()
    for k, p in params.items(): assert torch.allclose(grads[k], p.grad, rtol=1e-5, atol=1e-7), k


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_narrow_first_layers_compute_nn_linears_losses_and_gradients_to_rounding(algo):
    "The same losses and gradients as with nn.Linear first layers, to float32 rounding (BLAS sums in another order)"
    learn = fit(algo, epochs=1, steps_per_epoch=100, net=dict(hidden=(400, 300)))
    m, b = learn.model, learn.experience_replay.memory.sample()[0]
    assert isinstance(m.critic.q1[0], NarrowLinear)
    def step_grads(model):
        loss = BUILD[algo]('Pendulum-v1', seed=0, model=model, **SMALL).loss_func
        torch.manual_seed(0); model.zero_grad(); critic_loss = loss(model(b), b); critic_loss.backward()
        torch.manual_seed(1); actor_loss = loss.actor_loss(b); actor_loss.backward()
        return [critic_loss.detach(), actor_loss.detach()] + [p.grad for p in model.parameters() if p.grad is not None]
    narrow, plain = step_grads(m), step_grads(with_nn_linear(m))
    assert len(narrow) == len(plain) > 2
    for n, p in zip(narrow, plain): assert torch.allclose(n, p, rtol=1e-4, atol=1e-6 * p.abs().max())

def test_vector_env_and_ready_memory():
    venv = gym.make_vec('Pendulum-v1', num_envs=3, vectorization_mode='sync',
                        vector_kwargs=dict(autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP))
    mem = ExperienceReplay(bs=16, max_sz=500, warmup_sz=30, seed=0)
    learn = sac_learner(venv, memory=mem, net=dict(hidden=(16,)), steps_per_epoch=90, seed=0)
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    assert len(mem) == 90 and learn.dls.train.dataset.loop.agent.random_steps == 10  # 30 rows of warm-up over 3 environments
    assert mem.memory['action'].shape == (90, 1) and mem.memory['action'].abs().max() <= 2


def test_bad_settings_raise():
    with pytest.raises(TypeError, match=r"unknown TD3Settings \['policy_freq'\]"): td3_learner(td3=dict(policy_freq=2))
    with pytest.raises(TypeError, match=r"unknown ActorCriticSettings"): sac_learner(net=dict(layers=(8,)))
    with pytest.raises(ValueError, match='continuous'): td3_learner('CartPole-v1')
    with pytest.raises(ValueError, match='not both'): sac_learner(memory=ExperienceReplay(), replay=dict(bs=8))


@pytest.mark.slow
def test_sac_learns_pendulum():
    "SAC with the zoo's Pendulum-v1 settings, at 8,000 steps, swings the pendulum up: the greedy return beats -400 (random: about -1,200)"
    learn = sac_learner('Pendulum-v1', steps_per_epoch=1_000, optim=dict(lr=1e-3), seed=0)
    with learn.no_bar(), learn.no_logging(): learn.fit(8)
    assert np.mean(evaluate_actor(learn.model, 'Pendulum-v1', n_episodes=10)) > -400


class CountingScaler(torch.amp.GradScaler):
    "A `GradScaler` that counts its steps, by the optimizer's type"
    def step(self, optimizer, *args, **kwargs):
        self.stepped.append(type(optimizer).__name__)
        return super().step(optimizer, *args, **kwargs)


class CpuMixedPrecision(MixedPrecision):
    "fastai's `MixedPrecision` as on CUDA, on the CPU: an autocast (bfloat16) and an enabled `GradScaler`"
    def before_fit(self):
        self.autocast = torch.autocast('cpu', dtype=torch.bfloat16)
        self.learn.scaler, self.scales = CountingScaler('cpu', init_scale=2. ** 8), L()
        self.learn.scaler.stepped = []


class StepEvents(Callback):
    "The `before_step` events fastai's callbacks get in each batch"
    order = MixedPrecision.order - 1  # before the scaler may cancel a step
    def before_fit(self): self.per_batch = []
    def before_batch(self):
        if self.training: self.per_batch.append(0)
    def before_step(self): self.per_batch[-1] += 1


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_the_actors_step_sends_no_event_and_steps_through_the_scaler(algo):
    "One `before_step` a batch, the critics' (`MixedPrecision` steps once an update); the actor's step is the scaler's own"
    spy, mp = StepEvents(), CpuMixedPrecision()
    steps = []
    class Steps(Callback):  # the scaler's steps, read before the fit ends and `MixedPrecision` drops it
        def after_fit(self): steps.extend(self.learn.scaler.stepped)
    learn = fit(algo, epochs=1, steps_per_epoch=100, cbs=[spy, mp, Steps()])
    t = learn.actor_critic_trainer
    assert steps.count('CpuMixedPrecision') == t.n_updates and steps.count('Adam') == t.n_actor  # critics', actor's
    trained = [n for n in spy.per_batch if n]
    assert set(trained) == {1} and len(trained) == t.n_updates == 37 and t.n_actor == (37 if algo == 'sac' else 18)
    assert np.isfinite(t.actor_loss) and all(math.isfinite(float(l)) for l in learn.recorder.losses)
    plain = fit(algo, epochs=1, steps_per_epoch=100)
    assert [float(l) for l in plain.recorder.losses] != [float(l) for l in learn.recorder.losses]  # bfloat16 products


def test_gradient_clipping_reaches_the_actors_step():
    "The actor's step sends no `before_step`; the trainer clips its gradients as `GradientClip` clips the critics'"
    norms = []
    class Norms(Callback):
        def before_fit(self):
            opt = self.learn.opt.opt
            step = opt.step
            def spied(*args, **kwargs):
                grads = [p.grad.norm() for p in self.model.parameters() if p.grad is not None]
                norms.append(float(torch.stack(grads).norm()))
                return step(*args, **kwargs)
            opt.step = spied
    learn = fit('sac', epochs=1, steps_per_epoch=100, cbs=[GradientClip(0.05), Norms()])
    t = learn.actor_critic_trainer
    assert len(norms) == t.n_updates + t.n_actor == 74 and max(norms) <= 0.05 * 1.0001


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_lr_find_leaves_the_trainers_counts_as_they_were(algo):
    learn = fit(algo, epochs=1, steps_per_epoch=100)
    t = learn.actor_critic_trainer
    before = t.state_dict()
    with learn.no_bar(): learn.lr_find(num_it=10, show_plot=False)
    assert t.state_dict() == before and t.actor_loss is not None


@pytest.mark.parametrize('algo', ['sac', 'td3'])
def test_a_device_this_machine_lacks_is_refused_at_build(algo):
    from fastrl_replay.errors import ExperienceReplayException
    absent = f'cuda:{torch.cuda.device_count()}'  # one past the last CUDA device: none on any machine
    with pytest.raises(ExperienceReplayException, match=f"device '{absent}' is not available: this machine has"):
        BUILD[algo](steps_per_epoch=100, device=absent)
