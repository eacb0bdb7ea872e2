//! The shared-memory device without CMA (`OPENVIA_CMA=0`, as where the
//! kernel refuses it): a peer's RDMA operations stream through the ring in
//! chunks, so the region they name can be deregistered between two. The
//! smallest ring makes the operation take many turns of it.

mod scenarios;

use scenarios::SHM;

fn without_cma() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // Before the first NIC of this process reads the configuration.
    ONCE.call_once(|| {
        std::env::set_var("OPENVIA_CMA", "0");
        std::env::set_var("OPENVIA_RING_BYTES", "65536");
    });
}

/// Larger than the ring, so the operation takes many chunks.
const LEN: usize = 7 << 20;

#[test]
fn peer_rdma_write_into_region_deregistered_midway() {
    without_cma();
    scenarios::dereg::peer_rdma_on_region_deregistered_midway(SHM, "t-nocma-w", false, LEN);
}

#[test]
fn peer_rdma_read_from_region_deregistered_midway() {
    without_cma();
    scenarios::dereg::peer_rdma_on_region_deregistered_midway(SHM, "t-nocma-r", true, LEN);
}
