//! Settings the link tests share: openvia's network device on loopback,
//! an agent port of this process's own (parallel test binaries never
//! meet), a short dead-peer time, and a small window and fragments so a
//! large message needs many rounds of the window.

#[path = "../../../core/tests/scenarios/udp_env.rs"]
mod loopback;

pub fn udp_env() {
    loopback::udp_env();
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("OPENVIA_PVM_WINDOW").is_none() {
            std::env::set_var("OPENVIA_PVM_WINDOW", "4");
            std::env::set_var("OPENVIA_PVM_FRAG", "65536");
        }
    });
}
