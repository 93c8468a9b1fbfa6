/* rdma-core-sys: the headers bindgen reads, and the C shims (src/wrapper.c) for what rdma-core
 * provides only as `static inline` functions or function-like macros, which have no symbol to
 * link against. Every shim is named `rc_` + the rdma-core name and has the same contract. */
#ifndef RINGCAST_RDMA_CORE_SYS_WRAPPER_H
#define RINGCAST_RDMA_CORE_SYS_WRAPPER_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* Data path: static inline in verbs.h (dispatch through the provider's ops table). */
int rc_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int rc_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int rc_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int rc_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* `ibv_query_port` is a macro over a static inline that fills the whole `struct ibv_port_attr`;
 * the exported symbol of that name takes the older, shorter `struct _compat_ibv_port_attr`. */
int rc_ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr);

/* `ibv_query_gid_ex` is a static inline over `_ibv_query_gid_ex` that passes the entry's size:
 * the GID and its type (`enum ibv_gid_type`: IB, RoCE v1, RoCE v2) of one GID table entry. */
int rc_ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
			struct ibv_gid_entry *entry, uint32_t flags);

#endif
