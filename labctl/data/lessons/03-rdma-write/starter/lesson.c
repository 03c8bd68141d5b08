/* Lesson 3: one-sided RDMA WRITE.
 *
 *   make
 *   node1: ./lesson server [-d DEVICE] [-g GID_INDEX]
 *   node2: ./lesson client SERVER_IP [-d DEVICE] [-g GID_INDEX]
 *
 * Fill in the two TODOs; `labctl lesson check 3` says what is still wrong. */
#include "rdma_common.h"

#include <stdio.h>

/* The server's buffer: the peer may write into it. */
/* TODO 1: let the peer write into this buffer too. */
#define SERVER_ACCESS (IBV_ACCESS_LOCAL_WRITE)

/* The client: write the whole buffer into the server's, at the address and with the key
 * the server sent. */
static void post_write(struct lab *lab)
{
	/* TODO 2: a struct ibv_send_wr with opcode IBV_WR_RDMA_WRITE for the whole buffer,
	 * its wr.rdma.remote_addr and wr.rdma.rkey from lab->peer, IBV_SEND_SIGNALED,
	 * posted on lab->qp. */
	(void)lab;
	todo("RDMA WRITE the whole buffer into the server's (IBV_WR_RDMA_WRITE)");
}

int main(int argc, char **argv)
{
	struct lab lab;
	int is_server = argc > 1 && argv[1][0] == 's';

	lab_setup(&lab, argc, argv, is_server ? SERVER_ACCESS : IBV_ACCESS_LOCAL_WRITE);
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
