"""The recurrent DQN: stored states match the acting network's, runs are bit for bit from a seed and resume exactly,
and (slow) it learns CartPole without velocities."""
import copy
import numpy as np, pytest, torch
from fastai.callback.core import Callback, CancelFitException
from fastrl_replay.agents.r2d2 import r2d2_learner, play_recurrent, RecurrentQNet, R2D2Loss, sequence_inputs
from fastrl_replay.checkpoint import CheckpointCallback, read_checkpoint
from fastrl_replay.core import BD
from fastrl_replay.envs.pomdp import POMDP_CARTPOLE
from fastrl_replay.memory.persist import load_memory
from fastrl_replay.memory.sequence import sequence_returns


def small(env='CartPole-v1', **kwargs):
    "A small recurrent DQN: 200 steps an epoch, a warm-up of 100 steps, slices of 6 after 3 of burn-in"
    return r2d2_learner(env, **dict(dict(steps_per_epoch=200, seed=0, replay=dict(warmup_sz=100, max_sz=300, bs=8),
                                         seq=dict(seq_len=6, burn_in=3, stride=3, hidden=8, target_sync=20)), **kwargs))


def fit(learn, *cbs, epochs=2):
    with learn.no_bar(), learn.no_logging(): learn.fit(epochs, 1e-3, cbs=list(cbs))
    return learn


def same_state(a:dict, b:dict, path='state'):
    assert a.keys() == b.keys(), path
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict): same_state(x, y, f'{path}.{k}')
        elif isinstance(x, (torch.Tensor, np.ndarray)):
            assert np.array_equal(np.asarray(x), np.asarray(y)), f'{path}.{k}'
        else: assert x == y, f'{path}.{k}'


def test_stored_states_are_the_acting_networks():
    "Each row's (h, c) is the network's state before the step: unrolled again from the episode's start, the same"
    learn = small()
    net = copy.deepcopy(learn.model)  # the network that acts during the warm-up, before any training step
    fit(learn, epochs=1)
    m = learn.experience_replay.memory.memory
    ends = [e for e in torch.nonzero(m['done'][:, 0])[:, 0].tolist() if e < 100]  # episodes of the warm-up's 100 steps
    assert len(ends) >= 3
    first = 0
    for end in ends:
        state = net.initial_state(1)
        for t in range(first, end + 1):
            assert torch.equal(m['h'][t], state[0][0]) and torch.equal(m['c'][t], state[1][0]), t
            with torch.no_grad(): _, state = net.step(m['state'][t:t+1], state)
        first = end + 1
    assert learn.experience_replay.memory.sampler.ep_step[first] == 0


def test_runs_are_bit_for_bit_from_a_seed():
    a, b = fit(small()), fit(small())
    for k, w in a.model.state_dict().items(): assert torch.equal(b.model.state_dict()[k], w), k
    same_state(a.experience_replay.memory.state_dict(), b.experience_replay.memory.state_dict())
    assert [float(l) for l in a.recorder.losses] == [float(l) for l in b.recorder.losses]
    c = fit(small(seed=1))
    assert not torch.equal(c.model.encoder.weight, a.model.encoder.weight)


class StopAfterCheckpoint(Callback):
    "End the fit right after the first checkpoint"
    order = 71
    def after_batch(self):
        if self.checkpoint.last is not None: raise CancelFitException()
    after_epoch = after_batch


@pytest.mark.parametrize('kind', ['per', 'uniform'])
def test_a_stopped_run_resumes_exactly(tmp_path, kind):
    "Stopped after a checkpoint mid-epoch and resumed, a run ends as one never stopped: network, memory, agent's state"
    make = lambda: small(replay=dict(kind=kind, warmup_sz=100, max_sz=300, bs=8))
    ref = fit(make(), epochs=3)
    fit(make(), CheckpointCallback(tmp_path/'ck', every=250), StopAfterCheckpoint(), epochs=3)
    assert read_checkpoint(tmp_path/'ck')['position']['batch'] > 0  # stopped inside an epoch
    learn = fit(make(), CheckpointCallback(tmp_path/'ck', every=250, resume=True), epochs=3)
    for k, w in ref.model.state_dict().items(): assert torch.equal(learn.model.state_dict()[k], w), k
    same_state(learn.experience_replay.memory.state_dict(), ref.experience_replay.memory.state_dict())
    a1, a2 = ref.dls.train.dataset.loop.agent, learn.dls.train.dataset.loop.agent
    assert all(torch.equal(x, y) for x, y in zip(a1.state, a2.state)) and a1.steps == a2.steps
    assert [float(l) for l in learn.recorder.losses] == [float(l) for l in ref.recorder.losses]


def test_the_loss_learns_only_stored_learning_steps():
    "Burn-in and padded steps give no TD error and no gradient; the TD errors are Q minus sequence_returns' targets"
    torch.manual_seed(0)
    net = RecurrentQNet(2, 2, hidden=4, burn_in=1)
    loss = R2D2Loss(net, burn_in=1, gamma=0.9, n_steps=2)
    loss.make_target()
    mask = torch.tensor([[True, True, True, False], [False, True, True, True]])
    f = lambda *s: torch.zeros(*s, dtype=torch.bool)
    b = BD(state=torch.randn(2, 4, 2), next_state=torch.randn(2, 4, 2), action=torch.randint(2, (2, 4, 1)),
           reward=torch.randn(2, 4, 1), terminated=f(2, 4, 1), done=f(2, 4, 1), mask=mask, h=torch.randn(2, 4),
           c=torch.randn(2, 4))
    pred = net(b)
    td = loss.td_errors(pred, b)
    q_next = loss.target(b)
    boot = q_next.gather(2, pred.detach().argmax(2, keepdim=True))[..., 0]
    targets = sequence_returns(b['reward'][..., 0], f(2, 4), f(2, 4), mask, boot, 0.9, 2)
    want = pred[:, :4].gather(2, b['action'])[..., 0] - targets
    torch.testing.assert_close(td, want)
    l = loss(pred, b)
    l.backward()
    learn = mask.clone(); learn[:, :1] = False
    per = torch.nn.functional.smooth_l1_loss(td * learn, torch.zeros_like(td), reduction='none')
    torch.testing.assert_close(l, per.sum() / learn.sum())


def test_inputs_end_with_the_next_state_of_the_last_stored_step():
    b = BD(state=torch.arange(8.).reshape(2, 4, 1), next_state=100 + torch.arange(8.).reshape(2, 4, 1),
           mask=torch.tensor([[True, True, False, False], [True, True, True, True]]))
    x = sequence_inputs(b)[..., 0]
    assert x.tolist() == [[0., 1., 101., 3., 0.], [4., 5., 6., 7., 107.]]  # after that: the (padded) states as they are


@pytest.mark.slow
def test_it_learns_cartpole_without_velocities():
    "Seed 0 reaches a greedy return of 475 or more on CartPoleNoVelocity-v1 within 100,000 steps (bench/stored/14)"
    learn = r2d2_learner(POMDP_CARTPOLE, steps_per_epoch=10_000, seed=0)
    best = 0.
    for _ in range(10):
        with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
        best = max(best, float(np.mean(play_recurrent(learn.model, POMDP_CARTPOLE, n_episodes=10))))
        if best >= 475: break
    assert best >= 475


def test_the_cli_trains_r2d2(tmp_path, capsys):
    "`fastrl-replay train --algo r2d2` runs `train_r2d2`: a report folder with the metrics; the greedy return printed"
    from fastrl_replay.cli import main
    main(['train', '--algo', 'r2d2', '--steps', '200', '--seed', '1', '--quiet', '--out', str(tmp_path)])
    out = capsys.readouterr().out
    assert 'CartPoleNoVelocity-v1, seed 1: 200 environment steps' in out and 'greedy return over 20 episodes' in out
    run, = tmp_path.iterdir()
    assert {p.name for p in run.iterdir()} == {'metrics.json', 'model.pth', 'report.html'}
    with pytest.raises(SystemExit): main(['train', '--algo', 'r2d2', '--checkpoint-every', '100'])
