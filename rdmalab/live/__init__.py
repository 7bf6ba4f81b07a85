"""Live RDMA: the soft engine on real networks, with kernel rxe and the stock tools as peers."""
