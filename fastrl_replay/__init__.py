__version__ = "0.1.0"
"Experience replay for reinforcement learning on fastai"
