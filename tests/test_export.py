"fastai's own saving on a DQN learner: `learn.export` and `load_learner` give an acting policy; `learn.save` and `learn.load` keep the weights."
import pickletools, zipfile
from pathlib import Path
import gymnasium as gym, numpy as np, pytest, torch
from fastai.learner import load_learner
from fastrl_replay.agents.dqn import dqn_learner, evaluate


def trained(path=None):
    "A DQN fitted one epoch as a new user would, progress bar and table included"
    learn = dqn_learner(steps_per_epoch=400, replay=dict(warmup_sz=200, max_sz=5000), net=dict(hidden=(64,)), seed=0)
    if path is not None: learn.path = Path(path)
    learn.fit(1)
    return learn


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    learn = trained()
    fname = tmp_path_factory.mktemp('export')/'policy.pkl'
    learn.export(fname)
    return learn, fname


def observations(n=8): return torch.as_tensor(np.stack([gym.make('CartPole-v1').reset(seed=s)[0] for s in range(n)]))


def pickled_names(fname):
    "The module and class names the pickle inside torch's zip file refers to"
    with zipfile.ZipFile(fname) as z: pkl = z.read(next(n for n in z.namelist() if n.endswith('/data.pkl')))
    return {arg for op, arg, _ in pickletools.genops(pkl) if op.name == 'GLOBAL'}


def test_load_learner_acts_as_the_trained_model(exported):
    learn, fname = exported
    with pytest.warns(UserWarning, match='Only load files you trust'): policy = load_learner(fname)
    obs = observations()
    with torch.no_grad(): assert torch.equal(policy.model(obs).argmax(1), learn.model(obs).argmax(1))
    assert all(torch.equal(w, learn.model.state_dict()[k]) for k, w in policy.model.state_dict().items())
    assert evaluate(policy.model, n_episodes=3) == evaluate(learn.model, n_episodes=3)


def test_the_export_holds_the_policy_not_the_memory_nor_the_environments(exported):
    learn, fname = exported
    names = {n for n in pickled_names(fname) if n.startswith(('fastrl_replay', 'gymnasium'))}
    assert names == {'fastrl_replay.agents.dqn QNet', 'fastrl_replay.agents.dqn DQNLoss', 'fastrl_replay.learner LeanLearner', 'fastrl_replay.learner LeanRecorder',
                     'fastrl_replay.data.gym Source', 'fastrl_replay.data.gym GymLoop', 'fastrl_replay.data.gym FirstLast',
                     'fastrl_replay.data.gym TransitionLoader', 'gymnasium.vector.vector_env AutoresetMode'}
    mem = learn.experience_replay.memory
    memory_bytes = sum(c.numel() * c.element_size() for c in mem.memory.values())
    assert memory_bytes > 15_000 and fname.stat().st_size < 40_000  # 400 rows would show; the model is 1.8 KB
    policy = torch.load(fname, weights_only=False)
    assert [type(cb).__name__ for cb in policy.cbs] == ['TrainEvalCallback', 'LeanRecorder']
    assert (policy.opt, type(policy.loss_func).__name__, list(policy.metrics)) == (None, 'DQNLoss', [])
    assert policy.loss_func.model is policy.model  # the loss acts on the exported model, with its own target network
    loop = policy.dls.train.dataset.loop
    assert (loop.env, loop.agent, loop.env_name, loop.n_steps, loop.obs_dtype, loop.env_steps) == (None, None, 'CartPole-v1', 3, np.float32, 0)
    assert policy.dls.train.dataset.first_last.gamma == 0.99 and policy.dls.train.n == 400
    with pytest.raises(RuntimeError, match='^this GymLoop has no environment: it holds the settings of an exported Learner; make a GymLoop to step$'):
        loop.step()


def test_the_learner_trains_on_after_its_export(exported):
    learn, _ = exported
    mem = learn.experience_replay.memory
    assert (len(mem), type(learn.loss_func).__name__, [m.name for m in learn.metrics]) == (400, 'DQNLoss', ['return', 'episodes', 'epsilon'])
    assert learn.experience_replay.fresh is not None and hasattr(learn, 'progress') and learn.loss_func.target is not None
    updates = learn.dqn_trainer.n_updates
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    assert len(mem) == 800 and learn.dqn_trainer.n_updates == updates + 100


def test_save_and_load_keep_the_weights_and_the_optimizer(tmp_path):
    learn = trained(tmp_path)
    file = learn.save('weights')
    assert file == tmp_path/'models'/'weights.pth'
    other = dqn_learner(steps_per_epoch=400, replay=dict(warmup_sz=200, max_sz=5000), net=dict(hidden=(64,)), seed=1)
    other.path = tmp_path
    assert not torch.equal(other.model.net[0].weight, learn.model.net[0].weight)
    other.load('weights')
    for k, w in learn.model.state_dict().items(): assert torch.equal(other.model.state_dict()[k], w)
    a, b = learn.opt.state_dict(), other.opt.state_dict()
    assert a['param_groups'] == b['param_groups']
    for i, s in a['state'].items():
        for k, v in s.items(): assert torch.equal(b['state'][i][k], v)
    with other.no_bar(), other.no_logging(): other.fit(1)  # and it trains on
    assert len(other.recorder.losses) == 100 - 49  # the first 49 batches fill the warm-up
