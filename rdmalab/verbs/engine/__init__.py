"""The sans-I/O core of the soft verbs engine.

``packet``     the engine's packets (lazy RoCEv2 frames) and PSN arithmetic
``qpstate``    the QP state machine as a transition table (IBA 10.3.1, Linux core/verbs.c)
``memory``     lkey/rkey resolution with bounds, access and PD checks
``requester``  send WQEs -> request packets (segmentation, PSNs, AckReq, window, credits)
``responder``  request packets -> execution, ACK/NAK, READ responses, atomic replay
``completer``  ACKs/NAKs/responses -> completions, go-back-N and RNR retries, timers

Nothing here knows about sockets or threads: packets go out through ``Device.transmit`` and
time comes from the device's clock (a fabric's virtual clock).
"""
