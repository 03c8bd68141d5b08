/*
 * labctl-devinfo and labctl-devices in a node image: a compiled client of the
 * inspector's helper (labctl/verbs/helper.py), the same protocol as helper.call().
 *
 * Why C: under TCG, Python's own start costs 0.3-0.5 s in a node, three times what the C
 * ibv_devinfo takes in all; the helper answers in 0.05-0.08 s. This client starts in a few
 * milliseconds. The image builder compiles it (labctl/images/hooks/build.sh), so every node
 * booted from labctl's node image has it (qemu, container and labctl's Vagrant box); a
 * Vagrant node on another box keeps the Python wrapper, which speaks the same protocol.
 *
 * Run as labctl-TOOL (a symlink): sends "LVH1\0", then NUL-terminated fields (the number
 * of argv items, argv with the command first, the environment), with fds 1 and 2 passed
 * in the first chunk (SCM_RIGHTS); then reads "R <status>\n" (exit with it) or
 * "F <why>\n" (the helper ran nothing). Whenever the helper cannot run the command
 * (no socket, no listener, refused, fd 1 or 2 closed) it execs the Python wrapper
 * FALLBACK_DIR/labctl-TOOL (written by labctl/nodeside/node-commands.sh at each node
 * start), which runs the command itself: the same output, slower.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef SOCKET_PATH /* the tests build it with their own paths */
#define SOCKET_PATH "/run/labctl/verbs.sock"
#endif
#define MAGIC "LVH1"            /* followed by its NUL */
#define FIRST_CHUNK 65536       /* as helper.call(): the fds ride on the first sendmsg */
#define DIRECT_ENV "LABCTL_VERBS_DIRECT"
#ifndef FALLBACK_DIR
#define FALLBACK_DIR "/usr/local/lib/labctl"
#endif

extern char **environ;

struct buffer {
    char *data;
    size_t len, cap;
};

static int append(struct buffer *buf, const char *bytes, size_t len)
{
    if (buf->len + len > buf->cap) {
        size_t cap = buf->cap ? buf->cap : 4096;
        while (cap < buf->len + len)
            cap *= 2;
        char *data = realloc(buf->data, cap);
        if (!data)
            return -1;
        buf->data = data;
        buf->cap = cap;
    }
    memcpy(buf->data + buf->len, bytes, len);
    buf->len += len;
    return 0;
}

static int append_field(struct buffer *buf, const char *field)
{
    return append(buf, field, strlen(field) + 1);
}

static const char *tool_of(const char *argv0)
{
    const char *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    if (strncmp(base, "labctl-", 7) == 0)
        base += 7;
    if (strcmp(base, "devinfo") == 0 || strcmp(base, "devices") == 0)
        return base;
    return NULL;
}

/* Run the command without the helper: the Python wrapper for the same tool. */
static void fall_back(const char *tool, char **argv)
{
    char path[256];
    snprintf(path, sizeof path, "%s/labctl-%s", FALLBACK_DIR, tool);
    argv[0] = path;
    execv(path, argv);
    fprintf(stderr, "labctl-%s: cannot run %s: %s\n", tool, path, strerror(errno));
    exit(1);
}

/* The helper's exit status for this request; -1: it ran nothing (fall back). */
static int call_helper(const char *tool, int argc, char **argv)
{
    struct buffer req = {0};
    char count[16];
    snprintf(count, sizeof count, "%d", argc);
    if (append(&req, MAGIC, sizeof MAGIC) || append_field(&req, count)
        || append_field(&req, tool))
        return -1;
    for (int i = 1; i < argc; i++)
        if (append_field(&req, argv[i]))
            return -1;
    for (char **env = environ; *env; env++)
        if (append_field(&req, *env))
            return -1;

    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (snprintf(addr.sun_path, sizeof addr.sun_path, "%s", SOCKET_PATH)
        >= (int)sizeof addr.sun_path)
        return -1;
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0)
        return -1; /* no helper: not started, still importing pyverbs, or gone */

    size_t first = req.len < FIRST_CHUNK ? req.len : FIRST_CHUNK;
    int fds[2] = {1, 2};
    union {
        char space[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {.iov_base = req.data, .iov_len = first};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = control.space, .msg_controllen = sizeof control.space};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (sent < 0)
        return -1; /* nothing ran yet (e.g. fd 1 or 2 closed) */
    for (size_t off = (size_t)sent; off < req.len;) {
        ssize_t n = send(sock, req.data + off, req.len - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        off += (size_t)n;
    }
    shutdown(sock, SHUT_WR);

    char reply[256];
    size_t got = 0;
    for (;;) {
        ssize_t n = read(sock, reply + got, sizeof reply - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        /* A reset: the helper closed before reading all of the request (too large, or it
         * ended), so it ran nothing. What came before it ("F ..." or nothing) is the reply. */
        if (n < 0 && errno == ECONNRESET) {
            if (got == 0)
                return -1;
            break;
        }
        if (n < 0) {
            fprintf(stderr, "labctl.verbs: helper connection failed: %s\n", strerror(errno));
            return 1;
        }
        if (n == 0 || (got += (size_t)n) == sizeof reply - 1)
            break;
    }
    reply[got] = '\0';
    if (got == 0) {
        /* The child may have printed part of the output: running again would print it twice. */
        fputs("labctl.verbs: the helper ended without an exit status\n", stderr);
        return 1;
    }
    if (strncmp(reply, "F ", 2) == 0)
        return -1;
    char *end;
    long status = strtol(reply + 2, &end, 10);
    if (strncmp(reply, "R ", 2) != 0 || end == reply + 2 || strcmp(end, "\n") != 0) {
        fprintf(stderr, "labctl.verbs: bad reply '%.40s'\n", reply);
        return 1;
    }
    return (int)(status & 0xff);
}

int main(int argc, char **argv)
{
    const char *tool = tool_of(argv[0]);
    if (!tool) {
        fprintf(stderr, "%s: run me as labctl-devinfo or labctl-devices\n", argv[0]);
        return 2;
    }
    const char *direct = getenv(DIRECT_ENV);
    if (!(direct && strcmp(direct, "1") == 0)) {
        int status = call_helper(tool, argc, argv);
        if (status >= 0)
            return status;
    }
    fall_back(tool, argv);
    return 1;
}
