// See port_probe.h.
#include "comm/port_probe.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace deepspeed::comm::detail {
namespace {

// errno of binding the wildcard address of `family` on `port` (0 when it binds), or -1 when no
// such socket can be made here.
int bind_errno(int family, int port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (family == AF_INET6) {
    const int zero = 0;  // dual-stack: also conflicts with IPv4 listeners, as c10d's socket does
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 a;
    std::memset(&a, 0, sizeof(a));
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a;
    std::memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a));
  }
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

bool tcp_port_in_use(int port) {
  // c10d's server tries the IPv6 wildcard, then the IPv4 one; it fails only when both do.
  if (bind_errno(AF_INET6, port) == 0) return false;
  return bind_errno(AF_INET, port) == EADDRINUSE;
}

}  // namespace deepspeed::comm::detail
