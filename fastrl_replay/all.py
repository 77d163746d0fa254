"Everything a notebook needs: `from fastrl_replay.all import *`"
from .core import *
from .memory.experience_replay import *
