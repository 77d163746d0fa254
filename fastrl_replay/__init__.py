__version__ = "0.1.0"
"Experience replay for reinforcement learning on fastai"

import warnings
# fastai 2.8 calls `torch.jit.script` when `fastai.layers` is imported, which torch 2.14 deprecates with a FutureWarning,
# and sets pandas' `mode.chained_assignment` option when `fastai.tabular.core` is imported (by `fastai.basics`, which
# the progress bar imports), which pandas 3 deprecates with a DeprecationWarning: warnings no user of this package can
# act on. Both are imported here once, with those two warnings hidden, so that every module of the package gets them
# already imported; `catch_warnings` restores the warnings filter afterwards.
with warnings.catch_warnings():
    warnings.filterwarnings('ignore', message='`torch.jit.script` is deprecated', category=FutureWarning)
    warnings.filterwarnings('ignore', message="The 'mode.chained_assignment' option is deprecated", category=DeprecationWarning)
    import fastai.layers, fastai.tabular.core
del warnings, fastai  # the package namespace keeps only its own names
