"""Kernels: the torch reference of the memory ops (torch_ops.py), the custom CUDA extension of
chapter 19 (cuda_ext.py, csrc/), the Triton kernels (triton/: chapters 18 and 20) and the radix
key compare (radix.py, chapter 10).

Nothing here chooses between them: the op registry (minisgl.ops) knows each op's
implementations and picks one per call.
"""
