"""rdmalab: a Python RDMA protocol lab.

Layers (lower never imports higher): ``wire`` (headers <-> bytes), ``capture`` (pcap in and
out, dissection, analysis), ``verbs`` + ``fabric`` (the soft verbs engine and how its packets
move), ``viz`` (pictures), ``lab`` (exercises), ``cli`` (the ``rdmalab`` command).
"""

__version__ = "0.1.0"
