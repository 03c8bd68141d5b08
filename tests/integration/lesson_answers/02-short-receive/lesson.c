/* Lesson 2: register memory and SEND a message on RC (the reference answer). */
#include "rdma_common.h"

#include <stdio.h>

/* The server: a receive for the whole buffer, for the client's SEND to land in. */
static void post_receive(struct lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = 1024,  /* wrong: too short */
			       .lkey = lab->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

	check(ibv_post_recv(lab->qp, &wr, &bad), "ibv_post_recv");
}

/* The client: SEND the whole buffer. */
static void post_send(struct lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = (uint32_t)lab->bytes,
			       .lkey = lab->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	check(ibv_post_send(lab->qp, &wr, &bad), "ibv_post_send");
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
