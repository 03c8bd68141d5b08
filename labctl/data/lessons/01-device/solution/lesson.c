/* Lesson 1: open an RDMA device and ask it what it is (the reference answer). */
#include "rdma_common.h"

#include <endian.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

/* ibv_devinfo's own names (ibv_port_state_str() says "active", not "PORT_ACTIVE"). */
static const char *port_state_name(enum ibv_port_state state)
{
	static const char *names[] = { "PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED",
				       "PORT_ACTIVE", "PORT_ACTIVE_DEFER" };

	return (unsigned)state < sizeof(names) / sizeof(names[0]) ? names[state] :
								     "invalid state";
}

int main(int argc, char **argv)
{
	const char *device = NULL;
	int opt;

	while ((opt = getopt(argc, argv, "d:")) != -1) {
		if (opt != 'd') {
			fprintf(stderr, "usage: lesson [-d DEVICE]\n");
			return 2;
		}
		device = optarg;
	}
	struct ibv_context *ctx = open_device(device);
	struct ibv_device_attr dev;
	struct ibv_port_attr port;

	check(ibv_query_device(ctx, &dev), "ibv_query_device");
	check(ibv_query_port(ctx, IB_PORT, &port), "ibv_query_port");

	uint64_t guid = be64toh(dev.node_guid);  /* stored in network byte order */

	printf("hca_id: %s\n", ibv_get_device_name(ctx->device));
	printf("node_guid: %04x:%04x:%04x:%04x\n", (unsigned)(guid >> 48) & 0xffff,
	       (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
	       (unsigned)guid & 0xffff);
	printf("max_qp: %d\n", dev.max_qp);
	printf("max_cqe: %d\n", dev.max_cqe);
	printf("state: %s (%d)\n", port_state_name(port.state), port.state);
	printf("active_mtu: %d (%d)\n", 128 << port.active_mtu, port.active_mtu);
	ibv_close_device(ctx);
	return 0;
}
