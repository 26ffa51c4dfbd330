"""The frontend: Python AST -> tile IR.

``build.build_ir`` compiles one ``source.KernelSource`` for one tuple of ``specs`` (the build key): the
``codegen.CodeGen`` visitor (its jobs in ``statements``, ``loops``, ``expressions``, ``calls``, ``combine``)
walks the AST and builds typed IR through a ``semantic.Semantic``; ``values`` are what it manipulates,
``carry`` decides what runtime control flow carries, ``blockptr`` lowers block pointers, descriptors and
tile-indexed memory. The frontend never imports the runtime: kernel callees are ``source.KernelFunction``s.
"""
