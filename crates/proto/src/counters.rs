//! What the connection dropped, repeated or recovered, counted so that
//! tests and `viabench` can check that bad input was refused and losses
//! were seen rather than silently absorbed.

/// Monotonic counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub datagrams_received: u64,
    /// Datagrams that carried a data segment (new, repeated or refused
    /// alike): the rest were acknowledgements, probes and the like.
    pub data_segments_received: u64,
    /// Failed [`openvia_wire::rum::Packet::new_checked`].
    pub parse_errors: u64,
    /// Carried a connection id that is not ours.
    pub wrong_conn_id: u64,
    /// Valid packet that made no sense in the current state.
    pub unexpected_packets: u64,
    /// Segment already received (or skipped as lost).
    pub duplicate_segments: u64,
    /// Segment beyond the advertised window.
    pub out_of_window: u64,
    /// Ack or SACK for data never sent.
    pub bogus_acks: u64,
    /// Peer broke the protocol (inconsistent segments, oversize message).
    pub protocol_violations: u64,
    pub datagrams_sent: u64,
    pub segments_sent: u64,
    pub retransmissions: u64,
    pub fast_retransmits: u64,
    pub rto_expirations: u64,
    /// Tail loss probes: the last segment sent again because the sender
    /// went quiet with data unacknowledged.
    pub tail_probes: u64,
    pub acks_sent: u64,
    pub keepalives_sent: u64,
    pub probes_sent: u64,
    pub messages_sent: u64,
    pub messages_delivered: u64,
    /// Data segments a placer put in place as they arrived (the rest were
    /// buffered and copied at delivery).
    pub segments_placed: u64,
    /// Unreliable level: messages that lost a segment and were dropped whole.
    pub messages_dropped: u64,
    /// Times the sender had data but the receiver's window was closed.
    pub window_stalls: u64,
}
