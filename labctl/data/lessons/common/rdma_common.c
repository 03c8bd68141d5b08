/* rdma_common: see rdma_common.h. */
#define _GNU_SOURCE
#include "rdma_common.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_BYTES (1u << 20)
#define WAIT_SECONDS 30
#define LINE_MAX_BYTES 128

void fail(const char *what)
{
	fprintf(stderr, "lesson: %s\n", what);
	exit(1);
}

void check(int rc, const char *what)
{
	if (!rc)
		return;
	if (rc != -1)  /* some verbs return the errno value itself, positive or negative */
		errno = rc < 0 ? -rc : rc;
	fprintf(stderr, "lesson: %s: %s\n", what, strerror(errno));
	exit(1);
}

void todo(const char *what)
{
	fprintf(stderr, "TODO: %s\n", what);
	exit(1);
}

unsigned char pattern(size_t i)
{
	return (unsigned char)(i % 251);
}

void print_digest(const unsigned char *buf, size_t bytes)
{
	uint64_t hash = 0xcbf29ce484222325ULL;  /* FNV-1a, 64 bits */

	for (size_t i = 0; i < bytes; i++) {
		hash ^= buf[i];
		hash *= 0x100000001b3ULL;
	}
	printf("buffer %zu bytes fnv1a64 %016llx\n", bytes, (unsigned long long)hash);
	fflush(stdout);
}

struct ibv_context *open_device(const char *name)
{
	int count;
	struct ibv_device **list = ibv_get_device_list(&count);
	struct ibv_context *ctx = NULL;

	if (!list)
		fail("ibv_get_device_list failed");
	for (int i = 0; i < count && !ctx; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		fail(name ? "no such RDMA device (see ibv_devices)" : "no RDMA device");
	return ctx;
}

static void read_line(int fd, char *line, size_t size)
{
	size_t n = 0;

	for (;;) {
		char c;
		ssize_t got = read(fd, &c, 1);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			fail("the peer closed the TCP connection");
		if (c == '\n')
			break;
		if (n + 1 >= size)
			fail("the peer sent a line too long");
		line[n++] = c;
	}
	line[n] = '\0';
}

void say(struct lab *lab, const char *line)
{
	char text[LINE_MAX_BYTES];
	size_t len = (size_t)snprintf(text, sizeof(text), "%s\n", line);
	const char *p = text;

	while (len) {
		ssize_t put = write(lab->fd, p, len);

		if (put < 0 && errno == EINTR)
			continue;
		if (put <= 0)
			fail("cannot write to the peer");
		p += put;
		len -= (size_t)put;
	}
}

void expect_line(struct lab *lab, const char *line)
{
	char got[LINE_MAX_BYTES];

	read_line(lab->fd, got, sizeof(got));
	if (strcmp(got, line)) {
		fprintf(stderr, "lesson: the peer said \"%s\", not \"%s\"\n", got, line);
		exit(1);
	}
}

static int tcp_connection(const char *server_ip, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = server_ip ? 0 : AI_PASSIVE };
	struct addrinfo *ai;
	int one = 1, fd, conn;

	if (getaddrinfo(server_ip, port, &hints, &ai))
		fail("cannot resolve the server's address or the port");
	fd = socket(ai->ai_family, ai->ai_socktype, 0);
	if (fd < 0)
		fail("socket failed");
	if (server_ip) {
		if (connect(fd, ai->ai_addr, ai->ai_addrlen))
			fail("cannot connect to the server over TCP");
		freeaddrinfo(ai);
		return fd;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1))
		fail("cannot listen on the TCP port");
	freeaddrinfo(ai);
	conn = accept(fd, NULL, NULL);
	if (conn < 0)
		fail("accept failed");
	close(fd);
	return conn;
}

static void usage(void)
{
	fprintf(stderr, "usage: lesson server | client SERVER_IP  [-d DEVICE] [-g GID_INDEX] "
			"[-p PORT] [-n BYTES]\n");
	exit(2);
}

static const char *server_ip, *tcp_port = "18515";

static void setup(struct lab *lab, int argc, char **argv, unsigned int access,
		  enum ibv_qp_type qp_type)
{
	const char *device = NULL;
	int opt;

	memset(lab, 0, sizeof(*lab));
	lab->gid_index = 1;
	lab->bytes = 4096;
	lab->timeout = 14;  /* 67 ms */
	lab->retry_cnt = 7;
	if (argc < 2)
		usage();
	lab->is_server = !strcmp(argv[1], "server");
	if (!lab->is_server && strcmp(argv[1], "client"))
		usage();
	if (!lab->is_server) {
		if (argc < 3)
			usage();
		server_ip = argv[2];
	}
	optind = lab->is_server ? 2 : 3;
	while ((opt = getopt(argc, argv, "d:g:p:n:")) != -1) {
		switch (opt) {
		case 'd': device = optarg; break;
		case 'g': lab->gid_index = atoi(optarg); break;
		case 'p': tcp_port = optarg; break;
		case 'n': lab->bytes = strtoul(optarg, NULL, 0); break;
		default: usage();
		}
	}
	if (optind != argc || lab->gid_index < 0 || lab->gid_index > 255 || !lab->bytes ||
	    lab->bytes > MAX_BYTES)
		usage();

	lab->ctx = open_device(device);
	check(ibv_query_port(lab->ctx, IB_PORT, &lab->port), "ibv_query_port");
	if (lab->port.state != IBV_PORT_ACTIVE)
		fail("the port is not ACTIVE");
	lab->pd = ibv_alloc_pd(lab->ctx);
	lab->cq = ibv_create_cq(lab->ctx, 4, NULL, NULL, 0);
	lab->buf = calloc(1, lab->bytes);
	if (!lab->pd || !lab->cq || !lab->buf)
		fail("cannot allocate the PD, the CQ or the buffer");
	lab->mr = ibv_reg_mr(lab->pd, lab->buf, lab->bytes, access);
	if (!lab->mr)
		check(-1, "ibv_reg_mr");

	struct ibv_qp_init_attr init = {
		.send_cq = lab->cq, .recv_cq = lab->cq, .qp_type = qp_type,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	lab->qp = ibv_create_qp(lab->pd, &init);
	if (!lab->qp)
		check(-1, "ibv_create_qp");
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .port_num = IB_PORT,
				    .qp_access_flags = access & ~IBV_ACCESS_LOCAL_WRITE,
				    .qkey = LAB_QKEY };
	check(ibv_modify_qp(lab->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    (qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS)),
	      "modify the QP to INIT");
}

void lab_setup(struct lab *lab, int argc, char **argv, unsigned int access)
{
	setup(lab, argc, argv, access, IBV_QPT_RC);
}

void lab_setup_ud(struct lab *lab, int argc, char **argv)
{
	setup(lab, argc, argv, IBV_ACCESS_LOCAL_WRITE, IBV_QPT_UD);
}

/* A UD QP: RTR and RTS with no peer in them; each send names its own (an address handle,
 * the remote QPN and Q_Key). */
static void ud_ready(struct lab *lab)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RTR };

	check(ibv_modify_qp(lab->qp, &attr, IBV_QP_STATE), "modify the QP to RTR");
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = lab->me.psn;
	check(ibv_modify_qp(lab->qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN),
	      "modify the QP to RTS");
}

static void send_me(struct lab *lab)
{
	char line[LINE_MAX_BYTES];
	int n = snprintf(line, sizeof(line), "%06x:%06x:", lab->me.qpn, lab->me.psn);

	for (int i = 0; i < 16; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", lab->me.gid.raw[i]);
	snprintf(line + n, sizeof(line) - (size_t)n, ":%016llx:%08x",
		 (unsigned long long)lab->me.addr, lab->me.rkey);
	say(lab, line);
}

static void recv_peer(struct lab *lab)
{
	char line[LINE_MAX_BYTES], gid[33];
	unsigned long long addr;
	struct peer *peer = &lab->peer;

	read_line(lab->fd, line, sizeof(line));
	if (sscanf(line, "%6x:%6x:%32[0-9a-f]:%16llx:%8x", &peer->qpn, &peer->psn, gid, &addr,
		   &peer->rkey) != 5 || strlen(gid) != 32)
		fail("the peer's line is not QPN:PSN:GID:ADDR:RKEY");
	peer->addr = addr;
	for (int i = 0; i < 16; i++) {
		unsigned int byte;

		sscanf(gid + 2 * i, "%2x", &byte);
		peer->gid.raw[i] = (uint8_t)byte;
	}
}

/* An RC QP: connected to the peer's in RTR, able to send in RTS. */
static void rc_ready(struct lab *lab)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = lab->port.active_mtu,
		.dest_qp_num = lab->peer.qpn,
		.rq_psn = lab->peer.psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.port_num = IB_PORT,
			.grh = { .dgid = lab->peer.gid, .sgid_index = (uint8_t)lab->gid_index,
				 .hop_limit = 1 },
		},
	};
	check(ibv_modify_qp(lab->qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER), "modify the QP to RTR");
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = lab->timeout;
	attr.retry_cnt = lab->retry_cnt;
	/* 7 would retry for ever: a SEND nobody posted a receive for must fail, not hang */
	attr.rnr_retry = 6;
	attr.sq_psn = lab->me.psn;
	attr.max_rd_atomic = 1;
	check(ibv_modify_qp(lab->qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "modify the QP to RTS");
}

void lab_connect(struct lab *lab)
{
	lab->me.qpn = lab->qp->qp_num;
	srand48(getpid() * time(NULL));
	lab->me.psn = (uint32_t)lrand48() & 0xffffff;
	lab->me.addr = (uintptr_t)lab->buf;
	lab->me.rkey = lab->mr->rkey;
	check(ibv_query_gid(lab->ctx, IB_PORT, lab->gid_index, &lab->me.gid), "ibv_query_gid");

	lab->fd = tcp_connection(lab->is_server ? NULL : server_ip, tcp_port);
	if (lab->is_server) {
		recv_peer(lab);
		send_me(lab);
	} else {
		send_me(lab);
		recv_peer(lab);
	}
	if (lab->qp->qp_type == IBV_QPT_UD)
		ud_ready(lab);
	else
		rc_ready(lab);
	if (lab->is_server)
		say(lab, "ready");
	else
		expect_line(lab, "ready");
}

struct ibv_wc wait_completion(struct ibv_cq *cq)
{
	return wait_completion_within(cq, WAIT_SECONDS);
}

struct ibv_wc wait_completion_within(struct ibv_cq *cq, int seconds)
{
	struct timespec start, now;
	struct ibv_wc wc;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			fail("ibv_poll_cq failed");
		if (n == 1)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= seconds) {
			fprintf(stderr, "lesson: no completion within %d s\n", seconds);
			exit(1);
		}
	}
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "lesson: a work request completed with %s\n",
			ibv_wc_status_str(wc.status));
		exit(1);
	}
	return wc;
}
