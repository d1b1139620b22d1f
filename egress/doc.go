// Package egress enforces a sandbox's netpolicy.Policy from outside the
// sandbox, the same way for every Linux backend: nothing the workload does
// inside can widen it, because none of the enforcement lives where it runs.
//
// A Slot is one sandbox's network: a network namespace (wovyr-<tag>-s<N>)
// whose only interface is one end of a veth pair (eth0, sandbox .2 of a /30
// in Config.SlotRange); the other end (wv<tag><N>, gateway .1) sits in the
// host netns with a per-slot nftables table (wovyr_<tag>_s<N>), built through
// github.com/google/nftables, never the nft binary. That table drops
// everything from the slot except:
//
//   - DNS (udp and tcp port 53, to any address) — DNAT'ed to the stub;
//   - TCP to the policy's CIDR:ports (forwarded out of Config.Uplinks only,
//     with link-local, metadata, loopback, the slot range and
//     Config.Reserved cut out unless a rule names them explicitly);
//   - TCP 80/443 and gateway:ProxyPort — DNAT'ed to the egress proxy.
//
// It also drops forged source addresses and anything not IPv4. The stub
// answers only names the policy allows (resolving them upstream from the
// host side) and NXDOMAIN for the rest without asking anyone, and records
// which addresses it handed to which binding. The proxy lets a connection
// through only if the name it claims (Host, SNI or CONNECT target) is
// allowed on that port and the destination is an address the stub handed
// that binding for that name: no domain fronting, no rebinding, no IP
// literals. Neither ever hands out or connects to the host's own addresses.
// It never terminates TLS. Every decision is logged with the
// tenant and invocation id.
//
// # Lifecycle
//
// A Service (NewService) holds the stub and proxy listeners for the node.
// A microVM joins a slot through a tap inside its netns (Slot.AddTap), wired
// to eth0 at layer 2, so its guest meets the same table, stub and proxy.
// Pools pre-create slots (Service.NewSlot, ~7 ms); a claim binds one to a
// tenant's invocation (Slot.Apply, ~1.4 ms on a released slot); after the
// run Slot.Release wipes it (netns state, conntrack, the stub's memory) and
// returns it to deny-all; Slot.Close removes it. Reconcile removes what a
// crashed wovyr left (run it before NewService). Backends call Config.Check
// (or Service.Check) at Select time and refuse, as Unenforceable, a policy
// they cannot hold.
//
// # What it refuses
//
// IPv6 egress (slots are IPv4-only; IPv6 CIDR rules are Unenforceable),
// UDP to names and QUIC (udp/443), CIDR rules on a node without uplinks.
// Tests never route toward the real uplink: they point Config.HostNetns at a
// stand-in host namespace (package egresstest) whose only neighbour is a
// harness namespace.
package egress
