"""Bytes on the wire: nftables counters on the server's port, both directions, TCP and UDP.

On loopback every packet, the client's and the server's, crosses the `output` hook once,
so one rule per direction counts it. A counter adds up the packets' lengths from the IP
header on; the IPv4 header is 20 bytes (the stack sends no options), UDP's 8, TCP's 4 ×
its data offset, so TCP is counted by one rule per data offset and the transport
payload (QUIC packets, or TLS records) is exact. The packets seen there are GSO trains
(loopback segments neither UDP nor TCP), so the packet counts are not datagrams or
segments on a real wire, and the headers a real wire adds per datagram are not counted.
"""

import json
import os
import shutil
import subprocess

# The IPv4 header and the UDP header, in bytes.
IPV4_HEADER = 20
UDP_HEADER = 8
# TCP data offsets (header length in 32-bit words): 5 (no options) to 15.
TCP_DATA_OFFSETS = range(5, 16)


class WireError(Exception):
    """nft is missing or refused the table; the message says which."""


def _nft(*args: str, text: str | None = None) -> str:
    done = subprocess.run(["nft", *args], input=text, capture_output=True, text=True)
    if done.returncode != 0:
        raise WireError(f"nft {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


class WireCounter:
    """An nftables table counting the bytes to and from 127.0.0.1:`port` while it is open
    (`with WireCounter(port) as counter: ...; counter.read()`)."""

    def __init__(self, port: int):
        if shutil.which("nft") is None:
            raise WireError("nft not found (Debian: apt-get install nftables)")
        self.port = port
        # One table per harness process, so that two harnesses do not share counters.
        self.table = f"kiln_bench_wire_{os.getpid()}"

    def __enter__(self) -> "WireCounter":
        rules = []
        for direction, match in (("to_server", "dport"), ("to_client", "sport")):
            rules.append(f'udp {match} {self.port} counter comment "{direction} udp"')
            rules += [f"tcp {match} {self.port} tcp doff {offset} counter "
                      f'comment "{direction} tcp {offset}"' for offset in TCP_DATA_OFFSETS]
        body = "\n".join(f"    {rule}" for rule in rules)
        _nft("-f", "-", text=f"table ip {self.table} {{\n  chain output {{\n"
                            f"    type filter hook output priority 0; policy accept;\n"
                            f"{body}\n  }}\n}}\n")
        return self

    def __exit__(self, *_) -> None:
        _nft("delete", "table", "ip", self.table)

    def read(self) -> dict[str, int]:
        """Transport payload bytes and packets seen per direction so far: to_server_bytes,
        to_server_packets, to_client_bytes, to_client_packets."""
        listing = json.loads(_nft("-j", "list", "table", "ip", self.table))
        totals = {"to_server_bytes": 0, "to_server_packets": 0,
                  "to_client_bytes": 0, "to_client_packets": 0}
        for item in listing["nftables"]:
            rule = item.get("rule")
            if rule is None:
                continue
            direction, protocol, *offset = rule["comment"].split()
            counter = next(e["counter"] for e in rule["expr"] if "counter" in e)
            header = IPV4_HEADER + (UDP_HEADER if protocol == "udp" else 4 * int(offset[0]))
            totals[f"{direction}_bytes"] += counter["bytes"] - counter["packets"] * header
            totals[f"{direction}_packets"] += counter["packets"]
        return totals
