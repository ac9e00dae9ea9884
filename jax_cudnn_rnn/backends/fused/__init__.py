"""The fused-kernel kit both native backends (cuDNN, oneDNN) are built from: the custom_vjp scaffold (``vjp``), the
kernels' calling convention (``kernel``) and vmap rules (``batching``), and around a kernel call the layer-by-layer
network with dropout (``stacking``), time chunks (``chunking``), resets as packed segments (``segments``), composed
by ``backend``; ``loader`` loads a native module and registers its FFI targets."""
