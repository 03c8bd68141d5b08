/*
 * rdma_common: what every two-node lesson program shares, so that a lesson's own file
 * holds only the step the lesson teaches. Read it: nothing here is hidden magic.
 *
 *   - open a device and check its port is ACTIVE
 *   - a protection domain, a completion queue, a registered buffer and an RC QP
 *   - swap "QPN:PSN:GID:ADDR:RKEY" lines with the peer over TCP (the out-of-band channel
 *     every verbs program without RDMA CM needs), then move the QP to RTR and RTS
 *   - wait for one completion, bounded
 *   - the pattern the client sends and the digest the server prints of its buffer
 */
#ifndef RDMA_COMMON_H
#define RDMA_COMMON_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#define IB_PORT 1
/* The Q_Key of the lessons' UD queue pairs: a datagram is taken only with its QP's Q_Key. */
#define LAB_QKEY 0x11111111
/* A UD receive starts with the 40 bytes of the Global Route Header before the payload. */
#define GRH_BYTES 40

struct peer {
	uint32_t qpn;
	uint32_t psn;
	union ibv_gid gid;
	uint64_t addr;  /* the peer's buffer: where a one-sided operation goes */
	uint32_t rkey;  /* and the key that lets it */
};

struct lab {
	int is_server;
	int gid_index;
	size_t bytes;
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	unsigned char *buf;
	struct ibv_mr *mr;
	struct peer me, peer;
	int fd;  /* the TCP connection to the peer */
	/* An RC QP's retransmission, set in RTS: wait 4.096 us * 2^timeout for an ACK, then
	 * send again, at most retry_cnt times (lab_setup: 14 and 7; lesson 9 sets its own). */
	uint8_t timeout, retry_cnt;
};

/* Print "lesson: WHAT" to stderr and exit 1. */
void fail(const char *what);
/* A verbs call's result: 0, or exit with its error. */
void check(int rc, const char *what);
/* A starter's unwritten step: print "TODO: WHAT" to stderr and exit 1. */
void todo(const char *what);

struct ibv_context *open_device(const char *name);
/* argv: server|client SERVER_IP [-d DEVICE] [-g GID_INDEX] [-p PORT] [-n BYTES] */
void lab_setup(struct lab *lab, int argc, char **argv, unsigned int access);
/* The same with a UD QP (Q_Key LAB_QKEY) in place of the RC one. */
void lab_setup_ud(struct lab *lab, int argc, char **argv);
/* Swap QP lines with the peer, connect the QP (RTR, RTS); the server then says "ready".
 * A UD QP is connected to nobody: it only swaps the lines and moves to RTR and RTS. */
void lab_connect(struct lab *lab);
/* One completion, successful, within 30 s (or `seconds`); else exit 1. */
struct ibv_wc wait_completion(struct ibv_cq *cq);
struct ibv_wc wait_completion_within(struct ibv_cq *cq, int seconds);
/* The out-of-band channel: one line each way. */
void say(struct lab *lab, const char *line);
void expect_line(struct lab *lab, const char *line);
unsigned char pattern(size_t i);
/* "buffer N bytes fnv1a64 HEX": what the server's buffer holds at the end. */
void print_digest(const unsigned char *buf, size_t bytes);

#endif
