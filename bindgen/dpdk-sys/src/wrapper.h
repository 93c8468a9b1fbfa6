/* ringcast-dpdk-sys: the headers bindgen reads, and the C shims (src/wrapper.c) for what DPDK
 * provides only as `static inline` functions or macros, which have no symbol to link against.
 * Every shim is named `rc_` + the DPDK name and has the same contract. */
#ifndef RINGCAST_DPDK_SYS_WRAPPER_H
#define RINGCAST_DPDK_SYS_WRAPPER_H

#include <stdint.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

uint16_t rc_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
			     uint16_t nb_pkts);
uint16_t rc_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
			     uint16_t nb_pkts);

struct rte_mbuf *rc_rte_pktmbuf_alloc(struct rte_mempool *mp);
void rc_rte_pktmbuf_free(struct rte_mbuf *m);
/* NULL if the last segment has fewer than `len` bytes of tailroom (the mbuf is then unchanged). */
char *rc_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
/* rte_pktmbuf_mtod(m, void *): the start of the data in the first segment. */
void *rc_rte_pktmbuf_mtod(const struct rte_mbuf *m);
uint16_t rc_rte_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t rc_rte_pktmbuf_pkt_len(const struct rte_mbuf *m);

/* LCORE_ID_ANY on a thread that is not an EAL lcore. */
unsigned int rc_rte_lcore_id(void);

/* rte_errno (a per-lcore variable behind a macro): the calling thread's last DPDK error, set by
 * the calls that return -1 or NULL (rte_eal_init, rte_pktmbuf_pool_create, ...). */
int rc_rte_errno(void);

#endif
