# cpprb's own test/test_multi_rew.py, vendored from github.com/ymd-h/cpprb (the mirror of gitlab.com/ymd_h/cpprb) at commit 64f255db12189612aef3e62f2633dd21f5bf8608
# (MIT License, Copyright (c) 2019 Yamada Hiroyuki: tests/peers/cpprb/LICENSE). Changed: only the imports of the classes
# the adapter provides, which come from fastrl_replay.compat.cpprb; the tests that still fail are listed in nbs/13a_compat.cpprb.ipynb.
import unittest
import numpy as np

from fastrl_replay.compat.cpprb import ReplayBuffer

class TestMultiRew(unittest.TestCase):
    def test(self):
        buffer_size = 256
        obs_dim = 3
        act_dim = 1
        rew_dim = 2
        rb = ReplayBuffer(buffer_size,
                          {"obs": {"shape": obs_dim},
                           "act": {"shape": act_dim},
                           "rew": {"shape": rew_dim},
                           "next_obs": {"shape": obs_dim},
                           "done": {}})

        obs = np.ones(shape=(obs_dim))
        act = np.ones(shape=(act_dim))
        rew = (0,1)
        next_obs = np.ones(shape=(obs_dim))
        done = 0

        for i in range(500):
            rb.add(obs=obs,act=act,rew=rew,next_obs=next_obs,done=done)


        batch_size = 32
        sample = rb.sample(batch_size)

        self.assertEqual(0,sample["rew"][0,0])
        self.assertEqual(1,sample["rew"][0,1])

if __name__ == '__main__':
    unittest.main()
