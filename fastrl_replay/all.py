"Everything a notebook needs: `from fastrl_replay.all import *`, with NumPy, torch and `nn` as fastai's `all` gives"
import numpy as np, torch
from torch import nn
import torch.nn.functional as F
from .core import *
from .tensor_batch import *
from .errors import *
from .nstep import *
from .memory.core import *
from .memory.alloc import *
from .memory.experience_replay import *
from .callback import *
from .memory.sumtree import *
from .memory.prioritized import *
from .memory.laber import *
from .memory.frames import *
from .memory.circular import *
from .memory.persist import *
from .memory.direct_io import *
from .memory.continual import *
from .memory.sequence import *
from .memory.her import *
from .data.gym import *
from .data.synth import *
from .envs.changing import *
from .envs.pomdp import *
from .envs.toy import *
from .envs.goal import *
from .learner import *
from .threads import *
from .agents.common import *
from .agents.nets import *
from .agents.dqn import *
from .agents.sac import *
from .agents.td3 import *
from .agents.a2c import *
from .agents.r2d2 import *
from .agents.der import *
from .plots import *
from .datasets import *
from .checkpoint import *
# modules with a name of their own that another module above already gives: `FrameReplay` is the circular replay
# buffer's (`fastrl_replay.atari.FrameReplay` is Atari's), `MEMORIES` the agents' (`forgetting.MEMORIES` the experiment's)
from .atari import (STACK, ATARI_DEFAULTS, is_atari, atari_env, NatureQNet, frame_replay, atari_defaults, atari_learner,
                    TrimHeap)
from .forgetting import (BUDGETS, make_memory, RateCurve, a2c_forgetting, dqn_forgetting, plot_confusions, plot_rate_curves,
                         run_forgetting)
