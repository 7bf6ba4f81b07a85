"""The soft engine's versions of the stock RDMA programs, speaking their wire and out-of-band exchanges.

* :mod:`rdmalab.tools.pingpong`: rdma-core's ``ibv_{rc,uc,ud,srq}_pingpong`` (``rdmalab pingpong``);
* :mod:`rdmalab.tools.perftest`: perftest's ``ib_{write,read,send,atomic}_bw`` (``rdmalab perftest``);
* :mod:`rdmalab.tools.rping` and :mod:`rdmalab.tools.udaddy`: librdmacm's ``rping`` and ``udaddy``;
* :mod:`rdmalab.tools.oob`: the programs' out-of-band TCP records (what each side sends before traffic);
* :mod:`rdmalab.tools.kv` and :mod:`rdmalab.tools.kvnet`: a key-value store built on the verbs (GET by READs,
  GET/PUT by RPC; docs/kv.md), on the simulated fabric or over UDP.

A tool's ``--netdev IF`` (``--transport iwarp`` for an iWARP device) makes its device for the run with
:func:`rdmalab.fabric.links.use_interface`, the code ``rdmalab link add NAME [type rxe|siw] netdev IF``
uses for every program.

They sit above :mod:`rdmalab.fabric` (the carriers they run on) and below :mod:`rdmalab.live` (which
drives the kernel's devices and the VM): nothing here needs the VM or the capture decoder, so a tool
starts fast inside the TCG VM (``tests/test_cli.py`` holds its imports to that).  docs/interop.md
compares each with the stock program.
"""
