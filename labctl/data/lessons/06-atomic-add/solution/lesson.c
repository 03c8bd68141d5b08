/* Lesson 6: an atomic fetch-and-add (the reference answer). */
#include "rdma_common.h"

#include <stdio.h>
#include <string.h>

/* The server's buffer: the peer may run atomics on it. */
#define SERVER_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC)
/* The server's counter: the first 8 bytes of its buffer, starting at START. */
#define START 1000
/* What the client adds to it. */
#define ADD 24

/* The client: add ADD to the server's counter; the counter's value before the add comes
 * back into the first 8 bytes of the client's own buffer. */
static void post_fetch_add(struct lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = sizeof(uint64_t),
			       .lkey = lab->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 6, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.atomic.remote_addr = lab->peer.addr;
	wr.wr.atomic.rkey = lab->peer.rkey;
	wr.wr.atomic.compare_add = ADD;
	check(ibv_post_send(lab->qp, &wr, &bad), "ibv_post_send");
}

static uint64_t counter(const struct lab *lab)
{
	uint64_t value;

	memcpy(&value, lab->buf, sizeof(value));
	return value;
}

int main(int argc, char **argv)
{
	struct lab lab;
	int is_server = argc > 1 && argv[1][0] == 's';

	lab_setup(&lab, argc, argv, is_server ? SERVER_ACCESS : IBV_ACCESS_LOCAL_WRITE);
	if (lab.is_server) {  /* the counter, there before the client may add to it */
		uint64_t start = START;

		memcpy(lab.buf, &start, sizeof(start));
	}
	lab_connect(&lab);
	if (lab.is_server) {  /* no receive, no completion: the client says when it is done */
		expect_line(&lab, "done");
		printf("counter %llu\n", (unsigned long long)counter(&lab));
	} else {
		post_fetch_add(&lab);
		wait_completion(lab.cq);
		say(&lab, "done");
		printf("fetched %llu\n", (unsigned long long)counter(&lab));
	}
	return 0;
}
