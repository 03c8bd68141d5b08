/* Lesson 2: register memory and SEND a message on RC.
 *
 *   make
 *   node1: ./lesson server [-d DEVICE] [-g GID_INDEX]
 *   node2: ./lesson client SERVER_IP [-d DEVICE] [-g GID_INDEX]
 *
 * Fill in the two TODOs; `labctl lesson check 2` says what is still wrong. */
#include "rdma_common.h"

#include <stdio.h>

/* The server: a receive for the whole buffer, for the client's SEND to land in. */
static void post_receive(struct lab *lab)
{
	/* TODO 1: describe the whole buffer (lab->buf, lab->bytes, lab->mr->lkey) in a
	 * struct ibv_sge, put it in a struct ibv_recv_wr and post it on lab->qp. */
	(void)lab;
	todo("post a receive for the whole buffer (ibv_post_recv)");
}

/* The client: SEND the whole buffer. */
static void post_send(struct lab *lab)
{
	/* TODO 2: the same buffer in a struct ibv_send_wr with opcode IBV_WR_SEND and
	 * IBV_SEND_SIGNALED (so that the SEND makes a completion), posted on lab->qp. */
	(void)lab;
	todo("SEND the whole buffer (ibv_post_send with IBV_WR_SEND)");
}

int main(int argc, char **argv)
{
	struct lab lab;

	lab_setup(&lab, argc, argv, IBV_ACCESS_LOCAL_WRITE);
	if (lab.is_server)
		post_receive(&lab);  /* before the client hears "ready" */
	lab_connect(&lab);
	if (lab.is_server) {
		struct ibv_wc wc = wait_completion(lab.cq);

		if (wc.opcode != IBV_WC_RECV)
			fail("the completion is not a receive's");
		expect_line(&lab, "done");
		print_digest(lab.buf, lab.bytes);
	} else {
		for (size_t i = 0; i < lab.bytes; i++)
			lab.buf[i] = pattern(i);
		post_send(&lab);
		wait_completion(lab.cq);
		say(&lab, "done");
		printf("sent %zu bytes\n", lab.bytes);
	}
	return 0;
}
