"""``IBV_*`` constants with libibverbs' values, named as ``pyverbs.enums`` names them.

Values are those of rdma-core v44 ``libibverbs/verbs.h`` (checked against ``pyverbs.enums``),
so ``import rdmalab.verbs.enums as e`` and ``import pyverbs.enums as e`` are interchangeable.
"""

from __future__ import annotations

# ibv_wc_status
IBV_WC_SUCCESS = 0
IBV_WC_LOC_LEN_ERR = 1
IBV_WC_LOC_QP_OP_ERR = 2
IBV_WC_LOC_EEC_OP_ERR = 3
IBV_WC_LOC_PROT_ERR = 4
IBV_WC_WR_FLUSH_ERR = 5
IBV_WC_MW_BIND_ERR = 6
IBV_WC_BAD_RESP_ERR = 7
IBV_WC_LOC_ACCESS_ERR = 8
IBV_WC_REM_INV_REQ_ERR = 9
IBV_WC_REM_ACCESS_ERR = 10
IBV_WC_REM_OP_ERR = 11
IBV_WC_RETRY_EXC_ERR = 12
IBV_WC_RNR_RETRY_EXC_ERR = 13
IBV_WC_LOC_RDD_VIOL_ERR = 14
IBV_WC_REM_INV_RD_REQ_ERR = 15
IBV_WC_REM_ABORT_ERR = 16
IBV_WC_INV_EECN_ERR = 17
IBV_WC_INV_EEC_STATE_ERR = 18
IBV_WC_FATAL_ERR = 19
IBV_WC_RESP_TIMEOUT_ERR = 20
IBV_WC_GENERAL_ERR = 21
IBV_WC_TM_ERR = 22
IBV_WC_TM_RNDV_INCOMPLETE = 23

# ibv_wc_status_str() of libibverbs
WC_STATUS_STR = {
    0: "success", 1: "local length error", 2: "local QP operation error",
    3: "local EE context operation error", 4: "local protection error", 5: "Work Request Flushed Error",
    6: "memory management operation error", 7: "bad response error", 8: "local access error",
    9: "remote invalid request error", 10: "remote access error", 11: "remote operation error",
    12: "transport retry counter exceeded", 13: "RNR retry counter exceeded", 14: "local RDD violation error",
    15: "remote invalid RD request", 16: "aborted error", 17: "invalid EE context number",
    18: "invalid EE context state", 19: "fatal error", 20: "response timeout error", 21: "general error",
    22: "TM error", 23: "TM software rendezvous",
}


def ibv_wc_status_str(status: int) -> str:
    return WC_STATUS_STR.get(status, "unknown")


# ibv_wc_opcode
IBV_WC_SEND = 0
IBV_WC_RDMA_WRITE = 1
IBV_WC_RDMA_READ = 2
IBV_WC_COMP_SWAP = 3
IBV_WC_FETCH_ADD = 4
IBV_WC_BIND_MW = 5
IBV_WC_LOCAL_INV = 6
IBV_WC_TSO = 7
IBV_WC_ATOMIC_WRITE = 9
IBV_WC_RECV = 128
IBV_WC_RECV_RDMA_WITH_IMM = 129

# ibv_wc_flags
IBV_WC_GRH = 1
IBV_WC_WITH_IMM = 2
IBV_WC_IP_CSUM_OK = 4
IBV_WC_WITH_INV = 8

# ibv_wr_opcode
IBV_WR_RDMA_WRITE = 0
IBV_WR_RDMA_WRITE_WITH_IMM = 1
IBV_WR_SEND = 2
IBV_WR_SEND_WITH_IMM = 3
IBV_WR_RDMA_READ = 4
IBV_WR_ATOMIC_CMP_AND_SWP = 5
IBV_WR_ATOMIC_FETCH_AND_ADD = 6
IBV_WR_LOCAL_INV = 7
IBV_WR_BIND_MW = 8
IBV_WR_SEND_WITH_INV = 9
IBV_WR_TSO = 10
IBV_WR_ATOMIC_WRITE = 15

# ibv_send_flags
IBV_SEND_FENCE = 1
IBV_SEND_SIGNALED = 2
IBV_SEND_SOLICITED = 4
IBV_SEND_INLINE = 8
IBV_SEND_IP_CSUM = 16

# ibv_access_flags
IBV_ACCESS_LOCAL_WRITE = 1
IBV_ACCESS_REMOTE_WRITE = 2
IBV_ACCESS_REMOTE_READ = 4
IBV_ACCESS_REMOTE_ATOMIC = 8
IBV_ACCESS_MW_BIND = 16
IBV_ACCESS_ZERO_BASED = 32
IBV_ACCESS_ON_DEMAND = 64
IBV_ACCESS_HUGETLB = 128
IBV_ACCESS_RELAXED_ORDERING = 0x100000

# ibv_qp_state
IBV_QPS_RESET = 0
IBV_QPS_INIT = 1
IBV_QPS_RTR = 2
IBV_QPS_RTS = 3
IBV_QPS_SQD = 4
IBV_QPS_SQE = 5
IBV_QPS_ERR = 6
IBV_QPS_UNKNOWN = 7
QP_STATE_NAMES = {0: "RESET", 1: "INIT", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "ERR", 7: "UNKNOWN"}

# ibv_qp_type
IBV_QPT_RC = 2
IBV_QPT_UC = 3
IBV_QPT_UD = 4
IBV_QPT_RAW_PACKET = 8
IBV_QPT_XRC_SEND = 9
IBV_QPT_XRC_RECV = 10
IBV_QPT_DRIVER = 255
QP_TYPE_NAMES = {2: "RC", 3: "UC", 4: "UD", 8: "RAW_PACKET", 9: "XRC_SEND", 10: "XRC_RECV", 255: "DRIVER"}

# ibv_mtu
IBV_MTU_256 = 1
IBV_MTU_512 = 2
IBV_MTU_1024 = 3
IBV_MTU_2048 = 4
IBV_MTU_4096 = 5


def mtu_to_bytes(mtu: int) -> int:
    """``IBV_MTU_*`` -> bytes (256 << (mtu - 1))."""
    return 256 << (mtu - 1)


def bytes_to_mtu(nbytes: int) -> int:
    return {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}[nbytes]


# ibv_qp_attr_mask
IBV_QP_STATE = 1
IBV_QP_CUR_STATE = 2
IBV_QP_EN_SQD_ASYNC_NOTIFY = 4
IBV_QP_ACCESS_FLAGS = 8
IBV_QP_PKEY_INDEX = 16
IBV_QP_PORT = 32
IBV_QP_QKEY = 64
IBV_QP_AV = 128
IBV_QP_PATH_MTU = 256
IBV_QP_TIMEOUT = 512
IBV_QP_RETRY_CNT = 1024
IBV_QP_RNR_RETRY = 2048
IBV_QP_RQ_PSN = 4096
IBV_QP_MAX_QP_RD_ATOMIC = 8192
IBV_QP_ALT_PATH = 16384
IBV_QP_MIN_RNR_TIMER = 32768
IBV_QP_SQ_PSN = 65536
IBV_QP_MAX_DEST_RD_ATOMIC = 131072
IBV_QP_PATH_MIG_STATE = 262144
IBV_QP_CAP = 524288
IBV_QP_DEST_QPN = 1048576
IBV_QP_RATE_LIMIT = 33554432

# ibv_port_state, link layer, GID type
IBV_PORT_NOP = 0
IBV_PORT_DOWN = 1
IBV_PORT_INIT = 2
IBV_PORT_ARMED = 3
IBV_PORT_ACTIVE = 4
IBV_LINK_LAYER_UNSPECIFIED = 0
IBV_LINK_LAYER_INFINIBAND = 1
IBV_LINK_LAYER_ETHERNET = 2
IBV_GID_TYPE_IB = 0
IBV_GID_TYPE_ROCE_V1 = 1
IBV_GID_TYPE_ROCE_V2 = 2

# ibv_mig_state
IBV_MIG_MIGRATED = 0
IBV_MIG_REARM = 1
IBV_MIG_ARMED = 2
