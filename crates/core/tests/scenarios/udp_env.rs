//! The network device on loopback for in-process tests (also included by
//! the PVM link tests): bound to 127.0.0.1, an agent port of this
//! process's own so parallel test binaries never meet, and short
//! keepalive and dead-peer times.

pub fn udp_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let port = 20000 + (std::process::id() % 30000);
        std::env::set_var("OPENVIA_UDP_BIND", "127.0.0.1");
        std::env::set_var("OPENVIA_AGENT_PORT", port.to_string());
        std::env::set_var("OPENVIA_UDP_DEAD_MS", "1500");
        std::env::set_var("OPENVIA_UDP_KEEPALIVE_MS", "200");
    });
}
