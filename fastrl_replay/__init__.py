__version__ = "0.1.0"
"Experience replay for reinforcement learning on fastai"

import warnings
# fastai 2.8 calls `torch.jit.script` when `fastai.layers` is imported, which torch 2.14 deprecates with a FutureWarning
# that no user of this package can act on. It is imported here once, with that one warning hidden, so that every
# module of the package gets it already imported; `catch_warnings` restores the warnings filter afterwards.
with warnings.catch_warnings():
    warnings.filterwarnings('ignore', message='`torch.jit.script` is deprecated', category=FutureWarning)
    import fastai.layers
del warnings, fastai  # the package namespace keeps only its own names
