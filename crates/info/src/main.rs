//! viainfo: what `ibv_devinfo` is to verbs, for openvia. Lists the devices
//! this host can open with the attributes VipQueryNic reports, and every
//! `OPENVIA_*` setting with its value in force and where it came from.
//! The settings table lives in `openvia_core::settings`; this tool also
//! prints the docs generated from it (`--settings-doc`).

mod devices;

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use openvia_core::settings::{self, Source};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(
    name = "viainfo",
    version,
    about = "The VIA devices this host can open, their attributes, and the OPENVIA_* settings in force"
)]
struct Cli {
    /// Every attribute VipQueryNic reports, and each setting's meaning.
    #[arg(short, long)]
    verbose: bool,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Only this device (e.g. /dev/via_lo, /dev/via_eth0).
    #[arg(short, long)]
    device: Option<String>,
    /// Print the settings page generated from the table, and nothing else.
    #[arg(long, value_enum)]
    settings_doc: Option<DocFormat>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum DocFormat {
    Markdown,
    Man,
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

fn print_device(o: &mut String, d: &devices::DeviceInfo, verbose: bool) {
    let mut head = format!("{:<18} {}", d.name, d.kind);
    if let Some(i) = &d.interface {
        head += &format!(" on {i}");
    }
    if let Some(a) = &d.address {
        head += &format!(", address {a}");
    }
    if let Some(m) = d.mtu {
        head += &format!(", MTU {m}");
    }
    let _ = writeln!(o, "{head}");
    let _ = writeln!(o, "    behind:  {}", d.behind);
    if let Some(e) = &d.error {
        let _ = writeln!(o, "    cannot open: {e}");
        return;
    }
    if let (Some(p), Some(b)) = (&d.segment_policy, d.segment_bytes) {
        let _ = writeln!(o, "    segment: {p} ({b} payload bytes per datagram)");
    }
    let Some(a) = &d.attributes else { return };
    let _ = writeln!(
        o,
        "    max transfer {}, {} segments per descriptor, reliability {}, RDMA read on {}, native MTU {}",
        human_bytes(a.max_transfer_size),
        a.max_segments_per_desc,
        d.reliability.join(" "),
        d.rdma_read.join(" "),
        a.native_mtu
    );
    if verbose {
        let v = serde_json::to_value(a).unwrap_or_default();
        if let Some(m) = v.as_object() {
            for (k, v) in m {
                let _ = writeln!(o, "      {k:<26} {v}");
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.settings_doc {
        Some(DocFormat::Markdown) => return emit(&settings::markdown(), ExitCode::SUCCESS),
        Some(DocFormat::Man) => {
            return emit(
                &settings::man_page(env!("CARGO_PKG_VERSION")),
                ExitCode::SUCCESS,
            )
        }
        None => {}
    }
    let devs = match &cli.device {
        Some(name) => vec![devices::probe(
            name,
            if matches!(name.as_str(), "/dev/via_lo" | "" | "lo" | "via_lo") {
                "shm"
            } else {
                "udp"
            },
            None,
        )],
        None => devices::all(),
    };
    let mut o = String::new();
    let in_force = settings::in_force();
    let unknown = settings::unknown_in_env();
    if cli.json {
        let settings: Vec<_> = in_force
            .iter()
            .map(|r| {
                json!({
                    "name": r.setting.name,
                    "value": r.value,
                    "source": r.source.key(),
                    "default": r.setting.default,
                    "scope": r.setting.scope.key(),
                    "doc": r.setting.doc,
                })
            })
            .collect();
        let out = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "devices": devs,
            "settings": settings,
            "unknown_env": unknown,
        });
        let _ = writeln!(o, "{out:#}");
    } else {
        let _ = writeln!(o, "openvia {} devices:", env!("CARGO_PKG_VERSION"));
        for d in &devs {
            print_device(&mut o, d, cli.verbose);
        }
        let _ = writeln!(
            o,
            "\nsettings in force (docs/settings.md, openvia-settings(7)):"
        );
        for r in &in_force {
            let src = match r.source {
                Source::Env => "env",
                Source::Default => "default",
            };
            let _ = writeln!(o, "  {:<27} {:<24} ({src})", r.setting.name, r.value);
            if cli.verbose {
                let _ = writeln!(o, "      {}", r.setting.doc);
            }
        }
        for u in &unknown {
            let _ = writeln!(o, "  {u:<27} not an openvia setting (misspelt?)");
        }
    }
    let code = if devs.iter().all(|d| d.error.is_some()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    emit(&o, code)
}

/// Writes the whole output at once; a reader that went away (`| head`)
/// is no error worth a panic.
fn emit(text: &str, code: ExitCode) -> ExitCode {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    code
}
