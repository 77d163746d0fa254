"Exact resume: a run killed right after a checkpoint and resumed ends as the run that was never interrupted; bad checkpoints are refused."
import json, os, re, shutil, signal, subprocess, sys, zlib
from pathlib import Path
import numpy as np, pytest, torch
import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv
from fastai.callback.core import Callback, CancelFitException
from fastrl_replay.agents.dqn import dqn_learner
from fastrl_replay.checkpoint import CheckpointCallback, CheckpointError, read_checkpoint, write_checkpoint
from fastrl_replay.memory.persist import load_memory
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.callback import ExperienceReplayCallback
from fastrl_replay.cli import main
from run_helpers import same

EXE = Path(sys.executable).parent/'fastrl-replay'
ENV = dict(os.environ, OMP_NUM_THREADS='1')
KILL_AFTER_SAVE = '''
import os, signal, sys
from fastrl_replay import checkpoint
from fastrl_replay.cli import main
save = checkpoint.CheckpointCallback.save
def save_then_die(self):
    save(self)
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no flush: as a crash or an out-of-memory kill
checkpoint.CheckpointCallback.save = save_then_die
main(sys.argv[1:])
'''


def cli(*args, kill_after_save=False):
    cmd = [sys.executable, '-c', KILL_AFTER_SAVE] if kill_after_save else [str(EXE)]
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, timeout=300, env=ENV)


WALL = ('wall_s', 'env_steps_per_s')

def report_without_wall_time(run:Path) -> str:
    "The report, with the wall-clock rows and plotly's random figure ids taken out"
    page = (run/'report.html').read_text()
    page = re.sub(r'<tr><th>(wall_s|env_steps_per_s|training time|speed)</th><td>[^<]*</td></tr>', '', page)
    page = re.sub(r'\d{4}-\d{2}-\d{2} \d{2}:\d{2}', 'DATE', page)  # when the report was made
    return re.sub(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', 'ID', page)


@pytest.mark.parametrize('replay', ['uniform', 'per'])
def test_a_run_killed_after_a_checkpoint_resumes_exactly(tmp_path, replay):
    args = ('train', '--steps', 2000, '--replay-size', 1500, '--seed', 1, '--replay', replay, '--checkpoint-every', 1300, '--quiet')
    r = cli(*args, '--out', tmp_path/'straight')
    assert r.returncode == 0, r.stderr
    r = cli(*args, '--out', tmp_path/'killed', kill_after_save=True)
    assert r.returncode == -signal.SIGKILL, r.stderr
    (run,) = (tmp_path/'killed').iterdir()
    assert sorted(p.name for p in run.iterdir()) == ['checkpoint', 'run.json']  # nothing else written before the kill
    stopped = read_checkpoint(run/'checkpoint')
    assert (stopped['position']['epoch'], stopped['position']['batch'], stopped['env_steps']) == (6, 25, 1302)  # mid-epoch
    r = cli('train', '--resume', run, '--quiet')
    assert r.returncode == 0, r.stderr
    (ref,) = (tmp_path/'straight').iterdir()
    assert sorted(p.name for p in run.iterdir()) == sorted(p.name for p in ref.iterdir())
    for k, w in torch.load(ref/'model.pth').items(): assert torch.equal(torch.load(run/'model.pth')[k], w), k
    m_ref, m_run = (json.loads((d/'metrics.json').read_text()) for d in (ref, run))
    assert {k: v for k, v in m_run.items() if k not in WALL} == {k: v for k, v in m_ref.items() if k not in WALL}
    assert m_run['memory_rows'] == 1500
    assert report_without_wall_time(run) == report_without_wall_time(ref)
    # the final checkpoints: the same run state (weights, optimizer, target network, recorder, environments, generators)
    a, b = read_checkpoint(ref/'checkpoint'), read_checkpoint(run/'checkpoint')
    assert a['position'] == b['position'] == dict(epoch=10, batch=0, n_epoch=10, n_iter=50, train_iter=500, pct_train=a['position']['pct_train'])
    # NumPy's and Python's global generators start from the system's entropy in each process, and nothing in a run draws
    # from them: the resumed run ends with those it restored
    for g in ('numpy', 'python'): same(b['rng'].pop(g), stopped['rng'][g]); a['rng'].pop(g)
    same({k: v for k, v in a.items() if k not in ('elapsed', 'memories')}, {k: v for k, v in b.items() if k not in ('elapsed', 'memories')})
    # and the same replay memory: rows, TD errors, priorities, counters and the sampler's generator
    same(load_memory(a['memories']['experience_replay']).state_dict(), load_memory(b['memories']['experience_replay']).state_dict())


def small_dqn(warmup_sz=100, hidden=(16,), memory=None, **kwargs):
    replay = None if memory is not None else dict(warmup_sz=warmup_sz, max_sz=500)
    return dqn_learner(**dict(dict(steps_per_epoch=200, seed=0), memory=memory, replay=replay, net=dict(hidden=hidden), **kwargs))


def fit(learn, *cbs, epochs=3):
    with learn.no_bar(), learn.no_logging(): learn.fit_flat_cos(epochs, 1e-3, cbs=list(cbs))
    return learn


class StopAfterCheckpoint(Callback):
    "End the fit right after the first checkpoint"
    order = 71
    def after_batch(self):
        if self.checkpoint.last is not None: raise CancelFitException()
    after_epoch = after_batch


@pytest.mark.parametrize('every,stopped', [(250, (1, 12)), (402, (2, 0))])
def test_two_environments_resume_exactly_mid_epoch_and_at_an_epoch_end(tmp_path, every, stopped):
    ref = fit(small_dqn(n_envs=2))  # without any checkpoint: writing them changes nothing
    fit(small_dqn(n_envs=2), CheckpointCallback(tmp_path/'ck', every=every), StopAfterCheckpoint())
    pos = read_checkpoint(tmp_path/'ck')['position']
    assert (pos['epoch'], pos['batch']) == stopped  # the 402nd step comes in the second epoch's last batch: saved as the epoch ends
    learn = fit(small_dqn(n_envs=2), CheckpointCallback(tmp_path/'ck', every=every, resume=True))
    for k, w in ref.model.state_dict().items(): assert torch.equal(learn.model.state_dict()[k], w), k
    l1, l2 = ref.dls.train.dataset.loop, learn.dls.train.dataset.loop
    assert (l2.env_steps, l2.returns, l2.agent.steps) == (l1.env_steps, l1.returns, l1.agent.steps)
    r1, r2 = ref.recorder, learn.recorder
    assert (r2.lrs, r2.iters, r2.hps, [float(l) for l in r2.losses]) == (r1.lrs, r1.iters, r1.hps, [float(l) for l in r1.losses])
    assert [list(v) for v in r2.values] == [list(v) for v in r1.values]
    assert (learn.train_iter, learn.pct_train, learn.dqn_trainer.n_updates) == (ref.train_iter, ref.pct_train, ref.dqn_trainer.n_updates)


class OutsideCartPole(CartPoleEnv):
    "CartPole from outside gymnasium's classic-control package, so its state is not saved"


@pytest.fixture
def outside_env():
    "The id of `OutsideCartPole`, registered for the test only (other tests read the registry)"
    gym.register('OutsideCartPole-v0', entry_point=OutsideCartPole, max_episode_steps=500)
    yield 'OutsideCartPole-v0'
    del gym.registry['OutsideCartPole-v0']


def test_an_environment_that_cannot_be_saved_starts_new_episodes(tmp_path, outside_env):
    "On resume, the episodes start again, from the environment's restored generator: the same ones every time"
    fl = dict(env=outside_env, steps_per_epoch=100, warmup_sz=50)
    fit(small_dqn(**fl), CheckpointCallback(tmp_path/'ck', every=150), StopAfterCheckpoint())
    saved = read_checkpoint(tmp_path/'ck')
    assert sorted(saved['data']['loop']['env']) == ['rngs']  # the generator only
    learn = small_dqn(**fl)
    assert learn.dls.train.dataset.loop.load_state_dict(saved['data']['loop']) is False
    runs = [fit(small_dqn(**fl), CheckpointCallback(tmp_path/'ck', every=150, resume=True)) for _ in range(2)]
    assert runs[0].dls.train.dataset.loop.returns == runs[1].dls.train.dataset.loop.returns  # the same new episodes each time
    assert read_checkpoint(tmp_path/'ck')['position']['epoch'] == 3


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    "A checkpoint of a small DQN in the middle of its second epoch"
    path = tmp_path_factory.mktemp('ck')/'ck'
    fit(small_dqn(), CheckpointCallback(path, every=300), StopAfterCheckpoint())
    return path


def resume(path, **kwargs): return fit(small_dqn(**kwargs), CheckpointCallback(path, every=300, resume=True))


def test_a_missing_checkpoint_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match=f'^no checkpoint at {tmp_path}/none: expected a folder written by CheckpointCallback$'):
        resume(tmp_path/'none')
    (tmp_path/'empty').mkdir()
    with pytest.raises(CheckpointError, match=f'^{tmp_path}/empty/checkpoint.json is missing: {tmp_path}/empty is not a whole checkpoint$'):
        resume(tmp_path/'empty')


def damaged(checkpoint, tmp_path, change):
    "A copy of `checkpoint` with `change` applied to it"
    copy = tmp_path/'ck'
    shutil.copytree(checkpoint, copy)
    change(copy)
    return copy


def flip_last_bit(f:Path):
    data = f.read_bytes()
    f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))


def test_a_damaged_checkpoint_is_refused_naming_the_file(checkpoint, tmp_path):
    man = json.loads((checkpoint/'checkpoint.json').read_text())
    model_array = man['state']['model']['net.0.weight']['__array__']
    ck = damaged(checkpoint, tmp_path, lambda c: flip_last_bit(c/'arrays'/f'{model_array}.npy'))
    with pytest.raises(CheckpointError, match=f"^{ck}/arrays/{model_array}.npy: checksum [0-9]+ does not match the manifest's {man['arrays'][model_array]['crc32']}: "
                       'the file was changed or damaged$'):
        resume(ck)
    memory_array = sorted((checkpoint/'memory'/'experience_replay'/'arrays').iterdir())[0].name
    ck = damaged(checkpoint, tmp_path/'a', lambda c: (c/'memory'/'experience_replay'/'arrays'/memory_array).unlink())
    with pytest.raises(CheckpointError, match=f'(?s)^Exception occured in `CheckpointCallback` when calling event `before_fit`:\n\t{ck}/memory/experience_replay/arrays/{memory_array}: missing$'):
        resume(ck)
    ck = damaged(checkpoint, tmp_path/'b', lambda c: (c/'checkpoint.json').write_text('{"format": "fastrl_replay.checkpoint", "vers'))
    with pytest.raises(CheckpointError, match=rf"^{ck}/checkpoint.json: checksum [0-9]+ does not match checkpoint.json.crc32's [0-9]+: the manifest was changed or damaged$"):
        resume(ck)
    ck = damaged(checkpoint, tmp_path/'c', lambda c: seal(c, b'{"format": "fastrl_replay.checkpoint", "vers'))
    with pytest.raises(CheckpointError, match=rf'^{ck}/checkpoint.json: not valid JSON \(.*\)$'):
        resume(ck)
    ck = damaged(checkpoint, tmp_path/'d', lambda c: seal(c, b'{"format": "fastrl_replay.checkpoint", "version": 3}'))
    with pytest.raises(CheckpointError, match='checkpoint.json: format version 3; this library reads version 2$'):
        resume(ck)


def seal(ck, raw:bytes):
    "Write `raw` as the checkpoint's manifest and seal it again, as a deliberate edit would"
    (ck/'checkpoint.json').write_bytes(raw)
    (ck/'checkpoint.json.crc32').write_text(f'{zlib.crc32(raw)}\n')


def test_a_checkpoint_of_another_run_is_refused(checkpoint):
    with pytest.raises(CheckpointError, match=r'(?s)does not fit this learner: .*size mismatch for net.0.weight'):
        resume(checkpoint, hidden=(8,))
    with pytest.raises(CheckpointError, match=f'the checkpoint at {checkpoint} is of a fit of 3 epochs of 50 batches; this fit has 3 epochs of 25$'):
        resume(checkpoint, steps_per_epoch=100)
    with pytest.raises(CheckpointError, match=r"records epochs of 6 values; this learner records 4: "
                                              r"\['train_loss', 'return', 'episodes', 'epsilon'\] \(its validation"):
        resume(checkpoint, valid=dict(n_episodes=0))  # the run validated after each epoch: two columns more
    with pytest.raises(CheckpointError, match=r"holds the replay memories \['experience_replay'\]; this learner has \[\]"):
        learn = small_dqn()
        learn.remove_cb(learn.experience_replay)
        fit(learn, CheckpointCallback(checkpoint, resume=True))


def test_a_save_interrupted_between_its_renames_leaves_the_old_checkpoint(tmp_path):
    ck = write_checkpoint(tmp_path/'ck', dict(step=1))
    os.rename(ck, tmp_path/'.ck.old-0')  # where a file system without an atomic exchange moves the old one aside
    (tmp_path/'.ck.saving-999999999-0').mkdir()  # and a new one, unfinished, of a process that is gone
    assert read_checkpoint(ck)['step'] == 1
    write_checkpoint(ck, dict(step=2))
    assert read_checkpoint(ck)['step'] == 2 and sorted(p.name for p in tmp_path.iterdir()) == ['ck']


def refused(capsys, *args) -> str:
    "The error `fastrl-replay` prints for `args`, checking that it exits with status 2"
    with pytest.raises(SystemExit) as e: main(list(map(str, args)))
    assert e.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_the_command_line_refuses_what_it_cannot_resume(tmp_path, capsys):
    assert refused(capsys, 'train', '--resume', tmp_path/'nothing') == \
        f'fastrl-replay: error: {tmp_path}/nothing/run.json is missing: {tmp_path}/nothing is not a run folder written with checkpoint_every'
    (tmp_path/'run').mkdir()
    (tmp_path/'run'/'run.json').write_text('{"env": "CartPole-v1", "steps": 100}')
    assert refused(capsys, 'train', '--resume', tmp_path/'run') == \
        f"fastrl-replay: error: {tmp_path}/run/run.json lacks the settings ['seed', 'replay_size', 'lr', 'replay', 'checkpoint_every', 'learner']"
    (tmp_path/'run'/'run.json').write_text(json.dumps(dict(env='CartPole-v1', steps=100, seed=0, replay_size=100, lr=1e-3,
                                                           replay='uniform', checkpoint_every=50, learner=dict(replay=dict(warmup_sz=20)))))
    assert refused(capsys, 'train', '--resume', tmp_path/'run') == \
        f'fastrl-replay: error: no checkpoint at {tmp_path}/run/checkpoint: expected a folder written by CheckpointCallback'
    assert refused(capsys, 'train', '--resume', tmp_path/'run', '--steps', 200, '--seed', 3) == \
        'fastrl-replay: error: --resume carries a run on with the settings it was started with: drop --steps --seed'
    assert refused(capsys, 'train', '--checkpoint-every', 0) == \
        "fastrl-replay train: error: argument --checkpoint-every: expected a positive integer, got '0'"


class OwnMemory:
    "A replay memory of its own making, over a `Replay`: it has no `save`"
    makes_n_step, prioritized = False, False
    def __init__(self, m): self.m, self.warmup_sz = m, m.warmup_sz
    def __add__(self, b):
        self.m + b
        return self
    def sample(self, bs=None): return self.m.sample(bs)
    def update_td(self, td_errors, idxs): self.m.update_td(td_errors, idxs)
    def __len__(self): return len(self.m)
    def state_dict(self): return self.m.state_dict()
    def load_state_dict(self, state): self.m.load_state_dict(state)


def test_a_memory_that_cannot_be_saved_is_refused(tmp_path):
    memory = OwnMemory(ExperienceReplay(bs=32, max_sz=500, warmup_sz=100, seed=0))
    learn = small_dqn(memory=memory)
    with pytest.raises(CheckpointError, match=r"the replay memories \{'experience_replay': 'OwnMemory'\} cannot be checkpointed: "
                                              r"a memory needs the `save` of a `Replay`$"):
        fit(learn, CheckpointCallback(tmp_path/'ck', every=150))
    assert not (tmp_path/'ck').exists()


DATA = Path(__file__).parent/'data'


def test_run_checkpoints_of_version_1_are_refused_before_any_file_but_the_manifest_is_read(tmp_path, monkeypatch):
    "tests/data/run_v1 was written by the version-1 writer (state.json, state.pth): refused, nothing unpickled, nothing outside opened"
    ck = tmp_path/'v1'
    shutil.copytree(DATA/'run_v1', ck)
    opened, real_open = [], os.open
    monkeypatch.setattr(os, 'open', lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    with pytest.raises(CheckpointError, match=f"^{ck}/checkpoint.json: format version 1, an older format this release no longer reads"):
        read_checkpoint(ck)
    assert opened == [str(ck), 'checkpoint.json']
    with pytest.raises(CheckpointError, match='format version 1, an older format'): CheckpointCallback(ck, resume=True)


def test_a_run_checkpoint_cannot_reach_outside(tmp_path):
    mem = ExperienceReplay(bs=2, max_sz=10, warmup_sz=2, seed=0)
    mem + {'x': torch.arange(6.)[:, None]}
    ck = write_checkpoint(tmp_path/'ck', dict(step=1), {'er': mem})
    assert sorted(p.relative_to(ck).as_posix() for p in ck.rglob('*') if p.is_file()) == [
        'checkpoint.json', 'checkpoint.json.crc32', 'memory/er/arrays/0.npy', 'memory/er/arrays/1.npy', 'memory/er/arrays/2.npy', 'memory/er/arrays/3.npy', 'memory/er/arrays/4.npy', 'memory/er/manifest.json', 'memory/er/manifest.json.crc32']
    assert read_checkpoint(ck) == dict(step=1, memories={'er': ck/'memory'/'er'})
    other = write_checkpoint(tmp_path/'other', dict(step=2), {'er': mem + {'x': torch.ones(2, 1)}})
    shutil.rmtree(ck/'memory'/'er'); (ck/'memory'/'er').symlink_to(other/'memory'/'er')  # a memory from elsewhere
    with pytest.raises(CheckpointError, match=rf'^{ck}/memory/er/manifest.json.crc32: not a regular file inside the checkpoint \(a link, a FIFO, a device or a directory\)$'): read_checkpoint(ck)
    (ck/'memory'/'er').unlink(); shutil.copytree(other/'memory'/'er', ck/'memory'/'er')  # another memory, copied in
    with pytest.raises(CheckpointError, match=f'^{ck}/memory/er/manifest.json.crc32 does not match its CRC-32 in checkpoint.json: the checkpoint was changed$'): read_checkpoint(ck)
    with pytest.raises(CheckpointError, match=r"^write_checkpoint: memories: '../er' is not a memory name"): write_checkpoint(tmp_path/'x', {}, {'../er': mem})


def test_a_sibling_named_like_a_temporary_directory_does_not_break_saves(tmp_path):
    (tmp_path/'.ck.saving-backup-1').mkdir(); (tmp_path/'.ck.saving-backup-1'/'keep').write_text('mine')
    (tmp_path/'.ck.old-notmine').mkdir()
    for step in range(2): write_checkpoint(tmp_path/'ck', dict(step=step))
    assert read_checkpoint(tmp_path/'ck')['step'] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ['.ck.old-notmine', '.ck.saving-backup-1', 'ck'] and (tmp_path/'.ck.saving-backup-1'/'keep').read_text() == 'mine'
