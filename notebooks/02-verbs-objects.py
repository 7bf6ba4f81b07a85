# %% [markdown]
# # The verbs objects
#
# An RDMA program talks to its NIC through the *verbs* (IBA Vol 1 chapter 11; libibverbs in
# C, pyverbs in Python). Six objects do all the work:
#
# | Object | What it is | Why it exists |
# |---|---|---|
# | **Device / Context** | an open RDMA device | the handle everything else hangs from |
# | **PD**, protection domain | a container | objects may only be used together if they share a PD |
# | **MR**, memory region | registered memory, with an `lkey` and an `rkey` | the NIC may only touch registered memory, with the rights the registration grants |
# | **CQ**, completion queue | where finished work is reported | the application learns what completed by polling it |
# | **QP**, queue pair | a send queue and a receive queue | the endpoint of a connection; work requests are posted here |
# | **WR / WC** | work requests and work completions | what you ask, and what you are told |
#
# rdmalab's soft engine has pyverbs' names, arguments and constants, so the code below runs on
# real hardware with pyverbs by changing the imports.

# %%
BACKEND = "soft"
import rdmalab.verbs.enums as e
from rdmalab import lab, viz
from rdmalab.fabric import Fabric
from rdmalab.verbs.cq import CQ
from rdmalab.verbs.device import Context, get_device_list
from rdmalab.verbs.mr import MR
from rdmalab.verbs.pd import PD
from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr

BACKEND = lab.backend(BACKEND)  # checks that the backend is available
fabric = Fabric(seed=2)  # a fresh simulated network, so this notebook's numbers never change
soft0 = fabric.add_device("soft0", "10.0.0.1")
soft1 = fabric.add_device("soft1", "10.0.0.2")

# %% [markdown]
# ## Device and context

# %%
print([d.name for d in get_device_list(fabric)])
ctx = Context(name="soft0", fabric=fabric)
port = ctx.query_port(1)
print("port state ACTIVE:", port.state == e.IBV_PORT_ACTIVE, "| active MTU enum:", port.active_mtu,
      "| link layer Ethernet:", port.link_layer == e.IBV_LINK_LAYER_ETHERNET)
for i in range(port.gid_tbl_len):
    print(f"GID[{i}] = {ctx.query_gid(1, i)}")

# %% [markdown]
# Like Linux `rxe`, a soft device has two GIDs: index 0 is the link-local GID derived from the
# MAC address, index 1 the IPv4-mapped GID `::ffff:10.0.0.1`. RoCEv2 puts the GID in the IP
# header, so the GID index you choose decides the IP addresses on the wire.
#
# ## Protection domain and memory region
#
# Registering memory pins it and tells the NIC which rights remote peers get. The
# registration returns two keys: the **lkey**, which your own work requests use to name local
# memory, and the **rkey**, which you hand to a peer so that its RDMA requests may access this
# memory. The soft engine deliberately makes them different (hardware often makes them equal,
# which hides bugs; notebook 11).

# %%
pd = PD(ctx)
access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
mr = MR(pd, 4096, access)
print(mr)
print(f"lkey = {mr.lkey:#010x}, rkey = {mr.rkey:#010x}, address = {mr.buf:#x}, length = {mr.length}")

# %% [markdown]
# ## Completion queue and queue pair
#
# A QP is created with its capabilities (how many outstanding work requests and scatter/gather
# entries) and the CQs its two queues report to.

# %%
cq = CQ(ctx, 16, None, None, 0)
init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=8, max_recv_wr=8))
qp = QP(pd, init)
print(f"QP number {qp.qp_num:#x}, state {qp.qp_state_name}")

# %% [markdown]
# ## The QP state machine
#
# A new QP is in RESET and can do nothing. `modify_qp` moves it along: INIT (it may post
# receives), RTR, "ready to receive" (it knows its peer), RTS, "ready to send". Each
# transition requires some attributes and allows others (IBA Vol 1 10.3.1 and 11.2.4.2; Linux
# `ib_modify_qp_is_ok`). The engine enforces exactly one table, and this diagram is drawn from
# that table, so the two cannot disagree. Each arrow is labelled with the attributes its
# transition requires; the faint arrows are the transitions to RESET and ERR that exist from
# every state.

# %%
viz.qp_state_diagram("RC")

# %% [markdown]
# Let's walk our QP along the blue path, and try a transition the table does not allow.

# %%
from rdmalab.verbs.addr import AHAttr, GlobalRoute
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError

attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
attr.qp_access_flags = access
qp.to_init(attr)
print("after to_init:", qp.qp_state_name)

try:
    bad = QPAttr(qp_state=e.IBV_QPS_RTS)
    qp.modify(bad, e.IBV_QP_STATE)
except PyverbsRDMAError as err:
    print("INIT -> RTS refused:", err)

peer_ctx = Context(name="soft1", fabric=fabric)
attr = QPAttr(port_num=1)
attr.path_mtu = e.IBV_MTU_1024
attr.dest_qp_num, attr.rq_psn, attr.sq_psn = 0x12, 0, 0
attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=peer_ctx.query_gid(1, 1), sgid_index=1))
qp.to_rtr(attr)
print("after to_rtr:", qp.qp_state_name)
qp.to_rts(attr)
print("after to_rts:", qp.qp_state_name)

# %% [markdown]
# The engine recorded each transition in its trace:

# %%
print(fabric.trace.dump(fabric.trace.of_kind("state")))

# %% [markdown]
# ## Exercises
#
# ### 1. Back from ERR
#
# A QP whose work failed for good (its retries ran out, say) is in ERR: it completes every work
# request with an error and sends nothing more. List its way back, state by state, from ERR
# to RTS, where it can send again. The diagram holds the answer: look at its faint arrows too.

# %% tags=["exercise"]
path = ...  # a list of state names, e.g. ["ERR", ...]
### BEGIN SOLUTION
from collections import deque

from rdmalab.verbs.engine import qpstate

came_from = {qpstate.ERR: None}  # a breadth-first search of the engine's table: the shortest legal path
todo = deque([qpstate.ERR])
while todo:
    here = todo.popleft()
    for (src, dst), types in qpstate.TABLE.items():
        if src == here and qpstate.RC in types and dst not in came_from:
            came_from[dst] = here
            todo.append(dst)
path, here = [], qpstate.RTS
while here is not None:
    path.insert(0, e.QP_STATE_NAMES[here])
    here = came_from[here]
### END SOLUTION
lab.check("verbs.path", path)

# %% [markdown]
# Once you have answered, send our QP to ERR and bring it back, and the engine's trace shows
# the way it took:

# %%
n_before = len(fabric.trace.of_kind("state"))
qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
try:
    qp.modify(QPAttr(qp_state=e.IBV_QPS_INIT), e.IBV_QP_STATE)
except PyverbsRDMAError as err:
    print("ERR -> INIT refused:", err)
qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
init_attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
init_attr.qp_access_flags = access
qp.to_init(init_attr)
qp.to_rtr(attr)  # the same attributes as the first time: each transition asks for its own again
qp.to_rts(attr)
print(fabric.trace.dump(fabric.trace.of_kind("state")[n_before:]))

# %% [markdown]
# ### 2. What RTR needs, without acknowledgements
#
# The diagram's INIT -> RTR arrow lists what an RC QP must be given before it can receive. An
# *unreliable connected* (UC) QP is connected to one peer too, but it carries only SENDs and
# RDMA WRITEs, and nothing it receives is ever acknowledged. Which attributes must `modify_qp`
# be given to move a **UC** QP from INIT to RTR? Give the set of names as the diagram prints
# them (`"PATH_MTU"`, ...). Reason from the RC arrow first; to check yourself afterwards,
# `rdmalab.verbs.engine.qpstate.TABLE` is the table the engine enforces.

# %% tags=["exercise"]
rtr_attrs = ...  # a set of names
### BEGIN SOLUTION
from rdmalab.verbs.engine import qpstate

rtr_attrs = set(qpstate.mask_names(qpstate.TABLE[(qpstate.INIT, qpstate.RTR)][qpstate.UC][0]).split(" | "))
### END SOLUTION
lab.check("verbs.rtr", rtr_attrs)
