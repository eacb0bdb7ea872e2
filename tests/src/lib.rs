//! Multi-process tests of the shared-memory device.
//!
//! Two real processes talk over `/dev/via_lo`: the integration tests in
//! `tests/` spawn the `via_peer` helper binary in the roles a scenario
//! needs (server, client, sender, receiver, victim of a SIGKILL ...), wait
//! for its `READY` line before starting the other side, and judge the
//! outcome from exit statuses and `RESULT key=value` lines. Every byte that
//! crosses is checked against a deterministic pattern, so a test can only
//! pass if the data really arrived, whole and in order.
//!
//! The library holds what both sides share: registered memory and
//! descriptor building ([`arena`]), payload patterns and checksums
//! ([`pattern`]), and the process harness the tests use ([`harness`]).

pub mod arena;
pub mod harness;
pub mod pattern;

/// Size classes every transfer test walks through: around the inline
/// limit, the page size, the ring chunk, and well beyond.
pub const SIZE_CLASSES: &[usize] = &[
    0,
    1,
    7,
    63,
    64,
    65,
    4095,
    4096,
    4097,
    16 * 1024 - 1,
    16 * 1024,
    16 * 1024 + 1,
    64 * 1024,
    (1 << 20) + 13,
    8 << 20,
];

/// MaxTransferSize of every VI the helper creates.
pub const MAX_TRANSFER: u64 = 16 << 20;
