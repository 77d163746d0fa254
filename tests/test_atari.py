"A short Atari run (ale-py installs from PyPI with its ROMs): real frames through the pipeline into the compressed frame memory"
import numpy as np, pytest, torch
pytest.importorskip('ale_py')
from fastrl_replay.atari import atari_learner, atari_env
from fastrl_replay.runs import _bytes_per_transition

def test_a_few_hundred_steps_of_pong_replay_exact_stacks():
    learn = atari_learner('ALE/Pong-v5', steps_per_epoch=400, n_envs=2, n_steps=3, seed=0,
                          replay=dict(max_sz=256, warmup_sz=64, bs=16, options=dict(block=8)))
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    mem, loop = learn.experience_replay.memory, learn.dls.train.dataset.loop
    assert loop.env_steps >= 400 and len(mem) == 256  # wrapped: 400 steps in 256 rows
    st = mem.storage
    assert type(st).__name__ == 'CompressedFrameStorage' and st.frames_at(np.arange(256)).any()
    b, idx = mem.sample()
    k = b['horizon'][:, 0]
    assert b['state'].shape == (16, 4, 84, 84) and b['state'].dtype == torch.uint8
    for i in range(16):  # the next state is the state k steps on: their common frames agree, frame for frame
        if not b['terminated'][i, 0] and not b['truncated'][i, 0]: assert torch.equal(b['next_state'][i, :4 - k[i]], b['state'][i, k[i]:])
    assert 100 < _bytes_per_transition(mem) < 7_056  # a whole 84x84 frame is 7,056 bytes

def _wrappers(env) -> list:
    "The classes of an environment's chain of wrappers, outermost first, down to the emulator"
    chain = []
    while env is not None: chain.append(type(env)); env = getattr(env, 'env', None)
    return chain

def test_the_environment_gives_single_frames_and_no_wrapper_stacks_them():
    import gymnasium as gym
    e = atari_env('ALE/Breakout-v5', n_envs=2)
    obs, _ = e.reset(seed=1)
    assert obs.shape == (2, 84, 84) and obs.dtype == np.uint8 and obs.any()
    for sub in e.envs:
        chain = _wrappers(sub)
        assert gym.wrappers.AtariPreprocessing in chain and gym.wrappers.FrameStackObservation not in chain
        assert not any('Stack' in c.__name__ for c in chain), chain
    e.close()

class Recording:
    "An agent that keeps a copy of each stack it is given and acts as `agent` does"
    def __init__(self, agent): self.agent, self.seen = agent, []
    def __call__(self, state): self.seen.append(np.array(state)); return self.agent(state)
    def state_dict(self): return self.agent.state_dict()

def test_the_agent_acts_on_the_stacks_the_memory_returns():
    learn = atari_learner('ALE/Pong-v5', steps_per_epoch=600, n_envs=2, n_steps=3, seed=0, max_episode_steps=400,
                          replay=dict(max_sz=2_000, warmup_sz=64, bs=16, options=dict(block=8)))
    loop, mem = learn.dls.train.dataset.loop, learn.experience_replay.memory
    assert loop.stack_size == 4 and loop.env.single_observation_space.shape == (84, 84)
    rec = Recording(loop.agent)
    live, orig_step = [], loop.step
    def step():  # which environments each call of the agent acts for: those not resetting
        calls = len(rec.seen)
        rows = orig_step()
        if rows: assert len(rec.seen) == calls + 1
        live.extend((calls, int(r['env_id'][0, 0])) for r in rows)
        return rows
    loop.agent, loop.step = rec, step
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    st, n = mem.storage, len(mem)
    assert 600 <= n < 2_000 and len(live) >= n  # no row overwritten; rows made and not yet added are left out
    acted = np.stack([rec.seen[c][e] for c, e in live[:n]])  # (n, 4, 84, 84): the stack acted on at each stored step
    assert acted.shape == (n, 4, 84, 84) and acted.dtype == np.uint8
    rows = np.arange(n)
    ok = st.valid(rows)  # a row is a transition once its next 3 steps are stored (or its episode ended before)
    assert ok.sum() >= n - 2 * 3  # the last 3 rows of each of the 2 environments may wait for their n-step returns
    got = st.gather(torch.as_tensor(rows[ok]))['state'].numpy()
    assert np.array_equal(got, acted[ok])  # bit for bit, zero padding at every episode start included
    starts = st.episode[rows] != np.roll(st.episode[rows], 1)
    assert (~acted[ok][:, 0].any(axis=(1, 2)) & starts[ok]).sum() > 2  # episodes started inside the run, each with zero padding
    assert st.truncated[:n].sum() + st.terminal[:n].sum() > 2
