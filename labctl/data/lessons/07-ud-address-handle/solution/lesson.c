/* Lesson 7: a datagram on UD through an address handle (the reference answer). */
#include "rdma_common.h"

#include <stdio.h>
#include <string.h>

/* What the client sends, and the server prints after "message: ". */
#define MESSAGE "hello through an address handle"
/* How long the server waits for the datagram once the client has sent it. */
#define DATAGRAM_SECONDS 10

/* The server: a receive for one datagram. On UD the device writes the 40-byte GRH first,
 * then the payload: the buffer must hold both. */
static void post_receive(struct lab *lab)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf,
			       .length = GRH_BYTES + sizeof(MESSAGE), .lkey = lab->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

	check(ibv_post_recv(lab->qp, &wr, &bad), "ibv_post_recv");
}

/* The client: an address handle for the server's port. On RoCE a packet is routed by
 * GIDs, so the handle has the GRH: the server's GID and the index of this node's own. */
static struct ibv_ah *server_ah(struct lab *lab)
{
	struct ibv_ah_attr attr = {
		.is_global = 1,
		.port_num = IB_PORT,
		.grh = { .dgid = lab->peer.gid, .sgid_index = (uint8_t)lab->gid_index,
			 .hop_limit = 1 },
	};
	struct ibv_ah *ah = ibv_create_ah(lab->pd, &attr);

	if (!ah)
		check(-1, "ibv_create_ah");
	return ah;
}

/* The client: SEND the message to the server's QP through the address handle. */
static void post_datagram(struct lab *lab, struct ibv_ah *ah)
{
	struct ibv_sge sge = { .addr = (uintptr_t)lab->buf, .length = sizeof(MESSAGE),
			       .lkey = lab->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = lab->peer.qpn;
	wr.wr.ud.remote_qkey = LAB_QKEY;
	check(ibv_post_send(lab->qp, &wr, &bad), "ibv_post_send");
}

int main(int argc, char **argv)
{
	struct lab lab;

	lab_setup_ud(&lab, argc, argv);
	if (lab.is_server)
		post_receive(&lab);  /* before the client hears "ready" */
	lab_connect(&lab);
	if (lab.is_server) {
		expect_line(&lab, "done");  /* the client's send completed: the datagram is out */
		/* nothing acknowledges a datagram: one the device dropped never completes */
		struct ibv_wc wc = wait_completion_within(lab.cq, DATAGRAM_SECONDS);

		if (wc.opcode != IBV_WC_RECV)
			fail("the completion is not a receive's");
		lab.buf[GRH_BYTES + sizeof(MESSAGE) - 1] = '\0';
		printf("message: %s\n", (const char *)lab.buf + GRH_BYTES);
	} else {
		struct ibv_ah *ah = server_ah(&lab);

		memcpy(lab.buf, MESSAGE, sizeof(MESSAGE));
		post_datagram(&lab, ah);
		wait_completion(lab.cq);
		say(&lab, "done");
		printf("sent %zu bytes\n", sizeof(MESSAGE));
		ibv_destroy_ah(ah);
	}
	return 0;
}
