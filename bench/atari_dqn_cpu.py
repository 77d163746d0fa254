"""A DQN on Breakout on the CPU, its replay memory a `CompressedFrameStorage`; the return curve is written after every epoch.

    python bench/atari_dqn_cpu.py bench/results/atari_dqn_cpu.json      # runs until stopped (200 epochs of 5,000 steps)
    python bench/atari_dqn_cpu.py bench/results/atari_dqn_cpu.json 13   # 13 epochs: 65,000 environment steps

The settings trade the Nature DQN's for what a shared 2-core CPU trains in an hour: one gradient step per 8 environment
steps (4 environments), Adam at 2.5e-4, 3-step returns, a target network synced every 500 gradient steps, exploration
decaying over the first 25,000 agent steps (100,000 environment steps)."""
import json, time, sys, numpy as np, torch
from machine import machine_record  # first: the load average as the run starts
from fastai.callback.core import Callback
from fastrl_replay.atari import atari_learner
torch.set_num_threads(1)
out, epochs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 200
class ReturnLog(Callback):
    order = 90
    def before_fit(self): self.t0 = time.perf_counter()
    def after_epoch(self):
        loop, mem = self.learn.dls.train.dataset.loop, self.learn.experience_replay.memory
        st = mem.storage
        json.dump(dict(env_steps=loop.env_steps, wall_s=time.perf_counter() - self.t0, returns=loop.returns,
                       epsilon=loop.agent.epsilon, memory_rows=len(mem), memory_bytes=st.nbytes(),
                       memory_bytes_per_transition=st.nbytes() / max(len(mem), 1),
                       machine=machine_record('ale-py', 'gymnasium')), open(out, 'w'))
learn = atari_learner('ALE/Breakout-v5', n_envs=4, n_steps=3, seed=0, steps_per_epoch=5_000,
                      replay=dict(max_sz=100_000, warmup_sz=5_000, bs=32),
                      optim=dict(lr=2.5e-4, train_every=8, max_grad_norm=10.), net=dict(target_sync=500),
                      explore=dict(eps_end=0.01, eps_steps=25_000), cbs=[ReturnLog()])
with learn.no_bar(), learn.no_logging(): learn.fit(epochs, 2.5e-4)
