# What a machine with systemd-resolved (or a browser) does for E2B's tests: every
# `*.localhost` name is 127.0.0.1. slotpool e2b-server hands sandboxes the domain
# `e2b.localhost:<its HTTPS port>`, so `https://{sandbox.get_host(port)}` in E2B's tests reaches
# it; glibc alone does not resolve `<port>-<id>.localhost`. Loaded as a pytest plugin by
# test/e2b/upstream/run-upstream.ts (-p slotpool_localhost): where the tests point, not a test.
import socket

_getaddrinfo = socket.getaddrinfo


def _localhost_getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and (name == "localhost" or name.lower().endswith(".localhost")):
        host = "127.0.0.1"
    return _getaddrinfo(host, port, family, type, proto, flags)


socket.getaddrinfo = _localhost_getaddrinfo
