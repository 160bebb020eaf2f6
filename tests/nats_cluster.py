"""A JetStream cluster of real nats-server processes on loopback ports, for tests of a
node dying: each node is an EmbeddedNats with cluster flags, named n0, n1, ..."""

from __future__ import annotations

import signal

from cli.nats_server import EmbeddedNats, free_port

CLUSTER_NAME = "spate-test"


class NatsCluster:
    def __init__(self, size: int = 3) -> None:
        routes = [f"nats://127.0.0.1:{free_port()}" for _ in range(size)]
        self.nodes = {
            f"n{index}": EmbeddedNats(extra_args=(
                "--name", f"n{index}", "--cluster_name", CLUSTER_NAME, "--cluster", route,
                "--routes", ",".join(other for other in routes if other != route),
            ))
            for index, route in enumerate(routes)
        }

    @property
    def url(self) -> str:
        """Every node, as SPATE_NATS_URL takes them."""
        return ",".join(node.url for node in self.nodes.values())

    def start(self) -> NatsCluster:
        for node in self.nodes.values():
            node.start()
        return self

    def kill(self, name: str) -> None:
        """SIGKILL one node: no lame-duck mode, no goodbye to the others."""
        node = self.nodes[name]
        if node.process is not None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait()
        node.stop()

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
