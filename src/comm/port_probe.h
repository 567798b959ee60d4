// Whether a TCP port is taken on this host, asked before c10d's TCPStore tries to listen on it:
// c10d logs four glog lines ("The server socket has failed to bind ...") for a port in use before
// it throws, which bury the one clear line we print. Stateless and thread-safe.
#pragma once

namespace deepspeed::comm::detail {

// True when c10d's server socket would fail to listen on `port` because it is taken: binding the
// IPv6 wildcard (dual-stack) fails and binding the IPv4 wildcard fails with EADDRINUSE, the two
// addresses c10d tries in turn. SO_REUSEADDR is set as c10d sets it, so a port held only by
// connections in TIME_WAIT counts as free. Any other failure (no permission, ...) answers false
// and leaves the verdict to c10d.
bool tcp_port_in_use(int port);

}  // namespace deepspeed::comm::detail
