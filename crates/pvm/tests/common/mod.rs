//! Settings the link tests share: openvia's network device on loopback,
//! an agent port of this process's own (parallel test binaries never
//! meet), a short dead-peer time, and a small window and fragments so a
//! large message needs many rounds of the window.

pub fn udp_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let port = 20000 + (std::process::id() % 30000);
        std::env::set_var("OPENVIA_UDP_BIND", "127.0.0.1");
        std::env::set_var("OPENVIA_AGENT_PORT", port.to_string());
        std::env::set_var("OPENVIA_UDP_DEAD_MS", "1500");
        std::env::set_var("OPENVIA_UDP_KEEPALIVE_MS", "200");
        if std::env::var_os("OPENVIA_PVM_WINDOW").is_none() {
            std::env::set_var("OPENVIA_PVM_WINDOW", "4");
            std::env::set_var("OPENVIA_PVM_FRAG", "65536");
        }
    });
}
