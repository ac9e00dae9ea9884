"""The ``jax-cudnn-rnn`` command (``cli``) and its subcommands: ``info``, ``demo``, ``bench``."""
