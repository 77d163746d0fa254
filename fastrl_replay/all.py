"Everything a notebook needs: `from fastrl_replay.all import *`"
from .core import *
from .errors import *
from .memory.core import *
from .memory.alloc import *
from .memory.experience_replay import *
from .memory.sumtree import *
from .memory.prioritized import *
from .memory.laber import *
from .memory.circular import *
from .memory.persist import *
from .data.gym import *
from .data.synth import *
from .learner import *
from .agents.dqn import *
from .plots import *
from .datasets import *
from .checkpoint import *
