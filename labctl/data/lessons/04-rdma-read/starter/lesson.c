/* Lesson 4: one-sided RDMA READ.
 *
 *   make
 *   node1: ./lesson server [-d DEVICE] [-g GID_INDEX]
 *   node2: ./lesson client SERVER_IP [-d DEVICE] [-g GID_INDEX]
 *
 * Fill in the two TODOs; `labctl lesson check 4` says what is still wrong. */
#include "rdma_common.h"

#include <stdio.h>

/* The server's buffer: the peer may read it. */
/* TODO 1: let the peer read this buffer too. */
#define SERVER_ACCESS (IBV_ACCESS_LOCAL_WRITE)

/* The client: read the server's whole buffer into its own, from the address and with the
 * key the server sent. */
static void post_read(struct lab *lab)
{
	/* TODO 2: a struct ibv_send_wr with opcode IBV_WR_RDMA_READ whose sge is the whole
	 * local buffer (where the bytes land), its wr.rdma.remote_addr and wr.rdma.rkey from
	 * lab->peer (where they come from), IBV_SEND_SIGNALED, posted on lab->qp. */
	(void)lab;
	todo("RDMA READ the server's whole buffer into this one (IBV_WR_RDMA_READ)");
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
