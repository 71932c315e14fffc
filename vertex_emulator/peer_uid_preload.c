/* Keeps other users of this machine off the TCP listeners of `ncf-pipelines verify`'s replicas.
 *
 * A custom job's replicas run TensorFlow's gRPC server (tf.distribute.Server), which runs any graph
 * a client sends. verify gives each job a network namespace of its own where it can; where it
 * cannot, it puts this library on the replicas' LD_PRELOAD (vertex_emulator/replica_network.py).
 * accept and accept4 then close every TCP connection (IPv4 or IPv6) whose other end is not an
 * established socket of this process's effective user, as /proc/net/tcp and /proc/net/tcp6 list
 * it (the kernel's record of each socket's owner, which a client cannot change), and accept the
 * next one instead, so the server never sees it; the first few refusals are reported on stderr.
 * A peer socket that is not found, or no longer established (a client may close its end as soon
 * as it has sent a request), is refused too. Unix sockets and other families are untouched.
 * Not covered: accepts made with syscall(2) or io_uring rather than through libc.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_MESSAGES 5
#define TCP_ESTABLISHED 1

static int messages; /* How many refusals were reported on stderr (the rest are silent). */

/* An IPv4 or IPv6 address as 16 bytes (IPv4 in its v4-mapped form), and a port. */
struct endpoint {
    unsigned char addr[16];
    unsigned port;
};

static int endpoint_of(const struct sockaddr_storage *ss, struct endpoint *out) {
    memset(out, 0, sizeof(*out));
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        out->addr[10] = out->addr[11] = 0xff;
        memcpy(out->addr + 12, &in->sin_addr, 4);
        out->port = ntohs(in->sin_port);
        return 1;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        memcpy(out->addr, &in6->sin6_addr, 16);
        out->port = ntohs(in6->sin6_port);
        return 1;
    }
    return 0;
}

/* An address as /proc/net/tcp* print it: 8 (IPv4) or 32 (IPv6) hex digits, each 8 the
 * native-order value of 4 bytes of the address as the kernel holds them. */
static int parse_address(const char *hex, unsigned port, struct endpoint *out) {
    size_t n = strlen(hex);
    if (n != 8 && n != 32) return 0;
    memset(out, 0, sizeof(*out));
    unsigned char *dst = out->addr;
    if (n == 8) {
        out->addr[10] = out->addr[11] = 0xff;
        dst = out->addr + 12;
    }
    for (size_t i = 0; i < n / 8; i++) {
        char word[9];
        memcpy(word, hex + 8 * i, 8);
        word[8] = '\0';
        uint32_t value = (uint32_t)strtoul(word, NULL, 16);
        memcpy(dst + 4 * i, &value, 4);
    }
    out->port = port;
    return 1;
}

static int same(const struct endpoint *a, const struct endpoint *b) {
    return a->port == b->port && memcmp(a->addr, b->addr, 16) == 0;
}

/* The owner of the established socket whose local end is `local` and remote end `remote`;
 * -1 when none is listed. */
static long established_owner(const struct endpoint *local, const struct endpoint *remote) {
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        FILE *f = fopen(tables[t], "re");
        if (f == NULL) continue;
        char line[512];
        while (fgets(line, sizeof(line), f) != NULL) {
            char l_hex[40], r_hex[40];
            unsigned l_port, r_port, state;
            unsigned long uid;
            if (sscanf(line, " %*u: %39[0-9A-Fa-f]:%x %39[0-9A-Fa-f]:%x %x %*x:%*x %*x:%*x %*x %lu",
                       l_hex, &l_port, r_hex, &r_port, &state, &uid) != 6)
                continue; /* The header. */
            struct endpoint l, r;
            if (state != TCP_ESTABLISHED || !parse_address(l_hex, l_port, &l) ||
                !parse_address(r_hex, r_port, &r))
                continue;
            if (same(&l, local) && same(&r, remote)) {
                fclose(f);
                return (long)uid;
            }
        }
        fclose(f);
    }
    return -1;
}

/* Whether the accepted socket `fd` may stay open: not TCP, or its peer is this user's. */
static int allowed(int fd) {
    struct sockaddr_storage mine, theirs;
    socklen_t mine_len = sizeof(mine), theirs_len = sizeof(theirs);
    if (getsockname(fd, (struct sockaddr *)&mine, &mine_len) != 0) return 1;
    if (mine.ss_family != AF_INET && mine.ss_family != AF_INET6) return 1;
    struct endpoint here, peer;
    if (getpeername(fd, (struct sockaddr *)&theirs, &theirs_len) != 0 ||
        !endpoint_of(&mine, &here) || !endpoint_of(&theirs, &peer))
        return 0;
    long owner = established_owner(&peer, &here); /* The peer's socket: its ends reversed. */
    if (owner == (long)geteuid()) return 1;
    if (messages < MAX_MESSAGES) {
        char line[256];
        int n = snprintf(line, sizeof(line),
                         "ncf-pipelines verify: refused a connection to port %u from %s (pid "
                         "%d): only this user's processes may connect to a replica\n",
                         here.port, owner < 0 ? "a socket no longer established" : "another user",
                         (int)getpid());
        if (n > 0) {
            ssize_t ignored = write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n
                                                                                 : sizeof(line));
            (void)ignored;
        }
        messages++;
    }
    return 0;
}

typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

int accept(int sockfd, struct sockaddr *addr, socklen_t *addrlen) {
    static accept_fn real;
    if (real == NULL) real = (accept_fn)dlsym(RTLD_NEXT, "accept");
    socklen_t given = addrlen ? *addrlen : 0;
    for (;;) { /* A refused connection is closed and the next one taken, as if it never came. */
        if (addrlen) *addrlen = given;
        int fd = real(sockfd, addr, addrlen);
        if (fd < 0 || allowed(fd)) return fd;
        close(fd);
    }
}

int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags) {
    static accept4_fn real;
    if (real == NULL) real = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
    socklen_t given = addrlen ? *addrlen : 0;
    for (;;) {
        if (addrlen) *addrlen = given;
        int fd = real(sockfd, addr, addrlen, flags);
        if (fd < 0 || allowed(fd)) return fd;
        close(fd);
    }
}
