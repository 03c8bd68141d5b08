/* Lesson 5: RDMA WRITE with immediate.
 *
 *   make
 *   node1: ./lesson server [-d DEVICE] [-g GID_INDEX]
 *   node2: ./lesson client SERVER_IP [-d DEVICE] [-g GID_INDEX]
 *
 * Fill in the three TODOs; `labctl lesson check 5` says what is still wrong. */
#include "rdma_common.h"

#include <arpa/inet.h>
#include <stdio.h>

/* The server's buffer: the peer may write into it. */
#define SERVER_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
/* The 32 bits the client sends along with its bytes. */
#define IMMEDIATE 0xc0de0005u

/* The server: a receive for the immediate to complete. It names no buffer: the bytes go
 * where the WRITE says, only the immediate comes through the receive. */
static void post_receive(struct lab *lab)
{
	/* TODO 1: a struct ibv_recv_wr with no sge (num_sge 0), posted with ibv_post_recv on
	 * lab->qp: the WRITE with immediate consumes it. */
	(void)lab;
	todo("post a receive for the immediate (ibv_post_recv)");
}

/* The client: write the whole buffer into the server's, with IMMEDIATE. */
static void post_write_imm(struct lab *lab)
{
	/* TODO 2: like lesson 3's RDMA WRITE (the whole buffer, lab->peer's address and rkey,
	 * IBV_SEND_SIGNALED), with opcode IBV_WR_RDMA_WRITE_WITH_IMM and wr.imm_data set to
	 * IMMEDIATE in network byte order (htonl). */
	(void)lab;
	todo("RDMA WRITE the whole buffer with IMMEDIATE (IBV_WR_RDMA_WRITE_WITH_IMM)");
}

/* The server: the immediate its receive's completion carries, in host byte order. */
static uint32_t immediate_of(const struct ibv_wc *wc)
{
	/* TODO 3: check the completion is a WRITE with immediate's (wc->opcode is
	 * IBV_WC_RECV_RDMA_WITH_IMM, wc->wc_flags has IBV_WC_WITH_IMM) and return
	 * wc->imm_data in host byte order (ntohl). */
	(void)wc;
	todo("the immediate from the receive's completion (wc->imm_data)");
	return 0;
}

int main(int argc, char **argv)
{
	struct lab lab;
	int is_server = argc > 1 && argv[1][0] == 's';

	lab_setup(&lab, argc, argv, is_server ? SERVER_ACCESS : IBV_ACCESS_LOCAL_WRITE);
	if (lab.is_server)
		post_receive(&lab);  /* before the client hears "ready" */
	lab_connect(&lab);
	if (lab.is_server) {
		struct ibv_wc wc = wait_completion(lab.cq);

		printf("immediate 0x%08x\n", immediate_of(&wc));
		print_digest(lab.buf, lab.bytes);
		expect_line(&lab, "done");
	} else {
		for (size_t i = 0; i < lab.bytes; i++)
			lab.buf[i] = pattern(i);
		post_write_imm(&lab);
		wait_completion(lab.cq);
		say(&lab, "done");
		printf("wrote %zu bytes with immediate 0x%08x\n", lab.bytes, IMMEDIATE);
	}
	return 0;
}
