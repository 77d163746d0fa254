__version__ = "0.1.0"

import warnings
# fastai 2.8 calls `torch.jit.script`, which torch 2.14 deprecates: a warning no user of this library can act on
warnings.filterwarnings('ignore', message='`torch.jit.script` is deprecated', category=FutureWarning)
