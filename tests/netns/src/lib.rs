//! Tests across network namespaces (the UDP device): two namespaces joined
//! by a veth pair, a helper process in each launched with `ip netns exec`,
//! readiness by `READY` lines on the helper's stdout.
//!
//! `memory` holds what both the helper and in-process tests need to drive
//! VIs (aligned registered arenas, descriptor building, a data pattern),
//! `namespaces` the veth pair with its teardown guard and the nft drop
//! rules, `harness` the child process handling.

pub mod harness;
pub mod memory;
pub mod namespaces;
pub mod pair;
