/*
 * rc_send: one RC SEND of N bytes from a client to a server, over libibverbs.
 *
 *   server:  rc_send -s [-d DEVICE] [-g GID_INDEX] [-p PORT] [-n BYTES]
 *   client:  rc_send -c SERVER_IP [-d DEVICE] [-g GID_INDEX] [-p PORT] [-n BYTES]
 *
 * The two sides swap their QP number, first PSN and GID over a TCP connection (one text
 * line each: "QPN:PSN:GID", hex), move their QPs to RTR/RTS, and the client SENDs a
 * buffer filled with a known pattern into the receive the server posted. The server
 * checks length and pattern and prints "received N bytes ok"; the client prints
 * "sent N bytes ok" once the server confirmed over TCP. Exit status 0 only then.
 *
 * RoCE (rxe) needs the GID index of the port's RoCE v2 address: labctl shows it
 * (`labctl status`) and fills it into {gid_index}. iWARP (siw) QPs connect through RDMA
 * CM only, so this program is for rxe.
 *
 * Written for rdma-lab's workbench (docs/workbench.md); the same protocol in Python is
 * rc_send.py, and either side may be either program.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_BYTES (16u << 20)
#define WAIT_SECONDS 30

struct peer {
	uint32_t qpn;
	uint32_t psn;
	union ibv_gid gid;
};

static void die(const char *what)
{
	fprintf(stderr, "rc_send: %s: %s\n", what, errno ? strerror(errno) : "failed");
	exit(1);
}

/* A verbs call's result: 0, or an errno value (some return it, positive or negative;
 * -1 means the library set errno itself). */
static void check(int rc, const char *what)
{
	if (!rc)
		return;
	if (rc != -1)
		errno = rc < 0 ? -rc : rc;
	die(what);
}

static void fail(const char *what)
{
	fprintf(stderr, "rc_send: %s\n", what);
	exit(1);
}

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i % 251);
}

/* One line from the socket, without its newline; exits on EOF or a line too long. */
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

static void write_all(int fd, const char *text)
{
	size_t len = strlen(text);

	while (len) {
		ssize_t put = write(fd, text, len);

		if (put < 0 && errno == EINTR)
			continue;
		if (put <= 0)
			die("write to the peer");
		text += put;
		len -= (size_t)put;
	}
}

static void send_peer(int fd, const struct peer *me)
{
	char line[80];
	int n = snprintf(line, sizeof(line), "%06x:%06x:", me->qpn, me->psn);

	for (int i = 0; i < 16; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", me->gid.raw[i]);
	snprintf(line + n, sizeof(line) - (size_t)n, "\n");
	write_all(fd, line);
}

static void recv_peer(int fd, struct peer *peer)
{
	char line[80], gid[33];

	read_line(fd, line, sizeof(line));
	if (sscanf(line, "%6x:%6x:%32[0-9a-f]", &peer->qpn, &peer->psn, gid) != 3 ||
	    strlen(gid) != 32)
		fail("the peer's QP line is not QPN:PSN:GID");
	for (int i = 0; i < 16; i++) {
		unsigned int byte;

		sscanf(gid + 2 * i, "%2x", &byte);
		peer->gid.raw[i] = (uint8_t)byte;
	}
}

static int tcp_server(const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *ai;
	int one = 1, fd, conn;

	if (getaddrinfo(NULL, port, &hints, &ai))
		fail("bad port");
	fd = socket(ai->ai_family, ai->ai_socktype, 0);
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1))
		die("listen");
	freeaddrinfo(ai);
	conn = accept(fd, NULL, NULL);
	if (conn < 0)
		die("accept");
	close(fd);
	return conn;
}

static int tcp_client(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;
	int fd;

	if (getaddrinfo(host, port, &hints, &ai))
		fail("cannot resolve the server's address");
	fd = socket(ai->ai_family, ai->ai_socktype, 0);
	if (fd < 0)
		die("socket");
	if (connect(fd, ai->ai_addr, ai->ai_addrlen))
		die("connect to the server");
	freeaddrinfo(ai);
	return fd;
}

static struct ibv_context *open_device(const char *name)
{
	int count;
	struct ibv_device **list = ibv_get_device_list(&count);
	struct ibv_context *ctx = NULL;

	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; i < count && !ctx; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		fail(name ? "no such RDMA device (see ibv_devices)" : "no RDMA device");
	return ctx;
}

/* Wait (bounded) for one completion; exits unless it succeeded. */
static struct ibv_wc wait_completion(struct ibv_cq *cq)
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
		if (now.tv_sec - start.tv_sec > WAIT_SECONDS)
			fail("no completion within 30 s");
	}
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "rc_send: completion failed: %s\n", ibv_wc_status_str(wc.status));
		exit(1);
	}
	return wc;
}

static void to_init(struct ibv_qp *qp, uint8_t port)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .pkey_index = 0,
				    .port_num = port, .qp_access_flags = 0 };

	check(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS), "modify QP to INIT");
}

static void to_rtr_rts(struct ibv_qp *qp, uint8_t port, int gid_index, enum ibv_mtu mtu,
		       const struct peer *peer, uint32_t my_psn)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = peer->qpn,
		.rq_psn = peer->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.port_num = port,
			.grh = { .dgid = peer->gid, .sgid_index = (uint8_t)gid_index,
				 .hop_limit = 1 },
		},
	};

	check(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER), "modify QP to RTR");
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = my_psn;
	attr.max_rd_atomic = 1;
	check(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "modify QP to RTS");
}

static void usage(void)
{
	fprintf(stderr, "usage: rc_send -s | -c SERVER_IP  [-d DEVICE] [-g GID_INDEX] "
			"[-p PORT] [-n BYTES]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *server_ip = NULL, *device = NULL, *port = "18515";
	int is_server = 0, gid_index = 1, opt;
	unsigned long bytes = 4096;
	uint8_t ib_port = 1;

	while ((opt = getopt(argc, argv, "sc:d:g:p:n:")) != -1) {
		switch (opt) {
		case 's': is_server = 1; break;
		case 'c': server_ip = optarg; break;
		case 'd': device = optarg; break;
		case 'g': gid_index = atoi(optarg); break;
		case 'p': port = optarg; break;
		case 'n': bytes = strtoul(optarg, NULL, 0); break;
		default: usage();
		}
	}
	if (is_server == !!server_ip || optind != argc || gid_index < 0 || gid_index > 255 ||
	    bytes == 0 || bytes > MAX_BYTES)
		usage();

	struct ibv_context *ctx = open_device(device);
	struct ibv_port_attr port_attr;

	check(ibv_query_port(ctx, ib_port, &port_attr), "ibv_query_port");
	if (port_attr.state != IBV_PORT_ACTIVE)
		fail("the port is not ACTIVE");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	unsigned char *buf = calloc(1, bytes);
	struct ibv_cq *cq = ibv_create_cq(ctx, 2, NULL, NULL, 0);

	if (!pd || !buf || !cq)
		die("allocate PD, buffer and CQ");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, bytes, IBV_ACCESS_LOCAL_WRITE);

	if (!mr)
		die("ibv_reg_mr");
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);

	if (!qp)
		die("ibv_create_qp");
	to_init(qp, ib_port);

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)bytes,
			       .lkey = mr->lkey };
	if (is_server) {  /* the receive is posted before the client can send */
		struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

		check(ibv_post_recv(qp, &wr, &bad), "ibv_post_recv");
	}

	struct peer me = { .qpn = qp->qp_num }, peer;

	srand48(getpid() * time(NULL));
	me.psn = (uint32_t)lrand48() & 0xffffff;
	check(ibv_query_gid(ctx, ib_port, gid_index, &me.gid), "ibv_query_gid");

	int fd = is_server ? tcp_server(port) : tcp_client(server_ip, port);
	char line[16];

	if (is_server) {
		recv_peer(fd, &peer);
		send_peer(fd, &me);
	} else {
		send_peer(fd, &me);
		recv_peer(fd, &peer);
	}
	to_rtr_rts(qp, ib_port, gid_index, port_attr.active_mtu, &peer, me.psn);

	if (is_server) {
		write_all(fd, "ready\n");
		struct ibv_wc wc = wait_completion(cq);

		if (wc.opcode != IBV_WC_RECV || wc.byte_len != bytes)
			fail("the receive completed with a wrong opcode or length");
		for (size_t i = 0; i < bytes; i++)
			if (buf[i] != pattern(i))
				fail("the received bytes differ from the pattern");
		printf("received %lu bytes ok\n", bytes);
		fflush(stdout);
		write_all(fd, "done\n");
	} else {
		read_line(fd, line, sizeof(line));
		if (strcmp(line, "ready"))
			fail("the server did not say ready");
		for (size_t i = 0; i < bytes; i++)
			buf[i] = pattern(i);
		struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr *bad;

		check(ibv_post_send(qp, &wr, &bad), "ibv_post_send");
		wait_completion(cq);
		read_line(fd, line, sizeof(line));
		if (strcmp(line, "done"))
			fail("the server did not confirm the receive");
		printf("sent %lu bytes ok\n", bytes);
	}
	close(fd);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return 0;
}
