"""Data-efficient Rainbow: the C51 projection and noisy layers against plain references, the preset against DER.gin,
exact runs and resumes, the games' protocol, the CLI."""
import json, math
from pathlib import Path
import numpy as np, pytest, torch
from fastai.callback.core import Callback, CancelFitException
from fastrl_replay.agents.der import (categorical_projection, NoisyLinear, RainbowNet, ExpectedQ, C51Loss, DER_SETTINGS,
                                      der_settings, der_learner, der_env, evaluate_der, game_returns)
from fastrl_replay.checkpoint import CheckpointCallback, read_checkpoint
from fastrl_replay.cli import main
from run_helpers import same

# Dopamine's labs/atari_100k/configs/DER.gin, with the library's names
DER_GIN = dict(gamma=0.99, n_steps=10, warmup=1_600, train_every=1, bs=32, target_sync=2_000, eps_end=0.01,
               eps_steps=2_000, eps_eval=0.001, lr=1e-4, adam_eps=1.5e-4, noisy=True, sigma0=0.5, dueling=True,
               double=True, n_atoms=51, vmin=-10., vmax=10., replay='per', alpha=0.5, beta=0.5, max_sz=100_000,
               compress=True)
TINY = dict(warmup=60, max_sz=500, target_sync=40)  # a run that trains within a few hundred steps


def c51_reference(p, r, disc, z):
    "Algorithm 1 of Bellemare et al. (2017), atom by atom, with the mass of an atom landing exactly on one kept whole"
    n, vmin, vmax = len(z), z[0], z[-1]
    dz, m = (vmax - vmin) / (n - 1), [0.] * n
    for j in range(n):
        tz = min(max(r + disc * z[j], vmin), vmax)
        b = (tz - vmin) / dz
        l, u = math.floor(b), math.ceil(b)
        if l == u: m[l] += p[j]
        else: m[l] += p[j] * (u - b); m[u] += p[j] * (b - l)
    return m


def test_categorical_projection_matches_the_c51_reference():
    g = torch.Generator().manual_seed(0)
    for z in (torch.linspace(-10, 10, 51, dtype=torch.float64), torch.linspace(-2, 2, 5, dtype=torch.float64)):
        p = torch.softmax(torch.randn(8, len(z), generator=g, dtype=torch.float64), -1)
        r = torch.tensor([0., 0.37, -1.3, 25., -40., 1., 9.9, -0.4], dtype=torch.float64)  # past vmax and vmin too
        disc = torch.tensor([0.99 ** 10, 0.9, 0., 0.5, 1., 0., 0.99, 1.], dtype=torch.float64)  # 0: terminated
        got = categorical_projection(p, r, disc, z)
        want = torch.tensor([c51_reference(p[i].tolist(), float(r[i]), float(disc[i]), z.tolist()) for i in range(8)],
                            dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        torch.testing.assert_close(got.sum(-1), torch.ones(8, dtype=torch.float64), rtol=0, atol=1e-12)


def test_an_atom_landing_exactly_on_the_support_keeps_all_its_mass():
    z = torch.linspace(-2, 2, 5)  # spacing 1: every b below is a whole number, l == u
    p = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15]])
    got = categorical_projection(p, torch.tensor([1.]), torch.tensor([1.]), z)  # z + 1, the top two clipped to 2
    torch.testing.assert_close(got, torch.tensor([[0., 0.1, 0.2, 0.3, 0.4]]))
    terminal = categorical_projection(p, torch.tensor([-1.]), torch.tensor([0.]), z)
    torch.testing.assert_close(terminal, torch.tensor([[0., 1., 0., 0., 0.]]))


def f(x): return x.sign() * x.abs().sqrt()

def test_noisy_linear_matches_the_factorized_reference():
    torch.manual_seed(3)
    lin, x = NoisyLinear(7, 4, sigma0=0.5), torch.randn(5, 7)
    bound = 1 / math.sqrt(7)
    assert lin.weight_mu.abs().max() <= bound and lin.bias_mu.abs().max() <= bound
    assert lin.weight_mu.std() > bound / 4  # uniform over the range, not a constant
    assert torch.all(lin.weight_sigma == 0.5 * bound) and torch.all(lin.bias_sigma == 0.5 * bound)
    torch.manual_seed(11)
    y = lin(x)
    torch.manual_seed(11)
    e_in, e_out = f(torch.randn(7)), f(torch.randn(4))  # the layer draws the inputs' noise first
    w = lin.weight_mu + lin.weight_sigma * torch.outer(e_out, e_in)
    b = lin.bias_mu + lin.bias_sigma * e_out
    torch.testing.assert_close(y, x @ w.T + b)
    assert not torch.equal(lin(x), y)  # fresh noise at the next forward
    torch.manual_seed(11)
    assert torch.equal(lin(x), y)  # the same generator state, the same noise
    lin.eval()
    torch.testing.assert_close(lin(x), x @ lin.weight_mu.T + lin.bias_mu)
    assert torch.equal(lin(x), lin(x))  # no noise in eval mode


def test_rainbow_net_parts_switch_off():
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    for noisy in (True, False):
        for dueling in (True, False):
            net = RainbowNet(5, n_atoms=11, vmin=-2., vmax=3., noisy=noisy, dueling=dueling)
            assert any(isinstance(m, NoisyLinear) for m in net.modules()) == noisy
            assert (net.value is not None) == dueling
            logp = net(x)
            assert logp.shape == (3, 5, 11)
            torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3, 5))
            net.eval()
            torch.testing.assert_close(ExpectedQ(net)(x), (net(x).exp() * torch.linspace(-2, 3, 11)).sum(-1))


def test_the_preset_is_der_gin():
    assert DER_SETTINGS == DER_GIN


@pytest.mark.parametrize('bad, msg', [(dict(n_atom=51), 'unknown DERSettings'), (dict(n_atoms=1), 'n_atoms must be'),
                                      (dict(vmin=1., vmax=1.), 'vmin < vmax'), (dict(vmin=2., vmax=-2.), 'vmin < vmax'),
                                      (dict(gamma=1.5), 'gamma must be'), (dict(replay='laber'), 'replay must be'),
                                      (dict(max_sz=100, warmup=200), 'at least warmup'), (dict(bs=0), 'bs must be'),
                                      (dict(n_steps=2.5), 'n_steps must be'), (dict(lr=-1.), 'lr must be')])
def test_bad_settings_are_refused(bad, msg):
    with pytest.raises((TypeError, ValueError), match=msg): der_settings(bad)
    with pytest.raises((TypeError, ValueError), match=msg): der_learner(**bad)


def test_c51_loss_reports_each_rows_loss_and_weighs_them():
    torch.manual_seed(0)
    net = RainbowNet(3, noisy=False).eval()
    loss = C51Loss(net); loss.make_target()
    b = dict(state=torch.randint(0, 256, (4, 4, 84, 84), dtype=torch.uint8), action=torch.tensor([[0], [1], [2], [0]]),
             reward=torch.tensor([[0.], [1.], [-1.], [30.]]), discount=torch.full((4, 1), 0.99 ** 10),
             terminated=torch.tensor([[False], [False], [True], [False]]),
             weight=torch.tensor([[1.], [.5], [.25], [1.]]))
    b['next_state'] = b['state'].flip(0)
    pred = net(b['state'])
    rows = loss.row_losses(pred, b)
    target = loss.target_distribution(b)
    want = torch.stack([-(target[i] * pred[i, int(b['action'][i])]).sum() for i in range(4)])
    torch.testing.assert_close(rows, want)
    torch.testing.assert_close(loss(pred, b), (rows * b['weight'].view(-1)).mean())
    q_next = ExpectedQ(net)(b['next_state'])  # double DQN: the online network's pick, the target's distribution
    p = loss.target(b['next_state']).exp()[torch.arange(4), q_next.argmax(1)]
    alive = torch.tensor([[1.], [1.], [0.], [1.]])
    torch.testing.assert_close(target, categorical_projection(p, b['reward'], b['discount'] * alive, net.support))


class _Threads(Callback):
    def before_batch(self): self.n = torch.get_num_threads()

def test_the_prioritized_memory_learns_sqrt_of_the_loss_on_the_callers_threads():
    learn, seen = der_learner(steps_per_epoch=90, seed=0, **TINY), _Threads()
    torch.set_num_threads(2)
    try:
        with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-4, cbs=seen)
    finally: torch.set_num_threads(1)
    assert seen.n == 2  # the caller's setting, not one thread
    adam = learn.opt.opt.param_groups[0]
    assert (adam['lr'], adam['eps'], adam['betas'], adam['weight_decay']) == (1e-4, 1.5e-4, (0.9, 0.999), 0.)
    mem = learn.experience_replay.memory
    assert (mem.sampler.alpha, mem.sampler.current_beta, mem.sampler.weight_norm) == (0.5, 0.5, 'batch')
    b, idx = mem.sample()
    td = torch.tensor([0.25, 4., 1e-4] + [1.] * 29)
    mem.update_td(td, idx)
    torch.testing.assert_close(mem.sampler.get_priority(idx[:3]).double().flatten(), (td[:3].double() + 1e-10).sqrt(),
                               rtol=1e-6, atol=0)


def test_training_games_end_on_a_life_lost_with_clipped_rewards_and_raw_full_game_returns():
    train, full = der_env('ALE/Breakout-v5', train=True), der_env('ALE/Breakout-v5', train=False)
    rng = np.random.default_rng(0)
    train.reset(seed=1); full.reset(seed=1)
    terminals, clipped, raw = 0, 0., 0.
    while not full.returns:  # the same actions in both: the same game
        a = int(rng.integers(4))
        _, r, term, trunc, _ = train.step(a)
        _, r_raw, term_raw, _, _ = full.step(a)
        assert -1 <= r <= 1 and r == np.clip(r_raw, -1, 1)
        clipped, raw = clipped + r, raw + r_raw
        if term and not term_raw:
            terminals += 1
            train.reset()  # a life lost: the game plays on
    assert terminals == 4 and term  # five lives, four lost before the game ends
    assert train.returns == full.returns == [raw]  # raw, whole-game returns
    assert train.ends == full.ends == [train.steps]


def _fit(learn, *cbs):
    with learn.no_bar(), learn.no_logging(): learn.fit(3, 1e-4, cbs=list(cbs))
    return learn

class _StopAfterSave(Callback):
    order = 71  # after the checkpoint's save
    def __init__(self, ck): self.ck = ck
    def after_batch(self):
        if self.ck.last is not None: raise CancelFitException()

def test_runs_are_exact_and_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    make = lambda: der_learner(steps_per_epoch=60, seed=0, **TINY)  # 180 steps, 120 updates
    a = _fit(make(), CheckpointCallback(tmp_path/'a'))  # saved at the end only
    again = _fit(make())
    same(a.model.state_dict(), again.model.state_dict())
    same(a.experience_replay.memory.state_dict(), again.experience_replay.memory.state_dict())
    ck = CheckpointCallback(tmp_path/'b', every=100)
    _fit(make(), ck, _StopAfterSave(ck))
    stopped = read_checkpoint(tmp_path/'b')
    assert 100 <= stopped['env_steps'] < 180 and stopped['position']['batch'] > 0  # part-way through an epoch
    b = _fit(make(), CheckpointCallback(tmp_path/'b', resume=True))
    ka, kb = read_checkpoint(tmp_path/'a'), read_checkpoint(tmp_path/'b')
    for k in ('model', 'opt', 'callbacks', 'data', 'recorder', 'position', 'env_steps'): same(ka[k], kb[k], k)
    for k in ('torch', 'numpy'): same(ka['rng'][k], kb['rng'][k], k)  # Python's generator: each fastai DataLoader made
    # in this process draws its seed from it, so it differs with the learners made before; no training draw uses it
    same(a.experience_replay.memory.state_dict(), b.experience_replay.memory.state_dict())
    assert a.der.n_steps == 10 and len(a.recorder.losses) == 180 - 59  # an update from the step that fills the warm-up


def test_the_evaluation_plays_without_noise_and_keeps_the_models_mode():
    torch.manual_seed(0)
    net = RainbowNet(6).train()
    r1 = evaluate_der(net, 'ALE/Pong-v5', n_episodes=1, seed=5, max_steps=150)
    r2 = evaluate_der(net, 'ALE/Pong-v5', n_episodes=1, seed=5, max_steps=150)
    assert net.training and r1 == r2  # seeded draws, no noise: the same game


def test_cli_trains_der_and_writes_its_metrics(tmp_path, capsys):
    main(['train', '--algo', 'der', '--steps', '120', '--seed', '1', '--eval-episodes', '1',
          '--checkpoint-every', '50', '--out', str(tmp_path), '--quiet'])
    run, = [p.parent for p in tmp_path.rglob('metrics.json')]  # <out>/der-ALE/Pong-v5-seed1-<time>
    m = json.loads((run/'metrics.json').read_text())
    for k in ('eval_returns', 'eval_episodes', 'train_returns', 'memory_bytes_per_transition', 'wall_s', 'memory_s'):
        assert k in m, k
    assert m['algo'] == 'der' and m['replay'] == 'per' and m['eval_episodes'] == len(m['eval_returns']) == 1
    assert m['env_steps'] == 120 and m['memory_rows'] == 120 and 0 < m['memory_s'] < m['wall_s']
    assert m['train_returns'] == [] and m['eval_returns'][0] <= -15  # an untrained agent loses its game of Pong
    assert json.loads((run/'run.json').read_text())['algo'] == 'der'
    main(['train', '--resume', str(run), '--quiet'])  # the run had ended: its report again, from the checkpoint
    again = json.loads((run/'metrics.json').read_text())
    assert again['eval_returns'] == m['eval_returns'] and again['memory_s'] == m['memory_s']


def test_validation_episodes_play_the_evaluation_game():
    learn = der_learner(steps_per_epoch=80, seed=0, valid=dict(n_episodes=1), **TINY)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-4)
    names = [n for n in learn.recorder.metric_names[1:-1]]
    assert learn.recorder.values[0][names.index('valid_return')] == -21.  # a full game of Pong, stacks of 84x84 frames
