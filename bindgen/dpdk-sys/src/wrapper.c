/* ringcast-dpdk-sys: out-of-line copies of DPDK's static inline functions and macros (see
 * wrapper.h). */
#include "wrapper.h"

uint16_t rc_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
			     uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t rc_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
			     uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *rc_rte_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

void rc_rte_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

char *rc_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

void *rc_rte_pktmbuf_mtod(const struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, void *);
}

uint16_t rc_rte_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
}

uint32_t rc_rte_pktmbuf_pkt_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_pkt_len(m);
}

unsigned int rc_rte_lcore_id(void)
{
	return rte_lcore_id();
}

int rc_rte_errno(void)
{
	return rte_errno;
}
