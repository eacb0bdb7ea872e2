//! Task identifiers in PVM's shape: a host field and a local field packed in
//! one positive int (t40001 is local task 1 of host 1), daemons marked by
//! the top bit. Programs print tids, so ours must look like PVM's.

/// Bits 18..30 hold the host number.
pub const HOST_SHIFT: u32 = 18;
/// Mask of the host field.
pub const HOST_MASK: i32 = 0x3ffc_0000;
/// Mask of the local (per-host task) field.
pub const LOCAL_MASK: i32 = 0x3_ffff;
/// Set in the tid of a pvmd.
pub const DAEMON_BIT: u32 = 0x8000_0000;

/// The host part of host number `n` (host 1 is 0x40000).
pub fn host_tid(n: u32) -> i32 {
    ((n << HOST_SHIFT) as i32) & HOST_MASK
}

/// The tid of the pvmd on host `n` (t80040000 for host 1).
pub fn daemon_tid(n: u32) -> i32 {
    (DAEMON_BIT | (n << HOST_SHIFT)) as i32
}

/// The tid of local task `local` on host `n`.
pub fn task_tid(n: u32, local: i32) -> i32 {
    host_tid(n) | (local & LOCAL_MASK)
}

/// The host number of any tid (0 for tids without a host part).
pub fn host_num(tid: i32) -> u32 {
    ((tid & HOST_MASK) as u32) >> HOST_SHIFT
}

/// The host part of any tid.
pub fn host_of(tid: i32) -> i32 {
    tid & HOST_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_pvm() {
        assert_eq!(task_tid(1, 1), 0x40001);
        assert_eq!(daemon_tid(1) as u32, 0x8004_0000);
        assert_eq!(host_of(0x40007), 0x40000);
        assert_eq!(host_tid(2), 0x80000);
        assert_eq!(host_num(0x80003), 2);
        assert_eq!(host_num(daemon_tid(3)), 3);
    }
}
