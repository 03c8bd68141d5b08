/* Lesson 5: RDMA WRITE with immediate (the reference answer). */
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
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = NULL, .num_sge = 0 }, *bad;

	check(ibv_post_recv(lab->qp, &wr, &bad), "ibv_post_recv");
}

/* The client: write the whole buffer into the server's, with IMMEDIATE. */
static void post_write_imm(struct lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = (uint32_t)lab->bytes,
			       .lkey = lab->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.imm_data = htonl(IMMEDIATE);  /* it travels in network byte order */
	wr.wr.rdma.remote_addr = lab->peer.addr;
	wr.wr.rdma.rkey = lab->peer.rkey;
	check(ibv_post_send(lab->qp, &wr, &bad), "ibv_post_send");
}

/* The server: the immediate its receive's completion carries, in host byte order. */
static uint32_t immediate_of(const struct ibv_wc *wc)
{
	if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM))
		fail("the completion is not a WRITE with immediate's");
	return ntohl(wc->imm_data);
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
