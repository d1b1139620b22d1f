// Package cluster makes wovyr nodes one service over NATS with JetStream:
// any node's API accepts an invocation, and a live node of a region its
// residency allows runs it and keeps its record.
//
//   - Embedded NATS. A node embeds a NATS server (JetStream on, its store
//     under the state directory, loopback only) unless it is told to join
//     an external NATS (config nats.url). Several nodes' embedded servers
//     form one NATS cluster through routes (nats.routes).
//   - Registry. Each node puts its entry — region, zone, certified
//     backends, capacity — in the KV bucket wovyr-nodes every heartbeat;
//     an entry older than three heartbeats is not live. A node that stops
//     deletes its entry.
//   - Dispatch. Each region has one JetStream work-queue stream
//     (WOVYR_WORK_<region>, subjects wovyr.work.<region>.<backend>); each
//     backend of it one durable pull consumer that every node of that
//     region which certified the backend pulls from, so a node takes work
//     only for backends it certified and only of its region. A message is
//     acked only after the executing node has claimed the id (KV bucket
//     wovyr-placements, create-only) and recorded it durably in its own
//     store; it then answers the API node, which answers the caller.
//   - Records stay where they ran: GET on another node finds the node in
//     wovyr-placements and asks it (wovyr.node.<name>.get), for the same
//     tenant only; another tenant's id is not found, as a missing one.
//
// What it refuses to do: place an invocation outside the regions
// residency allows (the API node picks among them, the executing node
// checks its own region again), run a message twice (the placement claim
// is create-only), or run work whose API node has given up on it (a
// dispatch carries its accept-by deadline; a later pickup drops it). See
// ADR 0031 for the design and its numbers.
package cluster
