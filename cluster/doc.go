// Package cluster makes wovyr nodes one service over NATS with JetStream:
// any node's API accepts an invocation, and a live node of a region its
// residency allows runs it and keeps its record.
//
//   - Embedded NATS. A node embeds a NATS server (JetStream on, its store
//     under the state directory, loopback only) unless it is told to join
//     an external NATS (config nats.url). Several nodes' embedded servers
//     form one NATS cluster through routes (nats.routes), and a NATS
//     cluster per region joins the others' by gateways (nats.gateways).
//   - Registry. Each node puts its entry — region, zone, certified
//     backends, capacity — in its region's KV bucket wovyr-nodes-<region>
//     every heartbeat, and watches every region's (regional.go); an entry
//     older than three heartbeats is not live. A node that stops deletes
//     its entry. Each region's buckets live on its own NATS servers, so a
//     region that loses its NATS takes no other region's registry or
//     records with it.
//   - Dispatch. Each region has one JetStream work-queue stream
//     (WOVYR_WORK_<region>, subjects wovyr.work.<region>.<backend>.<tenant>):
//     the region's queue. Work for another region goes there, and so does
//     work for a node's own region when the region has other live nodes,
//     so that the tenants' weights hold across the region's nodes
//     whichever node each tenant submits to. Every node of the region
//     takes from it only what it has room for (twice its concurrency,
//     running or next in line), by smooth weighted round-robin over the
//     tenants with work waiting (pull.go, fair.go), and only for backends
//     it certified. A message is acked only after the executing node has
//     claimed the id (KV bucket wovyr-placements-<region>, compare-and-set) and
//     recorded it durably in its own store; it then answers the API node,
//     which answers the caller. An invocation no node takes within the
//     API node's wait is answered 202 as queued, and every node answers
//     for it as queued until a node takes it, it is cancelled, or it
//     waits past its deadline (then it ends failed, unavailable).
//   - Records stay where they ran: GET on another node finds the node in
//     a region's wovyr-placements-<region> and asks it (wovyr.node.<name>.get), for the same
//     tenant only; another tenant's id is not found, as a missing one. An
//     event stream follows the run on its holder (.follow: the state and
//     the live chunks as they come), and a record larger than one message
//     crosses without its output, fetched then in pieces (.part).
//
// What it refuses to do: place an invocation outside the regions
// residency allows (the API node picks among them, the executing node
// checks its own region again), run a message twice or one cancelled in
// the queue (the claim is a compare-and-set on the placement), or run work
// past its queue deadline (a later pickup ends it instead). See ADR 0031
// for the design and its numbers, and ADR 0037 for the region's queue.
package cluster
