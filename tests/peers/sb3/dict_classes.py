"SB3's off-policy classes, each making its buffer for a Dict observation space with fastrl_replay's `DictReplayBuffer`"
from gymnasium import spaces
import stable_baselines3 as sb3
from fastrl_replay.compat.sb3 import DictReplayBuffer

def _dict_buffer(cls):
    "`cls` taking fastrl_replay's `DictReplayBuffer` where SB3 would take its own (a Dict space, no buffer class given)"
    def _setup_model(self):
        if self.replay_buffer_class is None and isinstance(self.observation_space, spaces.Dict):
            self.replay_buffer_class = DictReplayBuffer
        return cls._setup_model(self)
    return type(cls.__name__, (cls,), {'_setup_model': _setup_model, '__module__': __name__})

DDPG, DQN, SAC, TD3 = (_dict_buffer(c) for c in (sb3.DDPG, sb3.DQN, sb3.SAC, sb3.TD3))
