/* Lesson 4: one-sided RDMA READ (the reference answer). */
#include "rdma_common.h"

#include <stdio.h>

/* The server's buffer: the peer may read it. */
#define SERVER_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)

/* The client: read the server's whole buffer into its own, from the address and with the
 * key the server sent. */
static void post_read(struct lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = (uint32_t)lab->bytes,
			       .lkey = lab->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 4, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ,
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
	if (lab.is_server)  /* the bytes the client reads, there before it may */
		for (size_t i = 0; i < lab.bytes; i++)
			lab.buf[i] = pattern(i);
	lab_connect(&lab);
	if (lab.is_server) {  /* no receive, no completion: the client says when it is done */
		expect_line(&lab, "done");
		printf("served %zu bytes\n", lab.bytes);
	} else {
		post_read(&lab);
		wait_completion(lab.cq);
		say(&lab, "done");
		print_digest(lab.buf, lab.bytes);
	}
	return 0;
}
