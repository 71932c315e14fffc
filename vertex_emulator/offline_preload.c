/* Keeps every process `ncf-pipelines verify` starts on this host, whatever code opens the socket.
 *
 * Built by verify (vertex_emulator/offline.py) and put on LD_PRELOAD of every process it starts;
 * child processes inherit it. Python's socket module, gRPC's C core, TensorFlow's and pyarrow's
 * Cloud Storage clients (curl) and anything else that calls libc go through these:
 *   - connect, sendto, sendmsg, sendmmsg to an IPv4/IPv6 address that is not this host
 *     (127.0.0.0/8, ::1, 0.0.0.0, ::, their v4-mapped forms) fail with ENETUNREACH, and the
 *     first few say so on stderr; DNS over a non-loopback resolver fails the same way;
 *   - bind to the wildcard address (0.0.0.0 or ::) binds loopback instead: 127.0.0.1, ::1 for
 *     an IPv6-only socket, ::ffff:127.0.0.1 for a dual-stack one (which gRPC's servers, the
 *     TensorFlow replicas' among them, open for "0.0.0.0:PORT"), so IPv4 clients of 127.0.0.1
 *     still reach it and nothing off this host does;
 *   - listen on a socket never bound (the kernel would bind it to the wildcard) binds it to
 *     loopback first.
 * Other address families (Unix sockets, netlink) are untouched. Not covered: calls made with
 * syscall(2) or io_uring rather than through libc, statically linked programs, raw and packet
 * sockets (they need privileges).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_MESSAGES 5

static int messages; /* How many refusals were reported on stderr (the rest are silent). */

static int v4_local(uint32_t host_order) {
    return (host_order >> 24) == 127 || host_order == INADDR_ANY;
}

/* Whether a connect/send to `addr` stays on this host (non-IP families always do). */
static int on_this_host(const struct sockaddr *addr, socklen_t len) {
    if (addr == NULL || len < (socklen_t)sizeof(sa_family_t)) return 1;
    if (addr->sa_family == AF_INET) {
        if (len < (socklen_t)sizeof(struct sockaddr_in)) return 1; /* The kernel: EINVAL. */
        return v4_local(ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr));
    }
    if (addr->sa_family == AF_INET6) {
        if (len < (socklen_t)sizeof(struct sockaddr_in6)) return 1;
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a)) return 1;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            uint32_t v4;
            memcpy(&v4, &a->s6_addr[12], sizeof(v4));
            return v4_local(ntohl(v4));
        }
        return 0;
    }
    return 1;
}

static int refuse(const struct sockaddr *addr) {
    if (messages < MAX_MESSAGES) {
        char host[INET6_ADDRSTRLEN] = "?";
        unsigned port = 0;
        if (addr->sa_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
            inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
            port = ntohs(in->sin_port);
        } else {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
            inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
            port = ntohs(in6->sin6_port);
        }
        char line[256];
        int n = snprintf(line, sizeof(line),
                         "ncf-pipelines verify runs without network access; blocked a connection "
                         "to %s port %u (pid %d)\n", host, port, (int)getpid());
        if (n > 0) {
            ssize_t ignored = write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n
                                                                                 : sizeof(line));
            (void)ignored;
        }
        messages++;
    }
    errno = ENETUNREACH;
    return -1;
}

/* The loopback address to bind instead of a wildcard one; 0 if `addr` is not a wildcard. */
static int loopback_instead(int fd, const struct sockaddr *addr, socklen_t len,
                            struct sockaddr_storage *out) {
    if (addr == NULL) return 0;
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        if (in->sin_addr.s_addr != htonl(INADDR_ANY)) return 0;
        struct sockaddr_in *lo = (struct sockaddr_in *)out;
        *lo = *in;
        lo->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return 1;
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        if (!IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) return 0;
        struct sockaddr_in6 *lo = (struct sockaddr_in6 *)out;
        *lo = *in6;
        int v6only = 0;
        socklen_t size = sizeof(v6only);
        if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) == 0 && v6only) {
            lo->sin6_addr = in6addr_loopback;
        } else { /* Dual-stack: IPv4 127.0.0.1 through its v4-mapped form. */
            memset(&lo->sin6_addr, 0, sizeof(lo->sin6_addr));
            lo->sin6_addr.s6_addr[10] = 0xff;
            lo->sin6_addr.s6_addr[11] = 0xff;
            lo->sin6_addr.s6_addr[12] = 127;
            lo->sin6_addr.s6_addr[15] = 1;
        }
        return 1;
    }
    return 0;
}

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*listen_fn)(int, int);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);
typedef int (*sendmmsg_fn)(int, struct mmsghdr *, unsigned int, int);

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    if (!on_this_host(addr, len)) return refuse(addr);
    return ((connect_fn)dlsym(RTLD_NEXT, "connect"))(fd, addr, len);
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    struct sockaddr_storage lo;
    if (loopback_instead(fd, addr, len, &lo)) addr = (const struct sockaddr *)&lo;
    return ((bind_fn)dlsym(RTLD_NEXT, "bind"))(fd, addr, len);
}

int listen(int fd, int backlog) {
    struct sockaddr_storage own;
    socklen_t len = sizeof(own);
    memset(&own, 0, sizeof(own));
    if (getsockname(fd, (struct sockaddr *)&own, &len) == 0) {
        int unbound = (own.ss_family == AF_INET && ((struct sockaddr_in *)&own)->sin_port == 0) ||
                      (own.ss_family == AF_INET6 &&
                       ((struct sockaddr_in6 *)&own)->sin6_port == 0);
        if (unbound && bind(fd, (struct sockaddr *)&own, len) != 0) return -1;
    }
    return ((listen_fn)dlsym(RTLD_NEXT, "listen"))(fd, backlog);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
               socklen_t len) {
    if (addr != NULL && !on_this_host(addr, len)) return refuse(addr);
    return ((sendto_fn)dlsym(RTLD_NEXT, "sendto"))(fd, buf, n, flags, addr, len);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    if (msg != NULL && msg->msg_name != NULL &&
        !on_this_host((const struct sockaddr *)msg->msg_name, msg->msg_namelen)) {
        return refuse((const struct sockaddr *)msg->msg_name);
    }
    return ((sendmsg_fn)dlsym(RTLD_NEXT, "sendmsg"))(fd, msg, flags);
}

int sendmmsg(int fd, struct mmsghdr *msgs, unsigned int count, int flags) {
    for (unsigned int i = 0; msgs != NULL && i < count; i++) {
        const struct msghdr *msg = &msgs[i].msg_hdr;
        if (msg->msg_name != NULL &&
            !on_this_host((const struct sockaddr *)msg->msg_name, msg->msg_namelen)) {
            return refuse((const struct sockaddr *)msg->msg_name);
        }
    }
    return ((sendmmsg_fn)dlsym(RTLD_NEXT, "sendmmsg"))(fd, msgs, count, flags);
}
