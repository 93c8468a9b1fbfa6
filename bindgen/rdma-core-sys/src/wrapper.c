/* rdma-core-sys: out-of-line copies of rdma-core's static inline verbs (see wrapper.h). */
#include "wrapper.h"

int rc_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	return ibv_post_send(qp, wr, bad_wr);
}

int rc_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	return ibv_post_recv(qp, wr, bad_wr);
}

int rc_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, num_entries, wc);
}

int rc_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return ibv_req_notify_cq(cq, solicited_only);
}

int rc_ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr)
{
	return ibv_query_port(context, port_num, port_attr);
}

int rc_ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
			struct ibv_gid_entry *entry, uint32_t flags)
{
	return ibv_query_gid_ex(context, port_num, gid_index, entry, flags);
}
