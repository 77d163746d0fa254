"A short Atari run (ale-py installs from PyPI with its ROMs): real frames through the pipeline into the compressed frame memory"
import numpy as np, pytest, torch
pytest.importorskip('ale_py')
from fastrl_replay.atari import atari_learner, atari_env
from fastrl_replay.cli import _bytes_per_transition

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

def test_the_environment_gives_stacks_of_preprocessed_frames():
    e = atari_env('ALE/Breakout-v5', n_envs=2)
    obs, _ = e.reset(seed=1)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8 and not obs[:, :3].any() and obs[:, 3].any()
    obs2, *_ = e.step(np.array([1, 1]))
    assert np.array_equal(obs2[:, 2], obs[:, 3])  # the stack moves on by one frame
    e.close()
