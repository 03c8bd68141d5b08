/* Lesson 9: survive a lost packet (retry_cnt and timeout).
 *
 *   make
 *   node1: ./lesson server [-d DEVICE] [-g GID_INDEX]
 *   node2: ./lesson client SERVER_IP [-d DEVICE] [-g GID_INDEX]
 *
 * The client RDMA WRITEs 4096 bytes (four packets) into the server's buffer, as in lesson 3,
 * while `labctl lesson check 9` drops its first 12 WRITE packets on the wire. Fill in the
 * two TODOs so that the client's queue pair sends the message again until it gets through;
 * the check says what is still wrong. */
#include "rdma_common.h"

#include <stdio.h>

/* TODO 1: how many times the client's QP sends a message again when no ACK comes, before
 * its work request completes with IBV_WC_RETRY_EXC_ERR. 3 bits: 0 to 7 (rxe takes 7 as
 * "for ever"). How many tries does the fault take from you? */
#define RETRY_CNT 1

/* TODO 2: how long it waits for that ACK: 4.096 us * 2^ACK_TIMEOUT (0: for ever, never
 * sent again). 10 is 4.2 ms, shorter than an ACK takes to come back in a slow lab: the
 * QP would send again what already arrived, and spend its retries on that. The client
 * waits 30 s for its completion in all. */
#define ACK_TIMEOUT 10

#define SERVER_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static void post_write(struct lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = (uint32_t)lab->bytes,
			       .lkey = lab->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = lab->peer.addr;
	wr.wr.rdma.rkey = lab->peer.rkey;
	check(ibv_post_send(lab->qp, &wr, &bad), "ibv_post_send");
}

int main(int argc, char **argv)
{
	struct lab lab;
	int is_server = argc > 1 && argv[1][0] == 's';

	lab_setup(&lab, argc, argv, is_server ? SERVER_ACCESS : IBV_ACCESS_LOCAL_WRITE);
	/* lab_connect() puts these in the QP's attributes when it moves it to RTS */
	lab.retry_cnt = RETRY_CNT;
	lab.timeout = ACK_TIMEOUT;
	lab_connect(&lab);
	if (lab.is_server) {  /* no receive, no completion: the client says when it is done */
		expect_line(&lab, "done");
		print_digest(lab.buf, lab.bytes);
	} else {
		for (size_t i = 0; i < lab.bytes; i++)
			lab.buf[i] = pattern(i);
		post_write(&lab);
		wait_completion(lab.cq);
		say(&lab, "done");
		printf("wrote %zu bytes\n", lab.bytes);
	}
	return 0;
}
