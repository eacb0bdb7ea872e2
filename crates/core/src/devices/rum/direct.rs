//! Placement on arrival: a data segment's payload goes from the datagram
//! straight into the posted receive (or the RDMA write's target) instead of
//! into the connection's buffer first and the descriptor at delivery, so
//! the receiving side copies each byte once after the kernel, as TCP does.
//!
//! The protocol offers only segments that arrive in order within their
//! message, on the reliable levels (`openvia_proto::SegmentPlacer`). Here a
//! message is given a *plan* when its first segment arrives: on those
//! levels every message is delivered, in order, and a send (or an RDMA
//! write with immediate data) takes the next posted receive, so the
//! receive a message will complete is known as soon as every message ahead
//! of it has a plan. A message whose first segment comes before the one
//! ahead of it is known (that one's first segment was lost and comes
//! again later) is remembered, and planned as soon as it can be: its
//! segments from then on are placed, those before were buffered. A
//! message that cannot be planned (no receive posted for it, a receive too
//! small, memory it may not write) is buffered and placed at delivery, as
//! before; at its delivery the plans start again from the queue's head.

use std::collections::VecDeque;

use openvia_proto::{ArrivingSegment, MessageId, SegmentPlacer, ViaOp};

use crate::ranges::{self, Range};
use crate::vi::placement::Placement;

/// Where a planned message's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// The posted receive with this index (`RecvQueue::popped`).
    Recv(u64),
    /// Registered memory the RDMA write names (checked per segment).
    Rdma { handle: u32, addr: u64 },
    /// Buffered by the connection and placed at delivery.
    Buffered,
}

/// What a message's first segment says: enough to plan it.
#[derive(Clone, Copy, Debug)]
struct Start {
    msg_id: MessageId,
    op: ViaOp,
    immediate: Option<u32>,
    mem_handle: u32,
    remote_addr: u64,
    total: u32,
}

impl Start {
    fn of(seg: &ArrivingSegment<'_>) -> Self {
        Self {
            msg_id: seg.msg_id,
            op: seg.op,
            immediate: seg.immediate,
            mem_handle: seg.mem_handle,
            remote_addr: seg.remote_addr,
            total: seg.total,
        }
    }
}

/// Most first segments remembered ahead of the next message to plan.
const WAITING: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Plan {
    msg_id: MessageId,
    target: Target,
    /// Bytes placed on arrival.
    placed: u64,
}

/// The plans of one connection's messages that have arrived in part.
#[derive(Debug, Default)]
pub(super) struct DirectPlacement {
    /// Messages below this one have a plan or were delivered.
    next_plan: MessageId,
    /// The first receive index the next planned message that takes a
    /// receive may have.
    next_recv: u64,
    /// Plans for messages not yet delivered, by message id.
    plans: VecDeque<Plan>,
    /// First segments of messages after `next_plan`, by message id.
    waiting: VecDeque<Start>,
}

impl DirectPlacement {
    fn plan_of(&mut self, msg_id: MessageId) -> Option<&mut Plan> {
        let first = self.plans.front()?.msg_id;
        let k = usize::try_from(msg_id.checked_sub(first)?).ok()?;
        self.plans.get_mut(k)
    }

    /// Makes the plan of `seg`'s message, the next one to plan; None when
    /// it cannot be planned now (the receive it will take is not posted).
    fn plan(&mut self, place: &Placement, seg: &Start) -> Option<Target> {
        let total = seg.total as u64;
        let takes_recv =
            seg.op == ViaOp::Send || (seg.op == ViaOp::RdmaWrite && seg.immediate.is_some());
        let recv = if takes_recv {
            Some(place.takeable_recv_from(self.next_recv)?)
        } else {
            None
        };
        let target = match (seg.op, recv) {
            (ViaOp::Send, Some((index, capacity))) if total <= capacity => Target::Recv(index),
            // Too long: completed with a length error at delivery.
            (ViaOp::Send, _) => Target::Buffered,
            (ViaOp::RdmaWrite, _)
                if place
                    .check_rdma(true, seg.remote_addr, seg.mem_handle, total)
                    .is_ok() =>
            {
                Target::Rdma {
                    handle: seg.mem_handle,
                    addr: seg.remote_addr,
                }
            }
            // Refused (a NACK at delivery), or RDMA read traffic.
            _ => Target::Buffered,
        };
        if let Some((index, _)) = recv {
            self.next_recv = index + 1;
        }
        self.next_plan = seg.msg_id + 1;
        self.plans.push_back(Plan {
            msg_id: seg.msg_id,
            target,
            placed: 0,
        });
        Some(target)
    }

    /// Plans the remembered messages that are next, in order, while their
    /// receives are posted.
    fn catch_up(&mut self, place: &Placement) {
        while let Some(&start) = self.waiting.front() {
            if start.msg_id < self.next_plan {
                self.waiting.pop_front();
                continue;
            }
            if start.msg_id != self.next_plan || self.plan(place, &start).is_none() {
                return;
            }
            self.waiting.pop_front();
        }
    }

    /// Remembers the first segment of a message that cannot be planned
    /// yet (in message order; a full list forgets the newest).
    fn remember(&mut self, start: Start) {
        let at = self.waiting.partition_point(|s| s.msg_id < start.msg_id);
        if self
            .waiting
            .get(at)
            .is_some_and(|s| s.msg_id == start.msg_id)
        {
            return;
        }
        if self.waiting.len() == WAITING {
            if at == WAITING {
                return;
            }
            self.waiting.pop_back();
        }
        self.waiting.insert(at, start);
    }

    /// Where `seg`'s message goes, planning it (and the messages
    /// remembered behind it) if it is a first segment that can be.
    fn target_of(&mut self, place: &Placement, seg: &ArrivingSegment<'_>) -> Option<Target> {
        if let Some(plan) = self.plan_of(seg.msg_id) {
            return Some(plan.target);
        }
        if seg.offset == 0 && seg.msg_id >= self.next_plan {
            self.remember(Start::of(seg));
        }
        if self
            .waiting
            .front()
            .is_some_and(|s| s.msg_id == self.next_plan)
        {
            self.catch_up(place);
        }
        self.plan_of(seg.msg_id).map(|p| p.target)
    }

    /// Places `seg` if its message's plan says where; true when written.
    pub(super) fn place(&mut self, place: &mut Placement, seg: &ArrivingSegment<'_>) -> bool {
        let Some(target) = self.target_of(place, seg) else {
            return false;
        };
        let offset = seg.offset as u64;
        let len = seg.payload.len() as u64;
        let written = match target {
            Target::Recv(index) => place.recv_write_at(index, offset, seg.payload),
            Target::Rdma { handle, addr } => {
                // Checked per segment: the region may have been
                // deregistered since the message's first one.
                let at = addr.wrapping_add(offset);
                if place.check_rdma(true, at, handle, len).is_ok() {
                    let target = [Range { addr: at, len }];
                    // SAFETY: just checked: [at, at+len) lies in a region
                    // registered for RDMA write under this VI's ptag.
                    unsafe { ranges::scatter(&target, 0, seg.payload) };
                    true
                } else {
                    false
                }
            }
            Target::Buffered => false,
        };
        if written {
            if let Some(plan) = self.plan_of(seg.msg_id) {
                plan.placed += len;
            }
        }
        written
    }

    /// Where the bytes of message `msg_id` placed on arrival went and how
    /// many there are; None when none were.
    pub(super) fn placed_target(&self, msg_id: MessageId) -> Option<(Target, u64)> {
        let first = self.plans.front()?.msg_id;
        let plan = self
            .plans
            .get(usize::try_from(msg_id.checked_sub(first)?).ok()?)?;
        (plan.placed > 0).then_some((plan.target, plan.placed))
    }

    /// Message `msg_id` was delivered and the receive queue's next unfilled
    /// entry is now `head`: its plan and those before it are done, and
    /// planning goes on after it.
    pub(super) fn delivered(&mut self, msg_id: MessageId, head: u64) {
        while self.plans.front().is_some_and(|p| p.msg_id <= msg_id) {
            self.plans.pop_front();
        }
        while self.waiting.front().is_some_and(|s| s.msg_id <= msg_id) {
            self.waiting.pop_front();
        }
        if self.next_plan <= msg_id {
            self.next_plan = msg_id + 1;
            self.next_recv = head;
        }
    }
}

/// The [`SegmentPlacer`] of one receive call.
pub(super) struct Arrivals<'d, 'p, 'a> {
    pub(super) direct: &'d mut DirectPlacement,
    pub(super) place: &'p mut Placement<'a>,
}

impl SegmentPlacer for Arrivals<'_, '_, '_> {
    fn place_segment(&mut self, seg: &ArrivingSegment<'_>) -> bool {
        self.direct.place(self.place, seg)
    }
}
