/* Lesson 8: connect with RDMA CM instead of exchanging QP numbers.
 *
 *   make
 *   node1: ./lesson server [-p PORT]
 *   node2: ./lesson client SERVER_IP [-p PORT]
 *
 * Everything but the connection is written: the queue pair (make_qp), the receive, the
 * SEND, RDMA CM's events (next_event). Fill in the two TODOs; `labctl lesson check 8`
 * says what is still wrong. */
#include "rdma_common.h"

#include <arpa/inet.h>  /* inet_pton, for TODO 2 */
#include <getopt.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVENT_SECONDS 60      /* the server waits this long for the client's request */
#define RESOLVE_MS 5000       /* rdma_resolve_addr's and rdma_resolve_route's own bound */

struct cm_lab {
	int is_server;
	const char *server_ip;
	uint16_t port;
	size_t bytes;
	struct rdma_event_channel *channel;  /* where RDMA CM's events come */
	struct rdma_cm_id *listener;         /* the server's listening id */
	struct rdma_cm_id *id;               /* the connection's id: its QP is id->qp */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	unsigned char *buf;
	struct ibv_mr *mr;
};

/* server | client SERVER_IP [-d DEVICE] [-g GID_INDEX] [-p PORT] [-n BYTES]: RDMA CM picks
 * the device and the GID from the IP address, so -d and -g are taken and not needed. */
static void parse_args(struct cm_lab *lab, int argc, char **argv)
{
	int opt, port = 18515;

	memset(lab, 0, sizeof(*lab));
	lab->bytes = 4096;
	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")))
		fail("usage: lesson server | client SERVER_IP [-d DEVICE] [-g GID_INDEX] [-p PORT]");
	lab->is_server = !strcmp(argv[1], "server");
	if (!lab->is_server && argc < 3)
		fail("the client needs the server's IP address");
	lab->server_ip = lab->is_server ? NULL : argv[2];
	optind = lab->is_server ? 2 : 3;
	while ((opt = getopt(argc, argv, "d:g:p:n:")) != -1) {
		if (opt == 'p')
			port = atoi(optarg);
		else if (opt == 'n')
			lab->bytes = strtoul(optarg, NULL, 0);
		else if (opt != 'd' && opt != 'g')
			fail("unknown option");
	}
	if (port < 1 || port > 65535 || !lab->bytes || lab->bytes > (1u << 20))
		fail("-p must be a port, -n 1 to 1048576");
	lab->port = (uint16_t)port;
	lab->channel = rdma_create_event_channel();
	if (!lab->channel)
		check(-1, "rdma_create_event_channel");
}

/* The next RDMA CM event, which must be `want` (else exit 1 naming what came instead).
 * The caller acknowledges it with rdma_ack_cm_event when done with it. */
static struct rdma_cm_event *next_event(struct cm_lab *lab, enum rdma_cm_event_type want)
{
	struct pollfd ready = { .fd = lab->channel->fd, .events = POLLIN };
	struct rdma_cm_event *event;

	if (poll(&ready, 1, EVENT_SECONDS * 1000) != 1) {
		fprintf(stderr, "lesson: no RDMA CM event within %d s (waiting for %s)\n",
			EVENT_SECONDS, rdma_event_str(want));
		exit(1);
	}
	check(rdma_get_cm_event(lab->channel, &event), "rdma_get_cm_event");
	if (event->event != want) {
		fprintf(stderr, "lesson: RDMA CM said %s (status %d), not %s\n",
			rdma_event_str(event->event), event->status, rdma_event_str(want));
		exit(1);
	}
	return event;
}

/* PD, CQ and buffer on the device RDMA CM chose for lab->id, and the id's RC queue pair
 * (rdma_create_qp: RDMA CM moves it through INIT, RTR and RTS itself). */
static void make_qp(struct cm_lab *lab)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
	};

	lab->pd = ibv_alloc_pd(lab->id->verbs);
	lab->cq = ibv_create_cq(lab->id->verbs, 4, NULL, NULL, 0);
	lab->buf = calloc(1, lab->bytes);
	if (!lab->pd || !lab->cq || !lab->buf)
		fail("cannot allocate the PD, the CQ or the buffer");
	lab->mr = ibv_reg_mr(lab->pd, lab->buf, lab->bytes, IBV_ACCESS_LOCAL_WRITE);
	if (!lab->mr)
		check(-1, "ibv_reg_mr");
	init.send_cq = init.recv_cq = lab->cq;
	check(rdma_create_qp(lab->id, lab->pd, &init), "rdma_create_qp");
}

static void post_receive(struct cm_lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = (uint32_t)lab->bytes,
			       .lkey = lab->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

	check(ibv_post_recv(lab->id->qp, &wr, &bad), "ibv_post_recv");
}

static void post_send(struct cm_lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = (uint32_t)lab->bytes,
			       .lkey = lab->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	check(ibv_post_send(lab->id->qp, &wr, &bad), "ibv_post_send");
}

/* What both sides ask of the connection: one READ or atomic in flight each way, retries
 * as rdma_common's, and an RNR retry count that gives up rather than retrying for ever. */
static struct rdma_conn_param conn_param(void)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 6 };
	return param;
}

/* The server: listen on the port, take the client's request, accept it with a queue pair
 * that already has its receive posted. */
static void cm_listen_and_accept(struct cm_lab *lab)
{
	/* TODO 1: an id on lab->channel (rdma_create_id, RDMA_PS_TCP) in lab->listener,
	 * bound to any address on lab->port (rdma_bind_addr with a struct sockaddr_in) and
	 * listening (rdma_listen). Then wait for RDMA_CM_EVENT_CONNECT_REQUEST (next_event):
	 * its event->id is the connection's id, lab->id; acknowledge the event
	 * (rdma_ack_cm_event). Make the queue pair on it (make_qp), post the receive
	 * (post_receive), accept (rdma_accept with conn_param()) and wait for
	 * RDMA_CM_EVENT_ESTABLISHED. */
	(void)lab, (void)next_event, (void)make_qp, (void)post_receive, (void)conn_param;
	todo("listen for the client with RDMA CM (rdma_create_id, rdma_bind_addr, rdma_listen)");
}

/* The client: the server's IP address to a device and a GID (resolve_addr), a route to it
 * (resolve_route), then the queue pair and the connection. */
static void cm_connect(struct cm_lab *lab)
{
	/* TODO 2: an id on lab->channel in lab->id (rdma_create_id, RDMA_PS_TCP); the
	 * server's address (a struct sockaddr_in of lab->server_ip, inet_pton, and lab->port)
	 * resolved (rdma_resolve_addr, RESOLVE_MS, then wait for RDMA_CM_EVENT_ADDR_RESOLVED)
	 * and a route to it (rdma_resolve_route, RDMA_CM_EVENT_ROUTE_RESOLVED), acknowledging
	 * each event. Then the queue pair (make_qp) and the connection (rdma_connect with
	 * conn_param(), RDMA_CM_EVENT_ESTABLISHED). */
	(void)lab;
	todo("connect to the server with RDMA CM (rdma_resolve_addr, rdma_resolve_route, "
	     "rdma_connect)");
}

int main(int argc, char **argv)
{
	struct cm_lab lab;

	parse_args(&lab, argc, argv);
	if (lab.is_server) {
		cm_listen_and_accept(&lab);
		wait_completion(lab.cq);  /* the client's SEND landed in the receive */
		print_digest(lab.buf, lab.bytes);
		rdma_ack_cm_event(next_event(&lab, RDMA_CM_EVENT_DISCONNECTED));
	} else {
		cm_connect(&lab);
		for (size_t i = 0; i < lab.bytes; i++)
			lab.buf[i] = pattern(i);
		post_send(&lab);
		wait_completion(lab.cq);
		printf("sent %zu bytes\n", lab.bytes);
		check(rdma_disconnect(lab.id), "rdma_disconnect");
	}
	return 0;
}
